package engine

import (
	"context"
	"io"
	"sync"
)

// FinishReason says why a request stopped producing tokens; empty while it runs. The values are the
// OpenAI API's where it has one.
type FinishReason string

// Finish reasons.
const (
	// FinishStop: an EOS token, a stop token id or a stop string.
	FinishStop FinishReason = "stop"
	// FinishLength: max tokens, or the model's context length.
	FinishLength FinishReason = "length"
	// FinishAbort: the request's context was cancelled, or the engine closed before it finished.
	FinishAbort FinishReason = "abort"
	// FinishError: the request could not run (see Output.Err).
	FinishError FinishReason = "error"
)

// Usage counts a request's tokens so far.
type Usage struct {
	PromptTokens     int // tokens of the prompt
	CompletionTokens int // tokens generated so far
	// CachedTokens is how many prompt tokens were served from the prefix cache.
	CachedTokens int
}

// Output is one update of a request: the tokens produced since the previous update and their text.
// Updates that pile up while the reader is slow are merged into one, so a reader sees every token
// exactly once but not necessarily one Output per step.
type Output struct {
	// TokenIDs are the new tokens, in order. A token that ends the request (EOS, a stop token id)
	// is included, though its text is not.
	TokenIDs []int32
	// Text is the new text. It excludes anything after a matched stop string, and the stop string
	// itself unless Request.IncludeStopString is set; it lags
	// TokenIDs while the end of the text could still be the start of a stop string, an
	// incomplete character or a run of byte tokens whose text a later token may still change
	// (ByteRunTokenizer); the final Output carries the rest.
	Text string
	// Logprobs has one entry per token of TokenIDs when the request asked for logprobs.
	Logprobs []Logprobs
	// PromptLogprobs is set on the Output that carries the request's first token when the request
	// asked for them (Request.PromptLogprobs): one entry per prompt token, in order. The first entry
	// has only ID and Text, since no earlier token gives it a probability (the API's null); each
	// other has the token's log-probability given the tokens before it, its rank and the
	// PromptTopLogprobs alternatives. Text is the token's piece of the decoded prompt (skipping special
	// tokens unless KeepSpecialTokens), so the pieces spell the prompt as Logprobs' spell the output.
	PromptLogprobs []Logprobs
	// FinishReason is set on the request's last Output, and only there.
	FinishReason FinishReason
	// StopString is the stop string that ended the request, if one did.
	StopString string
	// Usage is the request's running total, as of this Output.
	Usage Usage
	// Err explains FinishError (and, on an engine failure, FinishAbort).
	Err error
}

// Finished reports whether this is the request's last Output.
func (o *Output) Finished() bool { return o.FinishReason != "" }

// merge appends a later update to o, all but its Text (the Stream gathers text in a buffer).
func (o *Output) merge(later Output) {
	o.TokenIDs = append(o.TokenIDs, later.TokenIDs...)
	o.Logprobs = append(o.Logprobs, later.Logprobs...)
	if o.PromptLogprobs == nil {
		o.PromptLogprobs = later.PromptLogprobs
	}
	o.FinishReason = later.FinishReason
	o.StopString = later.StopString
	o.Usage = later.Usage
	o.Err = later.Err
}

// Stream delivers one request's outputs. The engine never blocks on it: updates the reader has not
// taken yet are merged (so its memory is bounded by the request's own output). Its methods are safe
// to call from any goroutine, but it has one reader.
type Stream struct {
	id string

	mu       sync.Mutex
	pending  Output // merged updates not yet received, but for their text
	text     []byte // pending's text, gathered in a buffer so that merging costs what it adds
	has      bool   // pending holds an update not yet received
	finished bool   // the last update has been pushed
	received bool   // the last update has been received
	ready    chan struct{}
}

func newStream(id string) *Stream {
	return &Stream{id: id, ready: make(chan struct{}, 1)}
}

// ID returns the request's id (Request.ID, or one the engine made up).
func (s *Stream) ID() string { return s.id }

// push hands an update to the reader, merging it with one not yet taken. Called by the step loop.
func (s *Stream) push(o Output) {
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return
	}
	s.text = append(s.text, o.Text...)
	o.Text = ""
	if s.has {
		s.pending.merge(o)
	} else {
		s.pending, s.has = o, true
	}
	s.finished = o.Finished()
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Recv waits for the next update and returns it. After the last one (Output.Finished) it returns
// io.EOF. ctx only bounds this wait: cancelling the request is done with the context given to Add.
func (s *Stream) Recv(ctx context.Context) (Output, error) {
	for {
		s.mu.Lock()
		if s.has {
			o := s.pending
			o.Text = string(s.text)
			s.pending, s.has, s.text = Output{}, false, s.text[:0]
			if o.Finished() {
				s.received = true
			}
			s.mu.Unlock()
			return o, nil
		}
		if s.received {
			s.mu.Unlock()
			return Output{}, io.EOF
		}
		s.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			return Output{}, ctx.Err()
		}
	}
}
