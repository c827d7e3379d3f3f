package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/weights/chattemplate"
)

// Option adjusts a request before it is sent to the engine. The options below cover what most
// callers need; any function of this type can set the rest of engine.Request (logprobs, stop token
// ids, a logit bias, ...).
type Option func(*engine.Request)

// MaxTokens caps the tokens generated; without it, or with n 0, the cap is Model.MaxTokens. A cap
// beyond the context is what the context leaves after the prompt; a negative n is refused
// (engine.ErrInvalidRequest).
func MaxTokens(n int) Option { return func(r *engine.Request) { r.MaxTokens = n } }

// Temperature sets the sampling temperature; 0 is greedy decoding (the most likely token each step).
// The sampling options' values must lie in the ranges engine.SamplingParams gives, or the request
// fails with engine.ErrInvalidRequest (NaN and infinities included).
func Temperature(t float64) Option { return func(r *engine.Request) { r.Sampling.Temperature = t } }

// TopP keeps the most likely tokens up to probability mass p (nucleus sampling); 0 or 1 turns it off.
func TopP(p float64) Option { return func(r *engine.Request) { r.Sampling.TopP = p } }

// TopK keeps the k most likely tokens; 0 or -1 turns it off.
func TopK(k int) Option { return func(r *engine.Request) { r.Sampling.TopK = k } }

// MinP drops the tokens less likely than p times the most likely one; 0 turns it off.
func MinP(p float64) Option { return func(r *engine.Request) { r.Sampling.MinP = p } }

// Seed makes the draws reproducible: the same seed, prompt and options give the same text.
func Seed(seed uint64) Option { return func(r *engine.Request) { r.Sampling.Seed = &seed } }

// RepetitionPenalty penalises tokens of the prompt and the output so far (HF style; 1 or 0 is off).
func RepetitionPenalty(p float64) Option {
	return func(r *engine.Request) { r.Sampling.RepetitionPenalty = p }
}

// PresencePenalty and FrequencyPenalty penalise tokens already generated, once and per occurrence
// (OpenAI's presence_penalty and frequency_penalty).
func PresencePenalty(p float64) Option {
	return func(r *engine.Request) { r.Sampling.PresencePenalty = p }
}

// FrequencyPenalty: see PresencePenalty.
func FrequencyPenalty(p float64) Option {
	return func(r *engine.Request) { r.Sampling.FrequencyPenalty = p }
}

// Stop ends the output where one of the strings appears; the text stops before it. Empty strings
// are ignored.
func Stop(stops ...string) Option {
	return func(r *engine.Request) { r.Stop = append(r.Stop, stops...) }
}

// IncludeStopString keeps a matched Stop string at the end of the text.
func IncludeStopString() Option { return func(r *engine.Request) { r.IncludeStopString = true } }

// IgnoreEOS keeps generating past the model's end-of-sequence tokens, up to MaxTokens.
func IgnoreEOS() Option { return func(r *engine.Request) { r.IgnoreEOS = true } }

// Result is a finished generation.
type Result struct {
	// Text is the generated text (without a matched stop string, unless IncludeStopString).
	Text string
	// TokenIDs are the generated tokens, an EOS or stop token that ended them included.
	TokenIDs []int32
	// FinishReason says why the output ended: engine.FinishStop (EOS, a stop string) or
	// engine.FinishLength (MaxTokens, the context).
	FinishReason engine.FinishReason
	// StopString is the stop string that ended the output, if one did.
	StopString string
	// Usage counts the prompt's tokens (and those found in the prefix cache) and the output's.
	Usage engine.Usage
}

// Request returns the engine request for a prompt of token ids under the model's defaults and opts.
// A MaxTokens of 0 after opts is the model's default cap (Model.MaxTokens), not the engine's whole
// context.
func (m *Model) Request(promptIDs []int32, opts ...Option) engine.Request {
	r := engine.Request{PromptIDs: promptIDs, MaxTokens: m.maxTokens, Sampling: m.sampling}
	r.Sampling.LogitBias = nil
	for _, o := range opts {
		o(&r)
	}
	if r.MaxTokens == 0 {
		r.MaxTokens = m.maxTokens
	}
	return r
}

// Generate completes prompt (encoded with the tokenizer's special tokens, such as BOS) and returns the
// whole result. When ctx ends first it returns the output so far and an error wrapping ctx.Err() and,
// where one was given (context.WithCancelCause, context.WithTimeoutCause), context.Cause(ctx).
func (m *Model) Generate(ctx context.Context, prompt string, opts ...Option) (Result, error) {
	return collect(m.Stream(ctx, prompt, opts...))
}

// Stream completes prompt as Generate does, yielding the output as it is generated: each
// engine.Output holds the new text and tokens, and the last one the finish reason and usage. Leaving
// the loop early or ending ctx aborts the request. A request that fails, or that ctx ends, yields one
// last Output with the error (for ctx, the error Generate returns). The request starts when the loop
// does, and each loop over the same sequence runs it anew.
func (m *Model) Stream(ctx context.Context, prompt string, opts ...Option) iter.Seq2[engine.Output, error] {
	return m.stream(ctx, func() ([]int32, error) { return m.tok.Encode(prompt, true), nil }, opts)
}

// Message is one message of a chat: a role ("system", "user" or "assistant") and its text.
type Message = chattemplate.Message

// Chat renders messages with the model's chat template, ending with the start of the assistant's turn,
// and generates the assistant's reply as Generate does. It fails with ErrNoChatTemplate when the model
// has no usable template.
func (m *Model) Chat(ctx context.Context, messages []Message, opts ...Option) (Result, error) {
	return collect(m.ChatStream(ctx, messages, opts...))
}

// ChatStream is Chat yielding the reply as it is generated, as Stream does.
func (m *Model) ChatStream(ctx context.Context, messages []Message, opts ...Option) iter.Seq2[engine.Output, error] {
	return m.stream(ctx, func() ([]int32, error) {
		prompt, err := m.RenderChat(messages)
		if err != nil {
			return nil, err
		}
		return m.tok.Encode(prompt, false), nil // the template writes the special tokens
	}, opts)
}

// RenderChat returns the prompt text the model's chat template makes of messages, ending with the start
// of the assistant's turn.
func (m *Model) RenderChat(messages []Message) (string, error) {
	tpl, err := m.ChatTemplate()
	if err != nil {
		return "", err
	}
	tc := m.folder.TokenizerConfig
	prompt, err := tpl.Render(chattemplate.Input{Messages: messages, AddGenerationPrompt: true,
		BOSToken: tc.BOSToken, EOSToken: tc.EOSToken, PadToken: tc.PadToken})
	if err != nil {
		return "", fmt.Errorf("llm: chat template: %w", err)
	}
	return prompt, nil
}

// stream runs one request whose prompt encode gives, yielding its outputs.
func (m *Model) stream(ctx context.Context, encode func() ([]int32, error), opts []Option) iter.Seq2[engine.Output, error] {
	return func(yield func(engine.Output, error) bool) {
		ids, err := encode()
		if err == nil {
			err = contextError(ctx)
		}
		if err != nil {
			yield(engine.Output{}, err)
			return
		}
		reqCtx, cancel := context.WithCancel(ctx)
		defer cancel() // a loop left early aborts the request
		s, err := m.engine.Add(reqCtx, m.Request(ids, opts...))
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				err = withCause(ctx, err)
			}
			yield(engine.Output{}, err)
			return
		}
		for {
			// The request's context ends it; Recv then gets its last (aborted) output.
			out, err := s.Recv(context.Background())
			if errors.Is(err, io.EOF) {
				return
			}
			if err == nil {
				err = outputError(ctx, out)
			}
			if !yield(out, err) || err != nil {
				return
			}
		}
	}
}

// outputError is the error a final output carries: the engine's for FinishError, ctx's (or the
// engine's) for FinishAbort.
func outputError(ctx context.Context, out engine.Output) error {
	switch out.FinishReason {
	case engine.FinishError:
		return out.Err
	case engine.FinishAbort:
		if err := contextError(ctx); err != nil {
			return err
		}
		if out.Err != nil {
			return out.Err
		}
		return fmt.Errorf("llm: request aborted: %w", engine.ErrClosed)
	}
	return nil
}

// contextError returns ctx.Err(), wrapping ctx's cause too where one was given (one that differs from
// ctx.Err()); nil while ctx has not ended.
func contextError(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return withCause(ctx, ctx.Err())
}

// withCause wraps the cause of ended ctx into err, which wraps ctx.Err(), unless the cause is that
// error itself.
func withCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// collect gathers a stream into a Result.
func collect(outs iter.Seq2[engine.Output, error]) (Result, error) {
	var r Result
	var text []byte
	for out, err := range outs {
		text = append(text, out.Text...)
		r.TokenIDs = append(r.TokenIDs, out.TokenIDs...)
		if out.Finished() {
			r.FinishReason, r.StopString, r.Usage = out.FinishReason, out.StopString, out.Usage
		}
		if err != nil {
			r.Text = string(text)
			return r, err
		}
	}
	r.Text = string(text)
	r.TokenIDs = slices.Clip(r.TokenIDs)
	return r, nil
}
