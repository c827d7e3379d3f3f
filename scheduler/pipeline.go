package scheduler

import (
	"errors"
	"fmt"

	"github.com/gollm/gollm/kvcache"
)

// admission records a sequence admitted by [Scheduler.ScheduleNext], so that cancelling the batch
// (Discard while its predecessor is outstanding) can undo it.
type admission struct {
	seq       *Sequence
	admitted  bool // seq.admitted before
	numCached int  // seq.numCached before
}

// ScheduleNext schedules the step that follows prev before prev's sampled tokens are known, so
// that the engine can launch it while prev still runs; the device feeds the token rows that need
// one of prev's samples from them (see Batch.InputFrom). It plans what Schedule would plan once
// prev is updated, in the same order and under the same budget, except that it never preempts:
//
//  1. Decodes: every chunk of prev that needs logits (a decode, or the chunk that ends a prompt)
//     of a sequence still running that will not reach MaxTokens with prev's token (Update(prev)
//     finishes those by length) gets a decode chunk one position further, in prev's chunk order.
//     Its TokenIDs entry is 0, a stand-in for the token prev samples; the sequence holds a hidden
//     placeholder for that token, with a slot in the pool, until Update(prev) replaces it with the
//     sampled token, or Discard(prev) (or of the returned batch) removes it (see [Scheduler.Update]
//     and [Scheduler.Discard]).
//  2. Prefills under way continue, in arrival order, as far as the budgets go: a sequence
//     whose prefill chunk in prev does not end its prompt continues where that chunk ends, one
//     that prev left out where it stands (even with one token left, which Schedule would run as
//     a decode). Their tokens are known.
//  3. Waiting sequences are admitted from the head, first come first served, while the budgets, the
//     sequence cap and the pool allow, exactly as Schedule admits them (prefix-cache hits
//     included); the head is never skipped.
//
// It returns nil, and changes nothing, when prev is not the only batch outstanding (scheduled, not
// yet updated or discarded), when the pool has no slot for some decode's placeholder without
// preempting anyone (evicting unused prefix-cache blocks is fine), when a decoding sequence or the head
// of the waiting queue could never fit the pool (Schedule finishes it), when a sequence of prev is not in the state
// Schedule (or ScheduleNext and Update) left it in, or when no chunk results.
//
// The returned batch is handed back after prev: Update(prev), then Update (or Discard) of it; or
// it is cancelled with Discard before Update(prev), which also undoes its admissions.
func (s *Scheduler) ScheduleNext(prev *Batch) *Batch {
	if prev == nil || len(s.outstanding) != 1 || s.outstanding[0] != prev {
		return nil
	}
	type decode struct {
		seq  *Sequence
		from int32 // prev's logits row
	}
	var decodes []decode
	// after[seq] is where a running sequence with a prefill chunk in prev (not ending its prompt)
	// stands once prev is computed; -1 for a sequence whose chunk in prev needs logits.
	after := make(map[*Sequence]int, len(prev.Chunks))
	newBlocks, row := 0, int32(0)
	for i := range prev.Chunks {
		c := &prev.Chunks[i]
		seq := c.Seq
		from := row
		if c.NeedsLogits {
			row++
		}
		if seq.status != StatusRunning {
			continue
		}
		// The state Schedule left: prev computes tokens [Start, Start+Len), which hold slots.
		if _, dup := after[seq]; dup || seq.numAhead != 0 || seq.numComputed != c.Start ||
			seq.numReserved != len(seq.tokens) || (c.Start+c.Len == len(seq.tokens)) != c.NeedsLogits ||
			c.Start+c.Len > len(seq.tokens) {
			return nil
		}
		if !c.NeedsLogits {
			after[seq] = c.Start + c.Len
			continue
		}
		after[seq] = -1
		if seq.NumOutputTokens()+1 >= seq.limits.MaxTokens {
			continue // Update(prev) finishes it by length
		}
		if s.pool.BlocksNeeded(len(seq.tokens)+1) > s.pool.NumBlocks() {
			return nil // Schedule finishes it: it has outgrown the pool
		}
		decodes = append(decodes, decode{seq, from})
		newBlocks += s.pool.BlocksNeeded(len(seq.tokens)+1) - s.pool.BlocksNeeded(len(seq.tokens))
	}
	for _, seq := range s.running {
		if _, ok := after[seq]; ok {
			continue
		}
		// Left out of prev (a prefill whose chunk the budget did not reach): its tokens are known.
		if seq.numAhead != 0 || seq.numComputed >= len(seq.tokens) || seq.numReserved != len(seq.tokens) {
			return nil
		}
	}
	if newBlocks > s.pool.NumAvailableBlocks() {
		return nil
	}
	if len(s.waiting) > 0 && len(s.running) < s.cfg.MaxNumSeqs && s.neverFits(s.waiting[0]) {
		return nil // Schedule finishes it
	}

	b := &Batch{Chunks: make([]Chunk, 0, min(s.cfg.MaxNumSeqs, len(s.running)+len(s.waiting)))}
	bud := s.budget()

	// 1. Decodes, each with a placeholder for prev's token.
	for _, d := range decodes {
		seq := d.seq
		if err := s.pool.Append(seq.id, 0); err != nil {
			panic(fmt.Sprintf("scheduler: schedule next: %v after checking capacity: %v", seq, err))
		}
		seq.tokens = append(seq.tokens, 0)
		seq.numAhead = 1
		seq.numReserved = len(seq.tokens)
		s.addChunkAt(b, seq, len(seq.tokens)-1, 1)
		b.NumDecodes++
		bud.tokens--
	}

	// 2. Prefills under way.
	for _, seq := range s.running {
		if bud.tokens == 0 {
			break
		}
		start, ok := after[seq]
		if !ok {
			start = seq.numComputed
		}
		if start < 0 {
			continue
		}
		if rem := len(seq.tokens) - start; rem > 0 {
			if n := bud.grant(seq, rem); n > 0 {
				s.addChunkAt(b, seq, start, n)
			}
		}
	}

	// 3. Admissions, first come first served; no preemption, no finishing.
	for len(s.waiting) > 0 && bud.canAdmit(s.waiting[0]) && len(s.running) < s.cfg.MaxNumSeqs {
		seq := s.waiting[0]
		if s.waitsForPrefix(seq) {
			break // as in Schedule
		}
		cached, err := s.allocate(seq)
		if err != nil {
			if !errors.Is(err, kvcache.ErrNoFreeBlocks) {
				panic(fmt.Sprintf("scheduler: admit %v: %v", seq, err))
			}
			break // wait for blocks; nobody overtakes the head
		}
		b.admitted = append(b.admitted, admission{seq, seq.admitted, seq.numCached})
		s.waiting = s.waiting[1:]
		s.admit(seq, cached)
		s.addChunk(b, seq, bud.grant(seq, len(seq.tokens)-cached))
	}

	if b.Empty() {
		return nil // nothing changed: no decode, no prefill, no admission
	}
	s.step++
	b.step = s.step
	s.finalize(b) // a placeholder, 0, becomes its decode's TokenIDs entry
	b.InputFrom = make([]int32, b.NumTokens)
	for i := range b.InputFrom {
		b.InputFrom[i] = -1
	}
	for i, d := range decodes {
		b.InputFrom[b.Chunks[i].Offset] = d.from
	}
	s.outstanding = append(s.outstanding, b)
	return b
}

// cancel undoes what ScheduleNext did for b, which is discarded before its predecessor's Update:
// for each running sequence of b, the placeholder token and its slot are dropped, and each
// sequence b admitted goes back to the head of the waiting queue with its blocks freed, as if
// never admitted.
func (s *Scheduler) cancel(b *Batch) {
	for i := range b.Chunks {
		seq := b.Chunks[i].Seq
		if seq.status != StatusRunning || seq.numAhead == 0 {
			continue
		}
		seq.dropPlaceholder()
		if err := s.pool.Truncate(seq.id, len(seq.tokens)); err != nil {
			panic(fmt.Sprintf("scheduler: discard: %v", err))
		}
		seq.numReserved = len(seq.tokens)
	}
	back := make([]*Sequence, 0, len(b.admitted))
	for _, a := range b.admitted {
		seq := a.seq
		if seq.status != StatusRunning {
			continue // finished since
		}
		s.removeRunning(seq)
		// As if never admitted: its prefix-cache lookup is counted again when it is.
		s.releaseBlocks(seq, s.pool.Unallocate)
		seq.status = StatusWaiting
		seq.numComputed = 0
		seq.admitted, seq.numCached = a.admitted, a.numCached
		back = append(back, seq)
	}
	// They were the head, in order; whoever waits now arrived later.
	s.waiting = append(back, s.waiting...)
	b.admitted = nil
}
