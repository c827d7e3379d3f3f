package openai

import (
	"context"

	"github.com/gollm/gollm/engine"
)

// Engine is what the server needs from the engine. FromEngine adapts *engine.Engine; tests use fakes.
type Engine interface {
	// Add queues a request; cancelling ctx aborts it. Errors wrap engine.ErrPromptTooLong,
	// engine.ErrInvalidRequest or engine.ErrClosed.
	Add(ctx context.Context, req engine.Request) (Stream, error)
	// Stats is a snapshot for /metrics.
	Stats() engine.Stats
	// MaxModelLen is the most tokens (prompt plus output) one request can hold.
	MaxModelLen() int
}

// failingEngine is implemented by engines that can fail for good (FromEngine's adapter, see
// engine.ErrFailed): Err is nil while they serve. Once it is not, /health answers 503.
type failingEngine interface {
	Err() error
}

// Stream delivers one request's outputs; Recv returns io.EOF after the last one.
type Stream interface {
	Recv(ctx context.Context) (engine.Output, error)
}

// Tokenizer is what the server needs from the tokenizer. *tokenizer.Tokenizer satisfies it.
type Tokenizer interface {
	// Encode turns text into ids; addSpecial adds the model's special tokens (BOS).
	Encode(text string, addSpecial bool) []int32
	// Decode turns ids into text; skipSpecial leaves special tokens out.
	Decode(ids []int32, skipSpecial bool) string
}

// FromEngine adapts an *engine.Engine to Engine.
func FromEngine(e *engine.Engine) Engine { return engineAdapter{e} }

type engineAdapter struct{ e *engine.Engine }

func (a engineAdapter) Add(ctx context.Context, req engine.Request) (Stream, error) {
	s, err := a.e.Add(ctx, req)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (a engineAdapter) Stats() engine.Stats { return a.e.Stats() }

func (a engineAdapter) MaxModelLen() int { return a.e.MaxModelLen() }

func (a engineAdapter) Err() error { return a.e.Err() }
