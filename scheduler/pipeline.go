package scheduler

import (
	"fmt"

	"github.com/gollm/gollm/kvcache"
)

// ScheduleNext schedules the decode step that follows prev before prev's sampled tokens are known,
// so that the engine can launch it while prev still runs; the device feeds each chunk its input
// token from prev's samples (see Batch.InputFrom). It returns nil, and changes nothing, unless all
// of these hold:
//
//   - prev is the only batch outstanding (scheduled, not yet updated or discarded);
//   - prev holds decodes only, each needing logits, and every running sequence has one of them
//     (none is being prefilled);
//   - a Schedule now could admit nobody: the waiting queue is empty or MaxNumSeqs sequences run;
//   - the pool has a slot for every chosen sequence's next token without preempting anyone
//     (evicting unused prefix-cache blocks is fine); ScheduleNext never preempts.
//
// Each decode of prev whose sequence is still running and will not reach MaxTokens with prev's
// token (Update(prev) finishes those by length) gets a decode chunk one position further, in
// prev's chunk order; its TokenIDs entry is 0, a stand-in for the token prev samples. The sequence
// holds a hidden placeholder for that token, with a slot in the pool, until Update(prev) replaces
// it with the sampled token, or Discard(prev) (or of the returned batch) removes it (see
// [Scheduler.Update] and [Scheduler.Discard]). If no chunk results, ScheduleNext returns nil.
//
// The returned batch is handed back after prev: Update(prev), then Update (or Discard) of it; or
// it is cancelled with Discard before Update(prev).
func (s *Scheduler) ScheduleNext(prev *Batch) *Batch {
	if prev == nil || len(s.outstanding) != 1 || s.outstanding[0] != prev {
		return nil
	}
	if prev.NumDecodes != len(prev.Chunks) || prev.NumLogits != len(prev.Chunks) {
		return nil
	}
	if len(s.waiting) > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		return nil
	}
	bs := s.pool.BlockSize()
	running, newBlocks := 0, 0
	chosen := make([]int, 0, len(prev.Chunks)) // indices into prev.Chunks
	for i := range prev.Chunks {
		c := &prev.Chunks[i]
		seq := c.Seq
		if !c.NeedsLogits || c.Len != 1 {
			return nil
		}
		if seq.status != StatusRunning {
			continue
		}
		running++
		// The state Schedule (or a previous ScheduleNext and Update) left: prev computes the
		// sequence's last token, which holds a slot, and there is no placeholder yet.
		if seq.numAhead != 0 || seq.numComputed != c.Start || len(seq.tokens) != c.Start+1 ||
			seq.numReserved != len(seq.tokens) {
			return nil
		}
		if seq.NumOutputTokens()+1 >= seq.limits.MaxTokens {
			continue // Update(prev) finishes it by length
		}
		chosen = append(chosen, i)
		newBlocks += kvcache.BlocksFor(len(seq.tokens)+1, bs) - kvcache.BlocksFor(len(seq.tokens), bs)
	}
	if running != len(s.running) || len(chosen) == 0 || newBlocks > s.pool.NumAvailableBlocks() {
		return nil
	}

	s.step++
	b := &Batch{
		step:       s.step,
		Chunks:     make([]Chunk, 0, len(chosen)),
		NumDecodes: len(chosen),
		InputFrom:  make([]int32, 0, len(chosen)),
	}
	for _, i := range chosen {
		seq := prev.Chunks[i].Seq
		if err := s.pool.Append(seq.id, 0); err != nil {
			panic(fmt.Sprintf("scheduler: schedule next: %v after checking capacity: %v", seq, err))
		}
		seq.tokens = append(seq.tokens, 0)
		seq.numAhead = 1
		seq.numReserved = len(seq.tokens)
		table, err := s.pool.BlockTable(seq.id)
		if err != nil {
			panic(fmt.Sprintf("scheduler: schedule next: %v", err))
		}
		start := len(seq.tokens) - 1
		b.Chunks = append(b.Chunks, Chunk{
			Seq:         seq,
			Start:       start,
			Len:         1,
			BlockTable:  table,
			ContextLen:  start + 1,
			NeedsLogits: true,
		})
		b.InputFrom = append(b.InputFrom, int32(i)) // every chunk of prev has a logits row
		b.NumTokens++
		b.NumLogits++
	}
	s.finalize(b) // the placeholder, 0, becomes the chunk's TokenIDs entry
	s.outstanding = append(s.outstanding, b)
	return b
}
