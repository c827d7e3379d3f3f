package scheduler

import (
	"fmt"
	"slices"

	"github.com/gollm/gollm/kvcache"
)

// Status is where a sequence is in its life.
type Status int

// Sequence statuses.
const (
	StatusWaiting  Status = iota // queued for admission (new, or preempted and to be recomputed)
	StatusRunning                // holds blocks and is scheduled in steps
	StatusFinished               // done; see FinishReason; holds no blocks
)

// String returns "waiting", "running" or "finished".
func (s Status) String() string {
	switch s {
	case StatusWaiting:
		return "waiting"
	case StatusRunning:
		return "running"
	case StatusFinished:
		return "finished"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// FinishReason says why a sequence finished.
type FinishReason int

// Finish reasons. FinishStop and FinishLength are the OpenAI API's "stop" and "length".
const (
	FinishNone   FinishReason = iota // not finished
	FinishStop                       // a stop token was sampled, or the engine saw a stop string
	FinishLength                     // MaxTokens output tokens were produced
	FinishAbort                      // the request was cancelled
	FinishError                      // the sequence cannot run (e.g. it outgrew the KV pool); see Err
)

// String returns "", "stop", "length", "abort" or "error".
func (r FinishReason) String() string {
	switch r {
	case FinishNone:
		return ""
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishAbort:
		return "abort"
	case FinishError:
		return "error"
	}
	return fmt.Sprintf("FinishReason(%d)", int(r))
}

// Limits bound a sequence's output; the scheduler applies them when it appends sampled tokens.
type Limits struct {
	// MaxTokens is the maximum number of output tokens; > 0.
	MaxTokens int
	// MinTokens is the number of output tokens before which stop tokens do not stop the sequence.
	MinTokens int
	// StopTokenIDs finish the sequence with FinishStop when sampled (the token is kept in the
	// output). Typically the model's EOS ids; empty to ignore EOS.
	StopTokenIDs []int32
	// PromptLogits says the engine wants the logits of every prompt position (prompt logprobs): until
	// its first output token (after which the engine has read them, and a recompute after a
	// preemption is planned like any other) the sequence takes no prefix-cache hits
	// (kvcache.Pool.AllocateUncached), and its prefill chunks stay within the step's
	// Config.MaxPromptLogitRows.
	PromptLogits bool
}

// Sequence is one request's token state as the scheduler sees it: its prompt and output tokens, how
// many of them have KV in the cache (NumComputed), its status and its arrival order.
//
// The scheduler owns a Sequence's state once it is added: read it through the methods, change it
// only through the [Scheduler] (Update, Finish, Abort). The engine may keep a *Sequence to read it.
type Sequence struct {
	id     kvcache.SeqID
	limits Limits

	tokens    []int32 // prompt, then output, then numAhead placeholders
	numPrompt int     // len of the original prompt
	// numAhead is 1 while the sequence holds a placeholder token at the end of tokens: the input
	// of a step scheduled by ScheduleNext before the token was sampled. It holds a slot in the pool
	// and is invisible to every exported method; Update replaces it with the sampled token.
	numAhead int

	numComputed int // tokens whose KV is in the cache
	numReserved int // tokens holding a slot in the pool; 0 while not allocated

	status         Status
	reason         FinishReason
	err            error
	arrival        uint64 // FCFS order, set by Add
	numCached      int    // prefix-cache hit tokens at first admission
	numPreemptions int
	admitted       bool // admitted at least once
}

// NewSequence returns a waiting sequence with the given id, prompt (copied) and limits.
func NewSequence(id kvcache.SeqID, prompt []int32, limits Limits) *Sequence {
	limits.StopTokenIDs = slices.Clone(limits.StopTokenIDs)
	return &Sequence{
		id:        id,
		limits:    limits,
		tokens:    slices.Clone(prompt),
		numPrompt: len(prompt),
	}
}

// ID returns the sequence's id (also its id in the KV pool).
func (s *Sequence) ID() kvcache.SeqID { return s.id }

// Limits returns the sequence's output limits.
func (s *Sequence) Limits() Limits { return s.limits }

// Prompt returns the original prompt tokens. Do not modify the slice.
func (s *Sequence) Prompt() []int32 { return s.tokens[:s.numPrompt:s.numPrompt] }

// Output returns the output tokens produced so far. Do not modify the slice.
func (s *Sequence) Output() []int32 {
	n := s.numTokens()
	return s.tokens[s.numPrompt:n:n]
}

// Tokens returns the prompt followed by the output. Do not modify the slice.
func (s *Sequence) Tokens() []int32 {
	n := s.numTokens()
	return s.tokens[:n:n]
}

// LastToken returns the last token (the latest output token, or the last prompt token before any).
func (s *Sequence) LastToken() int32 { return s.tokens[s.numTokens()-1] }

// NumTokens returns the number of prompt and output tokens.
func (s *Sequence) NumTokens() int { return s.numTokens() }

// NumPromptTokens returns the length of the original prompt.
func (s *Sequence) NumPromptTokens() int { return s.numPrompt }

// NumOutputTokens returns the number of output tokens produced so far.
func (s *Sequence) NumOutputTokens() int { return s.numTokens() - s.numPrompt }

// NumComputed returns the number of leading tokens whose KV is in the cache. It starts at the
// prefix-cache hit length on admission and drops to 0 on preemption.
func (s *Sequence) NumComputed() int { return s.numComputed }

// NumCachedTokens returns how many prompt tokens were served from the prefix cache at the
// sequence's first admission (what the OpenAI API reports as cached_tokens).
func (s *Sequence) NumCachedTokens() int { return s.numCached }

// NumPreemptions returns how many times the sequence was preempted.
func (s *Sequence) NumPreemptions() int { return s.numPreemptions }

// Status returns the sequence's status.
func (s *Sequence) Status() Status { return s.status }

// Finished reports whether the sequence has finished.
func (s *Sequence) Finished() bool { return s.status == StatusFinished }

// FinishReason returns why the sequence finished, or FinishNone.
func (s *Sequence) FinishReason() FinishReason { return s.reason }

// Err returns the error of a sequence finished with FinishError, else nil.
func (s *Sequence) Err() error { return s.err }

// String describes the sequence briefly, for logs.
func (s *Sequence) String() string {
	return fmt.Sprintf("seq %d (%s, %d+%d tokens, %d computed)", s.id, s.status, s.numPrompt, s.NumOutputTokens(), s.numComputed)
}

// numTokens returns the number of real (not placeholder) tokens.
func (s *Sequence) numTokens() int { return len(s.tokens) - s.numAhead }

// dropPlaceholder removes the placeholder token from tokens, if there is one (the pool's copy is
// the caller's business).
func (s *Sequence) dropPlaceholder() {
	s.tokens = s.tokens[:len(s.tokens)-s.numAhead]
	s.numAhead = 0
}

// isStop reports whether tok stops the sequence at its current output length.
func (s *Sequence) isStop(tok int32) bool {
	return s.NumOutputTokens() >= s.limits.MinTokens && slices.Contains(s.limits.StopTokenIDs, tok)
}

// WantsPromptLogits reports whether the sequence's prompt logits are still wanted: Limits.PromptLogits
// and no output token yet (a placeholder of ScheduleNext aside). The engine reads them in its steps
// until then.
func (s *Sequence) WantsPromptLogits() bool {
	return s.limits.PromptLogits && len(s.tokens)-s.numAhead == s.numPrompt
}
