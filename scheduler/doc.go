// Package scheduler decides which sequences run in each step of the engine and how many tokens
// each: waiting (first come, first served) and running queues, a token budget and a sequence cap per
// step, decodes before prefill, chunked prefill, admission by KV-block availability (counting
// prefix-cache hits) and preemption by recompute. It keeps the [kvcache.Pool]'s allocations in step
// with the sequences: a sequence holds blocks exactly while it is running.
//
// It is pure Go bookkeeping: it never touches a device, a model, a tokenizer or a request's
// transport. It does not sample and does not detokenize; it applies stop token ids and MaxTokens,
// and the engine finishes sequences for anything else (stop strings, cancellation).
//
// # The step
//
// The engine's loop is three calls around the forward pass:
//
//	b := s.Schedule()                 // who runs, which tokens, their slots; KV blocks reserved
//	// the model's flat step: b.TokenIDs, b.Positions, b.SlotMapping (NumTokens each, decodes
//	// first); per chunk c: c.Offset (query start), c.Len, c.ContextLen, c.BlockTable. Compute
//	// logits at rows b.LogitIndices and sample one token per row.
//	seqs, err := s.Update(b, sampled) // tokens computed and appended; stop tokens, MaxTokens
//	// stream each seq's LastToken; report those with seq.Finished() and those in b.Finished.
//
// Requests enter with [Scheduler.Add] and leave by finishing (stop token, MaxTokens), by
// [Scheduler.Finish] or [Scheduler.Abort]; a finished sequence's blocks are released at once, so a
// sequence aborted before a step's Schedule frees its blocks for that very step.
//
// # Pipelined decode
//
// To keep the device busy, the engine may launch step N+1 while step N still runs: the input tokens
// of step N+1's decodes are step N's samples, which only the device knows yet.
// [Scheduler.ScheduleNext] schedules that step before Update of step N, as Schedule would after
// it (decodes, prefills under way, admissions) but without preempting; each decode row reads its
// input from step N's sampled tokens on the device (Batch.InputFrom, −1 for rows whose token is
// known). Batches are handed back oldest first:
//
//	b := s.Schedule()
//	launch(b)
//	for {
//		next := s.ScheduleNext(b) // nil when it would have to preempt, or has nothing to run
//		if next != nil {
//			launch(next) // inputs: b's samples on the device, picked by next.InputFrom
//		}
//		seqs, err := s.Update(b, wait(b))
//		// stream seqs; Finish those that hit a stop string
//		if next == nil {
//			break // back to a normal Schedule
//		}
//		b = next
//	}
//
// Between ScheduleNext and Update of step N, each decoding sequence of step N+1 holds a hidden placeholder
// for its unknown token (with a KV slot); Update replaces it with the sampled token, Discard of
// step N drops it together with step N+1, and Discard of step N+1 alone (not launched) cancels
// it, undoing its admissions (back to the head of the waiting queue). ScheduleNext never preempts:
// when a decode's placeholder needs a block the pool cannot give, it returns nil and the next
// Schedule preempts; an admission that does not fit just waits, as in Schedule.
//
// # Policy
//
// A step's token budget (Config.MaxNumBatchedTokens) goes first to one token for every running
// sequence that is decoding, then to prompts already being prefilled, then to admitting waiting
// sequences. A prompt longer than what is left of the budget is prefilled in chunks over several
// steps, alongside other sequences' decodes. Admission is first come, first served and all or
// nothing on KV blocks: the head of the waiting queue gets blocks for all its tokens (minus the
// prefix-cache hits, which it skips computing) or nobody behind it is admitted, so no request
// starves behind later, smaller ones. With the prefix cache on, the head also waits (and so everybody
// behind it) while its first full page not yet computed is one a running sequence is computing for the
// same tokens: a step or a few later it takes that page from the cache instead of computing it again
// (n > 1 choices of one prompt, requests behind one system prompt that arrive together). When a
// decoding sequence needs a new block and the pool has
// none, the latest-arrived running sequence is preempted: its blocks are freed, NumComputed drops
// to 0, and it goes back to the head of the waiting queue with its output tokens kept, to be
// recomputed as part of its prompt when admitted again (cheaply, if its blocks are still in the
// prefix cache). A sequence that could not fit even the empty pool finishes with FinishError.
//
// # Chunked prefill: the budget's trade-off
//
// MaxNumBatchedTokens (vLLM's max_num_batched_tokens) is the one knob of chunked prefill. The rule above
// fixes what a step holds: every decode first (a running sequence never waits a step for its token), then
// the prompts, in arrival order, each chunk as large as what is left of the budget (a step carries the
// whole budget as long as prompt tokens wait, within the sequence cap and the KV pool). A prompt always
// progresses: the budget is at least MaxNumSeqs, so with every other running sequence decoding at least
// one token is left for it. From the rule, counting steps (TestChunkedPrefillPolicy plays it through):
//
//   - a prompt of P tokens alone in prefill beside d decodes gets its first token after
//     ceil(P / (budget − d)) steps;
//   - a prompt arriving behind others waits for the prefill tokens ahead of it, plus its own, at
//     budget − d a step: first come, first served, so a short prompt behind a long one waits for the long
//     one's remaining chunks and no longer;
//   - a decoding sequence gets a token every step; the time between its tokens is the step's time,
//     which grows with the step's tokens, up to the budget.
//
// So a larger budget gives prefill larger matrix products (throughput, and time to first token of long
// prompts) and costs the running decodes a longer step while prompts are prefilled (inter-token latency);
// a smaller one does the reverse. Config.LongPrefillTokenThreshold (vLLM's long_prefill_token_threshold)
// caps each prompt's chunk below the budget: a short prompt behind a long one then starts in the step it
// arrives, and the long prompt's prefill takes more steps. The scheduler takes the budget it is given (the engine's default is
// engine.DefaultMaxNumBatchedTokens); `gollm bench serve` with a mix of long and short prompts
// (--long-input-len, --long-fraction) measures both sides at a given budget (docs/bench/prefill-h200.md).
//
// With KV groups (a model with sliding-window layers, see kvcache), a sequence takes a block of every
// group per page when admitted, and its sliding groups give pages back as it advances: admission and
// preemption count blocks of every group, and a sequence that could not be admitted again (more pages
// than the empty pool holds at once, kvcache.Pool.MaxTokens) finishes with FinishError.
//
// A Scheduler is not safe for concurrent use: one goroutine owns it and its pool.
package scheduler
