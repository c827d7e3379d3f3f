package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gollm/gollm/kvcache"
)

// Sentinel errors returned (wrapped) by the [Scheduler]; test them with errors.Is.
var (
	// ErrUnknownSeq means no unfinished sequence has the id.
	ErrUnknownSeq = errors.New("scheduler: unknown sequence")
	// ErrDuplicateSeq means Add was given a sequence whose id an unfinished sequence already has.
	ErrDuplicateSeq = errors.New("scheduler: duplicate sequence id")
	// ErrFinished means the sequence has already finished.
	ErrFinished = errors.New("scheduler: sequence already finished")
	// ErrInvalidSequence means Add was given a sequence it cannot run (empty prompt, MaxTokens < 1,
	// or a sequence added before).
	ErrInvalidSequence = errors.New("scheduler: invalid sequence")
	// ErrTooLong means a sequence needs more KV blocks than the whole pool has. Add returns it for a
	// prompt; a sequence that outgrows the pool while generating finishes with FinishError and Err
	// wrapping it.
	ErrTooLong = errors.New("scheduler: sequence does not fit the KV pool")
	// ErrStaleBatch means Update or Discard was given a batch it cannot take now: one already
	// handed back or dropped by the Discard of an earlier batch, or (for Update) a later batch
	// while an earlier one is outstanding.
	ErrStaleBatch = errors.New("scheduler: stale batch")
)

// Config bounds each step.
type Config struct {
	// MaxNumSeqs caps the number of running sequences (and so of chunks in a step); > 0.
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens of one step (decodes plus prefill chunks); it must be
	// at least MaxNumSeqs so that every running sequence can decode in every step.
	MaxNumBatchedTokens int
	// MaxPromptLogitRows caps the prefill tokens of sequences with Limits.PromptLogits in one step
	// (each such token is a row of logits the engine reads); 0 means MaxNumBatchedTokens.
	MaxPromptLogitRows int
	// LongPrefillTokenThreshold, when positive, caps one sequence's prefill chunk in a step (vLLM's
	// long_prefill_token_threshold): a long prompt then leaves the rest of the budget to the prompts
	// behind it, so that a short prompt arriving behind a long one starts at once, at the cost of
	// the long prompt's steps while it prefills alone (the budget is not filled). 0 means no cap.
	LongPrefillTokenThreshold int
}

// budget is what is left of a step for its chunks: tokens, and prefill tokens of sequences that want
// their prompt's logits (Limits.PromptLogits); chunkCap caps each chunk (0: none).
type budget struct{ tokens, promptLogits, chunkCap int }

// budget returns a whole step's budget.
func (s *Scheduler) budget() budget {
	return budget{s.cfg.MaxNumBatchedTokens, s.cfg.MaxPromptLogitRows, s.cfg.LongPrefillTokenThreshold}
}

// grant takes from b the length of seq's next prefill chunk, at most rem tokens, and returns it: 0
// when b has nothing left for seq.
func (b *budget) grant(seq *Sequence, rem int) int {
	n := min(rem, b.tokens)
	if b.chunkCap > 0 {
		n = min(n, b.chunkCap)
	}
	if seq.WantsPromptLogits() {
		n = min(n, b.promptLogits)
		b.promptLogits -= n
	}
	b.tokens -= n
	return n
}

// canAdmit reports whether b has room for the first chunk of seq, a sequence waiting to be admitted.
func (b *budget) canAdmit(seq *Sequence) bool {
	return b.tokens > 0 && (!seq.WantsPromptLogits() || b.promptLogits > 0)
}

// waitsForPrefix reports whether seq, waiting to be admitted, begins with a full page of tokens that
// a running sequence has not computed yet: the prefix cache holds a page once its KV is committed, so
// admitted now seq would compute that page again into a page of its own, where a step or a few later
// it shares it (n > 1 choices of one prompt, requests behind one system prompt that arrive together).
// The page checked is the first one the running sequence has not finished, so one comparison a running
// sequence answers.
func (s *Scheduler) waitsForPrefix(seq *Sequence) bool {
	if seq.WantsPromptLogits() || !s.pool.PrefixCaching() {
		return false // it takes no prefix-cache hits
	}
	bs := s.pool.BlockSize()
	for _, r := range s.running {
		// k is the end of r's first page not wholly computed; seq shares it if their first k tokens agree
		// and seq would take it as a hit (a hit leaves at least its last prompt token to compute).
		k := (r.numComputed/bs + 1) * bs
		if k <= len(r.tokens) && k < len(seq.tokens) && slices.Equal(seq.tokens[:k], r.tokens[:k]) {
			return true
		}
	}
	return false
}

// allocate gives a sequence being admitted its blocks: with the prefix cache's hits, or none for a
// sequence that still wants its prompt's logits. It returns the number of tokens whose KV is there.
func (s *Scheduler) allocate(seq *Sequence) (cached int, err error) {
	if seq.WantsPromptLogits() {
		return 0, s.pool.AllocateUncached(seq.id, seq.tokens)
	}
	return s.pool.Allocate(seq.id, seq.tokens)
}

// Scheduler decides, step by step, which sequences run and how many tokens each; it keeps the KV
// pool's allocations in step with the sequences. It is not safe for concurrent use: one goroutine
// (the engine's step loop) owns it and the pool it was given.
type Scheduler struct {
	cfg  Config
	pool *kvcache.Pool

	waiting []*Sequence // sorted by arrival; the head is admitted first
	running []*Sequence // sorted by arrival; the tail is preempted first
	live    map[kvcache.SeqID]*Sequence

	nextArrival uint64
	step        uint64
	// outstanding holds the batches scheduled and not yet updated or discarded, oldest first: at
	// most two, the second made by ScheduleNext from the first.
	outstanding    []*Batch
	numPreemptions int
}

// New returns a scheduler over pool. The scheduler owns the pool's allocations from now on: use
// the pool directly only to read it (Stats, BlockSize).
func New(cfg Config, pool *kvcache.Pool) (*Scheduler, error) {
	if pool == nil {
		return nil, errors.New("scheduler: nil pool")
	}
	if cfg.MaxNumSeqs <= 0 {
		return nil, fmt.Errorf("scheduler: MaxNumSeqs must be positive, got %d", cfg.MaxNumSeqs)
	}
	if cfg.MaxNumBatchedTokens < cfg.MaxNumSeqs {
		return nil, fmt.Errorf("scheduler: MaxNumBatchedTokens (%d) must be at least MaxNumSeqs (%d)",
			cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs)
	}
	if cfg.LongPrefillTokenThreshold < 0 {
		return nil, fmt.Errorf("scheduler: LongPrefillTokenThreshold must not be negative, got %d", cfg.LongPrefillTokenThreshold)
	}
	if cfg.MaxPromptLogitRows < 0 {
		return nil, fmt.Errorf("scheduler: MaxPromptLogitRows must not be negative, got %d", cfg.MaxPromptLogitRows)
	}
	if cfg.MaxPromptLogitRows == 0 {
		cfg.MaxPromptLogitRows = cfg.MaxNumBatchedTokens
	}
	return &Scheduler{cfg: cfg, pool: pool, live: make(map[kvcache.SeqID]*Sequence)}, nil
}

// Config returns the scheduler's configuration.
func (s *Scheduler) Config() Config { return s.cfg }

// Pool returns the KV pool the scheduler allocates from (for reading: Stats, BlockSize).
func (s *Scheduler) Pool() *kvcache.Pool { return s.pool }

// Add queues a new sequence at the tail of the waiting queue. It fails if the id is in use, the
// sequence is invalid, or its prompt alone needs more blocks than the pool has ([ErrTooLong]).
func (s *Scheduler) Add(seq *Sequence) error {
	switch {
	case seq == nil:
		return fmt.Errorf("scheduler: add nil sequence: %w", ErrInvalidSequence)
	case seq.numPrompt == 0:
		return fmt.Errorf("scheduler: add sequence %d: empty prompt: %w", seq.id, ErrInvalidSequence)
	case seq.limits.MaxTokens < 1:
		return fmt.Errorf("scheduler: add sequence %d: MaxTokens %d: %w", seq.id, seq.limits.MaxTokens, ErrInvalidSequence)
	case seq.admitted || seq.status != StatusWaiting || len(seq.tokens) != seq.numPrompt || seq.arrival != 0:
		return fmt.Errorf("scheduler: add sequence %d: already used: %w", seq.id, ErrInvalidSequence)
	}
	if _, ok := s.live[seq.id]; ok {
		return fmt.Errorf("scheduler: add sequence %d: %w", seq.id, ErrDuplicateSeq)
	}
	if need := s.pool.BlocksNeeded(seq.numPrompt); need > s.pool.NumBlocks() {
		return fmt.Errorf("scheduler: add sequence %d: %d prompt tokens need %d blocks, the pool has %d: %w",
			seq.id, seq.numPrompt, need, s.pool.NumBlocks(), ErrTooLong)
	}
	s.nextArrival++
	seq.arrival = s.nextArrival
	s.waiting = append(s.waiting, seq)
	s.live[seq.id] = seq
	return nil
}

// Sequence returns the unfinished sequence with the given id.
func (s *Scheduler) Sequence(id kvcache.SeqID) (*Sequence, bool) {
	seq, ok := s.live[id]
	return seq, ok
}

// NumWaiting returns the number of waiting sequences (new or preempted).
func (s *Scheduler) NumWaiting() int { return len(s.waiting) }

// NumRunning returns the number of running sequences.
func (s *Scheduler) NumRunning() int { return len(s.running) }

// HasUnfinished reports whether any sequence is waiting or running.
func (s *Scheduler) HasUnfinished() bool { return len(s.live) > 0 }

// NumPreemptions returns the number of preemptions since the scheduler was created.
func (s *Scheduler) NumPreemptions() int { return s.numPreemptions }

// Schedule plans the next step and reserves its KV slots. In order:
//
//  1. Decodes: every running sequence with one token left to compute gets a chunk of 1, in
//     arrival order. If the pool has no block for its new token, the latest-arrived running
//     sequence is preempted (blocks freed, back to the head of the waiting queue, recomputed
//     later), possibly the sequence itself; one that could not fit even an empty pool finishes
//     with FinishError.
//  2. Running prefills (a prompt being prefilled in chunks) continue, in arrival order, each
//     taking as many tokens as the remaining budget allows (a sequence with Limits.PromptLogits
//     also within what is left of MaxPromptLogitRows).
//  3. Unless step 1 preempted someone, waiting sequences are admitted from the head, first come
//     first served, while the budgets, the sequence cap and the pool allow; the head is never
//     skipped, so later requests cannot overtake it. Admission allocates blocks for all of the
//     sequence's tokens, reusing prefix-cache hits (none for Limits.PromptLogits): NumComputed
//     starts at the hit length, and the first chunk goes up to the remaining budget.
//
// Schedule returns a non-empty batch whenever a sequence is unfinished, except when every one of
// them finished with an error during the call (see Batch.Finished). A non-empty batch must be
// handed back to [Scheduler.Update] (or [Scheduler.Discard]) before the next Schedule; calling
// Schedule with a batch outstanding is a programming error and panics.
func (s *Scheduler) Schedule() *Batch {
	if len(s.outstanding) > 0 {
		panic("scheduler: Schedule called before Update or Discard of the previous batch")
	}
	s.step++
	b := &Batch{step: s.step, Chunks: make([]Chunk, 0, min(s.cfg.MaxNumSeqs, len(s.running)+len(s.waiting)))}
	bud := s.budget()

	// 1. Decodes, in arrival order. The tail of running is never scheduled before the current
	// sequence, so a preemption victim taken from the tail has no chunk in b yet.
	for i := 0; i < len(s.running); {
		seq := s.running[i]
		if len(seq.tokens)-seq.numComputed != 1 {
			i++
			continue
		}
		if !s.reserve(seq, b) {
			continue // seq left running (preempted or finished); s.running[i] is the next one
		}
		s.addChunk(b, seq, 1)
		b.NumDecodes++
		bud.tokens--
		i++
	}

	// 2. Prefills already under way.
	for _, seq := range s.running {
		if bud.tokens == 0 {
			break
		}
		if rem := len(seq.tokens) - seq.numComputed; rem > 1 {
			if n := bud.grant(seq, rem); n > 0 {
				s.addChunk(b, seq, n)
			}
		}
	}

	// 3. Admissions, first come first served.
	for len(b.Preempted) == 0 && len(s.waiting) > 0 && bud.canAdmit(s.waiting[0]) && len(s.running) < s.cfg.MaxNumSeqs {
		seq := s.waiting[0]
		if s.waitsForPrefix(seq) {
			break // a step or a few later it shares those pages; nobody overtakes the head
		}
		cached, err := s.allocate(seq)
		if err != nil {
			if !errors.Is(err, kvcache.ErrNoFreeBlocks) {
				panic(fmt.Sprintf("scheduler: admit %v: %v", seq, err))
			}
			if s.neverFits(seq) {
				s.waiting = s.waiting[1:]
				s.finishTooLong(seq, b)
				continue
			}
			break // wait for blocks; nobody overtakes the head
		}
		s.waiting = s.waiting[1:]
		s.admit(seq, cached)
		s.addChunk(b, seq, bud.grant(seq, len(seq.tokens)-cached))
	}

	if !b.Empty() {
		s.finalize(b)
		s.outstanding = append(s.outstanding, b)
	}
	return b
}

// reserve makes sure every token of a decoding sequence has a KV slot, preempting the
// latest-arrived running sequences as needed. It reports whether seq is still running.
func (s *Scheduler) reserve(seq *Sequence, b *Batch) bool {
	if seq.numReserved < len(seq.tokens) && s.neverFits(seq) {
		// Checked first: with a sliding KV group the pool may still have room for the token, but a
		// preemption could never admit the sequence again.
		s.removeRunning(seq)
		s.finishTooLong(seq, b)
		return false
	}
	for seq.numReserved < len(seq.tokens) {
		err := s.pool.Append(seq.id, seq.tokens[seq.numReserved:]...)
		if err == nil {
			seq.numReserved = len(seq.tokens)
			break
		}
		if !errors.Is(err, kvcache.ErrNoFreeBlocks) {
			panic(fmt.Sprintf("scheduler: reserve %v: %v", seq, err))
		}
		if s.neverFits(seq) {
			s.removeRunning(seq)
			s.finishTooLong(seq, b)
			return false
		}
		victim := s.running[len(s.running)-1]
		s.preempt(victim)
		b.Preempted = append(b.Preempted, victim)
		if victim == seq {
			return false
		}
	}
	return true
}

// neverFits reports whether seq's tokens need more blocks than the whole pool has (all at once, as an
// admission allocates them).
func (s *Scheduler) neverFits(seq *Sequence) bool {
	return s.pool.BlocksNeeded(len(seq.tokens)) > s.pool.NumBlocks()
}

// finishTooLong finishes a sequence (already out of the queues) that can never fit the pool.
func (s *Scheduler) finishTooLong(seq *Sequence, b *Batch) {
	err := fmt.Errorf("scheduler: sequence %d: %d tokens need %d blocks of %d, the pool has %d: %w",
		seq.id, len(seq.tokens), s.pool.BlocksNeeded(len(seq.tokens)),
		s.pool.BlockSize(), s.pool.NumBlocks(), ErrTooLong)
	s.finish(seq, FinishError, err)
	b.Finished = append(b.Finished, seq)
}

// preempt frees a running sequence's blocks and puts it back in the waiting queue, in arrival
// order (which is at the head: every waiting sequence that never ran arrived later). Its output
// tokens stay; they are recomputed with the prompt when it is admitted again.
func (s *Scheduler) preempt(seq *Sequence) {
	if seq.numAhead != 0 {
		// Only Schedule preempts, and it runs with no batch outstanding, so with no placeholder.
		panic(fmt.Sprintf("scheduler: preempt %v holding a placeholder token", seq))
	}
	s.removeRunning(seq)
	s.freeBlocks(seq)
	seq.status = StatusWaiting
	seq.numComputed = 0
	seq.numPreemptions++
	s.numPreemptions++
	i, _ := slices.BinarySearchFunc(s.waiting, seq.arrival, func(w *Sequence, a uint64) int {
		return cmp.Compare(w.arrival, a)
	})
	s.waiting = slices.Insert(s.waiting, i, seq)
}

// admit makes a sequence taken off the waiting queue, whose blocks the pool just allocated with
// cached prefix-cache hit tokens, running.
func (s *Scheduler) admit(seq *Sequence, cached int) {
	seq.status = StatusRunning
	seq.numComputed = cached
	seq.numReserved = len(seq.tokens)
	if !seq.admitted {
		seq.admitted = true
		seq.numCached = cached
	}
	s.insertRunning(seq)
}

// addChunk appends seq's next n tokens to the batch; finalize fills in the token, position and
// slot slices.
func (s *Scheduler) addChunk(b *Batch, seq *Sequence, n int) {
	s.addChunkAt(b, seq, seq.numComputed, n)
}

// addChunkAt appends seq's n tokens from position start to the batch.
func (s *Scheduler) addChunkAt(b *Batch, seq *Sequence, start, n int) {
	tables, err := s.pool.BlockTables(seq.id)
	if err != nil {
		panic(fmt.Sprintf("scheduler: chunk of %v: %v", seq, err))
	}
	end := start + n
	b.Chunks = append(b.Chunks, Chunk{
		Seq:         seq,
		Start:       start,
		Len:         n,
		BlockTable:  tables[0],
		BlockTables: tables,
		ContextLen:  end,
		NeedsLogits: end == len(seq.tokens),
	})
	b.NumTokens += n
	if end == len(seq.tokens) {
		b.NumLogits++
	}
}

// finalize builds the batch's flat token, position and slot slices (one allocation each) and
// points every chunk at its part of them.
func (s *Scheduler) finalize(b *Batch) {
	b.TokenIDs = make([]int32, 0, b.NumTokens)
	b.Positions = make([]int32, 0, b.NumTokens)
	b.SlotMapping = make([]int32, 0, b.NumTokens)
	b.LogitIndices = make([]int32, 0, b.NumLogits)
	for i := range b.Chunks {
		c := &b.Chunks[i]
		off := len(b.TokenIDs)
		c.Offset = off
		if c.NeedsLogits {
			b.LogitIndices = append(b.LogitIndices, int32(off+c.Len-1))
		}
		b.TokenIDs = append(b.TokenIDs, c.Seq.tokens[c.Start:c.Start+c.Len]...)
		b.Positions = c.AppendPositions(b.Positions)
		b.SlotMapping = kvcache.SlotMapping(b.SlotMapping, c.BlockTable, s.pool.BlockSize(), c.Start, c.Start+c.Len)
		end := off + c.Len
		c.Tokens = b.TokenIDs[off:end:end]
		c.SlotMapping = b.SlotMapping[off:end:end]
	}
}

// Update applies the results of running batch b: every chunk's tokens become computed (and their
// full blocks shareable through the prefix cache), and each chunk with NeedsLogits gets its sampled
// token appended; sampled holds one token per such chunk, in chunk order (b.NumLogits in all).
// A sequence whose new token is a stop token (after MinTokens) finishes with FinishStop, one that
// reaches MaxTokens with FinishLength; either releases its blocks now. Chunks of sequences finished
// or aborted since Schedule are skipped.
//
// With a batch made by [Scheduler.ScheduleNext] outstanding behind b, b must be the older one
// (batches are handed back oldest first, else [ErrStaleBatch]). A sequence with a chunk in both
// holds a placeholder for the token b samples: the sampled token replaces it (in the sequence and
// in the pool) instead of being appended, with the same stop and length checks. If the sequence
// finishes here (or by Finish before the later batch's Update), its blocks are freed at once even
// though the later batch, already launched, writes its KV into one of them: the device runs that
// step before any step scheduled after this call, so whoever gets the block next overwrites the
// slot before reading it; the later batch's Update skips the chunk.
//
// Update returns the sequences that received a token, in chunk order; the engine streams each one's
// LastToken, and may then finish it for a reason the scheduler does not see (a stop string) with
// [Scheduler.Finish].
func (s *Scheduler) Update(b *Batch, sampled []int32) ([]*Sequence, error) {
	if b == nil || len(s.outstanding) == 0 || b != s.outstanding[0] {
		if b != nil && b.Empty() && len(sampled) == 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("scheduler: update: %w", ErrStaleBatch)
	}
	if len(sampled) != b.NumLogits {
		return nil, fmt.Errorf("scheduler: update: %d sampled tokens for %d chunks that need logits", len(sampled), b.NumLogits)
	}
	s.outstanding = slices.Delete(s.outstanding, 0, 1)
	var updated []*Sequence
	k := 0
	for i := range b.Chunks {
		c := &b.Chunks[i]
		seq := c.Seq
		var tok int32
		if c.NeedsLogits {
			tok = sampled[k]
			k++
		}
		if seq.status != StatusRunning {
			continue
		}
		if seq.numComputed != c.Start {
			panic(fmt.Sprintf("scheduler: update: %v: chunk starts at %d", seq, c.Start))
		}
		seq.numComputed = c.Start + c.Len
		if err := s.pool.Commit(seq.id, seq.numComputed); err != nil {
			panic(fmt.Sprintf("scheduler: update: %v", err))
		}
		if !c.NeedsLogits {
			continue
		}
		if seq.numAhead > 0 {
			// The placeholder ScheduleNext appended for this very token.
			pos := c.Start + c.Len
			if seq.numAhead != 1 || len(seq.tokens) != pos+1 {
				panic(fmt.Sprintf("scheduler: update: %v: placeholder not at position %d", seq, pos))
			}
			if err := s.pool.SetToken(seq.id, pos, tok); err != nil {
				panic(fmt.Sprintf("scheduler: update: %v", err))
			}
			seq.tokens[pos] = tok
			seq.numAhead = 0
		} else {
			seq.tokens = append(seq.tokens, tok)
		}
		updated = append(updated, seq)
		switch {
		case seq.isStop(tok):
			s.removeRunning(seq)
			s.finish(seq, FinishStop, nil)
		case seq.NumOutputTokens() >= seq.limits.MaxTokens:
			s.removeRunning(seq)
			s.finish(seq, FinishLength, nil)
		}
	}
	return updated, nil
}

// Discard drops batch b without applying it (the forward pass failed): no token becomes computed,
// and the sequences will run the same tokens again in the next step. b must be the oldest batch
// outstanding, or the newest (see below); else the error wraps [ErrStaleBatch].
//
// Discarding b also discards the batch [Scheduler.ScheduleNext] made from it, if it is outstanding,
// since that batch's inputs are b's samples: the sequences' placeholder tokens and their slots are
// dropped, and the sequences it admitted go back to the head of the waiting queue, blocks freed,
// as if never admitted (their cached-token count included), leaving each sequence as Schedule left
// it; Update or Discard of that batch then returns [ErrStaleBatch]. (Blocks the placeholders and
// admissions took are free again, and the admissions' lookups leave the pool's hit statistics
// (kvcache.Pool.Unallocate), but prefix-cache blocks evicted to make room for them are gone.)
//
// Discarding a ScheduleNext batch while its predecessor is still outstanding cancels it alone
// (the engine could not launch it), undoing it the same way, and the predecessor's Update appends
// its sampled tokens as usual. Were the batch launched anyway, its KV writes land in slots (freed,
// or past the sequence's end) that every later step writing them overwrites before anyone reads
// them, as after Finish.
//
// Discarding a ScheduleNext batch after its predecessor's Update keeps the token that Update put
// in place of the placeholder: the sequence has it, its KV is just not computed, and the next
// Schedule runs the same decode again, as for any discarded batch; sequences it admitted stay
// running, their prefill to be run again.
func (s *Scheduler) Discard(b *Batch) error {
	if b != nil && len(s.outstanding) == 2 && b == s.outstanding[1] {
		s.cancel(b)
		s.outstanding[1] = nil
		s.outstanding = s.outstanding[:1]
		return nil
	}
	if b == nil || len(s.outstanding) == 0 || b != s.outstanding[0] {
		if b != nil && b.Empty() {
			return nil
		}
		return fmt.Errorf("scheduler: discard: %w", ErrStaleBatch)
	}
	for _, later := range s.outstanding[1:] {
		s.cancel(later)
	}
	clear(s.outstanding)
	s.outstanding = s.outstanding[:0]
	return nil
}

// Finish ends an unfinished sequence for the given reason (FinishStop when the engine matched a stop
// string, FinishAbort, ...) and releases its blocks now. It may be called between Schedule (or
// ScheduleNext) and Update: the batches may still be run as they are (the sequence's chunks then
// write only into blocks that nobody reads before they are written again), and Update ignores the
// chunks and their sampled tokens. A placeholder token from ScheduleNext goes with the sequence.
// Finishing a finished sequence returns an error wrapping [ErrFinished].
func (s *Scheduler) Finish(seq *Sequence, reason FinishReason) error {
	if seq.status == StatusFinished {
		return fmt.Errorf("scheduler: finish sequence %d: %w", seq.id, ErrFinished)
	}
	if s.live[seq.id] != seq {
		return fmt.Errorf("scheduler: finish sequence %d: %w", seq.id, ErrUnknownSeq)
	}
	if reason == FinishNone {
		return fmt.Errorf("scheduler: finish sequence %d: no reason given", seq.id)
	}
	switch seq.status {
	case StatusRunning:
		s.removeRunning(seq)
	case StatusWaiting:
		s.waiting = slices.DeleteFunc(s.waiting, func(w *Sequence) bool { return w == seq })
	}
	s.finish(seq, reason, nil)
	return nil
}

// Abort finishes the unfinished sequence with the given id with FinishAbort and releases its blocks.
func (s *Scheduler) Abort(id kvcache.SeqID) error {
	seq, ok := s.live[id]
	if !ok {
		return fmt.Errorf("scheduler: abort sequence %d: %w", id, ErrUnknownSeq)
	}
	return s.Finish(seq, FinishAbort)
}

// finish marks a sequence (already out of the queues) finished and frees its blocks.
func (s *Scheduler) finish(seq *Sequence, reason FinishReason, err error) {
	seq.dropPlaceholder() // its slot goes with the blocks
	s.freeBlocks(seq)
	seq.status = StatusFinished
	seq.reason = reason
	seq.err = err
	delete(s.live, seq.id)
}

// freeBlocks returns a sequence's blocks to the pool, if it holds any.
func (s *Scheduler) freeBlocks(seq *Sequence) { s.releaseBlocks(seq, s.pool.Free) }

// releaseBlocks gives a sequence's blocks back through release (Pool.Free, or Pool.Unallocate for an
// admission undone), if it holds any.
func (s *Scheduler) releaseBlocks(seq *Sequence, release func(kvcache.SeqID) error) {
	if seq.numReserved == 0 {
		return
	}
	if err := release(seq.id); err != nil {
		panic(fmt.Sprintf("scheduler: free %v: %v", seq, err))
	}
	seq.numReserved = 0
}

// insertRunning adds seq to the running list in arrival order.
func (s *Scheduler) insertRunning(seq *Sequence) {
	i, _ := slices.BinarySearchFunc(s.running, seq.arrival, func(r *Sequence, a uint64) int {
		return cmp.Compare(r.arrival, a)
	})
	s.running = slices.Insert(s.running, i, seq)
}

// removeRunning deletes seq from the running list.
func (s *Scheduler) removeRunning(seq *Sequence) {
	s.running = slices.DeleteFunc(s.running, func(r *Sequence) bool { return r == seq })
}
