package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/kvcache"
)

// The simulation runs the scheduler with a fake model that keeps real (fake) KV contents: each
// scheduled token's id is written into its slot, and a chunk's next token is a hash of the whole
// context read back through the block table. So a sequence generates its reference output only if
// every position it attends to holds the right token, whatever preemption, recompute, chunking and
// prefix sharing happened on the way.

const simVocab = 40

// nextToken is the fake model: a hash of the context.
func nextToken(context []int32) int32 {
	h := uint64(14695981039346656037)
	for _, t := range context {
		h ^= uint64(uint32(t))
		h *= 1099511628211
	}
	return int32(h % simVocab)
}

// reference returns the output a sequence must produce alone, and why it stops.
func reference(prompt []int32, limits Limits) ([]int32, FinishReason) {
	tokens := slices.Clone(prompt)
	var out []int32
	for {
		tok := nextToken(tokens)
		tokens = append(tokens, tok)
		out = append(out, tok)
		if len(out) >= limits.MinTokens && slices.Contains(limits.StopTokenIDs, tok) {
			return out, FinishStop
		}
		if len(out) >= limits.MaxTokens {
			return out, FinishLength
		}
	}
}

type simSeq struct {
	seq        *Sequence
	addStep    int
	want       []int32
	wantReason FinishReason
	fits       bool // prompt + output fit the pool
	aborted    bool
}

type simConfig struct {
	pool      kvcache.Config
	sched     Config
	numSeqs   int
	maxPrompt int
	maxOutput int
	arrivals  int // sequences arrive over this many steps
	abortProb float64
	discard   float64 // probability that a step's forward "fails" and its batch is discarded
}

type simCounts struct {
	steps, preemptions, chunkedPrefills, mixedSteps, hitTokens, aborts, tooLong, discards int
}

// simulate runs one randomized simulation and checks every step.
func simulate(t *testing.T, r *rand.Rand, sc simConfig) simCounts {
	t.Helper()
	pool, err := kvcache.NewPool(sc.pool)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(sc.sched, pool)
	if err != nil {
		t.Fatal(err)
	}
	bs := sc.pool.BlockSize
	kv := make([]int32, sc.pool.NumBlocks*bs)
	for i := range kv {
		kv[i] = -1
	}

	// Sequences, some sharing prompt prefixes.
	shared := make([][]int32, 3)
	for i := range shared {
		shared[i] = make([]int32, sc.maxPrompt)
		for j := range shared[i] {
			shared[i][j] = int32(r.IntN(simVocab))
		}
	}
	var sims []*simSeq
	for i := range sc.numSeqs {
		n := 1 + r.IntN(sc.maxPrompt)
		var prompt []int32
		if k := r.IntN(4); k < len(shared) {
			prompt = append(prompt, shared[k][:r.IntN(n+1)]...)
		}
		for len(prompt) < n {
			prompt = append(prompt, int32(r.IntN(simVocab)))
		}
		limits := Limits{MaxTokens: 1 + r.IntN(sc.maxOutput)}
		if r.IntN(2) == 0 {
			limits.StopTokenIDs = []int32{int32(r.IntN(simVocab)), int32(r.IntN(simVocab))}
			limits.MinTokens = r.IntN(3)
		}
		want, reason := reference(prompt, limits)
		sims = append(sims, &simSeq{
			seq:     NewSequence(kvcache.SeqID(1000+i), prompt, limits),
			addStep: r.IntN(sc.arrivals + 1),
			want:    want, wantReason: reason,
			// The last output token never needs a slot.
			fits: pool.BlocksNeeded(len(prompt)+len(want)-1) <= sc.pool.NumBlocks,
		})
	}
	slices.SortStableFunc(sims, func(a, b *simSeq) int { return a.addStep - b.addStep })
	addOrder := map[*Sequence]int{}
	var firstAdmitted []int // add order of sequences in order of first admission
	admitted := map[*Sequence]bool{}

	var counts simCounts
	next := 0
	for step := 0; ; step++ {
		if step > 200000 {
			t.Fatalf("no progress after %d steps: %d waiting, %d running", step, s.NumWaiting(), s.NumRunning())
		}
		for next < len(sims) && sims[next].addStep <= step {
			ss := sims[next]
			err := s.Add(ss.seq)
			tooLongPrompt := pool.BlocksNeeded(ss.seq.NumPromptTokens()) > sc.pool.NumBlocks
			switch {
			case tooLongPrompt && errors.Is(err, ErrTooLong):
				ss.aborted = true // never runs
			case err != nil:
				t.Fatalf("Add(%v): %v", ss.seq, err)
			default:
				addOrder[ss.seq] = next
			}
			next++
		}
		if next == len(sims) && !s.HasUnfinished() {
			break
		}
		// Sequences decoding before the step must all decode (or be preempted).
		var decoding []*Sequence
		for _, seq := range s.running {
			if seq.NumTokens()-seq.NumComputed() == 1 {
				decoding = append(decoding, seq)
			}
		}

		outLen := map[*Sequence]int{}
		for _, ss := range sims[:next] {
			outLen[ss.seq] = ss.seq.NumOutputTokens()
		}
		b := s.Schedule()
		counts.steps++
		for _, ss := range sims[:next] {
			if ss.seq.NumOutputTokens() != outLen[ss.seq] {
				t.Fatalf("step %d: Schedule changed the output of %v from %d tokens", step, ss.seq, outLen[ss.seq])
			}
		}
		counts.preemptions += len(b.Preempted)
		checkBatch(t, s, b, decoding)
		for _, seq := range b.Finished {
			counts.tooLong++
			if !errors.Is(seq.Err(), ErrTooLong) || seq.FinishReason() != FinishError {
				t.Fatalf("step %d: %v finished with %v, %v", step, seq, seq.FinishReason(), seq.Err())
			}
		}
		if b.Empty() {
			if s.HasUnfinished() && len(b.Finished) == 0 {
				t.Fatalf("step %d: empty batch with %d waiting, %d running", step, s.NumWaiting(), s.NumRunning())
			}
			continue
		}
		if b.NumDecodes > 0 && b.NumDecodes < len(b.Chunks) {
			counts.mixedSteps++
		}
		for _, c := range b.Chunks {
			if !admitted[c.Seq] {
				admitted[c.Seq] = true
				firstAdmitted = append(firstAdmitted, addOrder[c.Seq])
				counts.hitTokens += c.Start
			}
			if c.Len > 1 && !c.NeedsLogits {
				counts.chunkedPrefills++
			}
		}

		if r.Float64() < sc.discard {
			counts.discards++
			if err := s.Discard(b); err != nil {
				t.Fatal(err)
			}
			continue
		}

		// The fake forward pass: write every chunk's KV in every KV group, then attend: each group
		// must hold every position the chunk's queries see (in a sliding group, from the window of the
		// chunk's first query on).
		for _, c := range b.Chunks {
			for i, slot := range c.SlotMapping {
				kv[slot] = c.Tokens[i]
			}
			for _, table := range c.BlockTables[1:] {
				for i := range c.Len {
					kv[kvcache.Slot(table, bs, c.Start+i)] = c.Tokens[i]
				}
			}
		}
		var sampled []int32
		for _, c := range b.Chunks {
			want := c.Seq.Tokens()[:c.ContextLen]
			for g, grp := range pool.Groups() {
				from := 0
				if grp.Window > 0 {
					from = max(0, c.Start-grp.Window+1)
				}
				for pos := from; pos < c.ContextLen; pos++ {
					if got := kv[kvcache.Slot(c.BlockTables[g], bs, pos)]; got != want[pos] {
						t.Fatalf("step %d: %v attends in group %d at position %d to %d, want %d", step, c.Seq, g, pos, got, want[pos])
					}
				}
			}
			if c.NeedsLogits {
				sampled = append(sampled, nextToken(want))
			}
		}

		// Sometimes a request is cancelled while its step runs.
		if r.Float64() < sc.abortProb {
			c := b.Chunks[r.IntN(len(b.Chunks))]
			if !c.Seq.Finished() {
				if err := s.Abort(c.Seq.ID()); err != nil {
					t.Fatal(err)
				}
				counts.aborts++
			}
		}
		updated, err := s.Update(b, sampled)
		if err != nil {
			t.Fatalf("step %d: Update: %v", step, err)
		}
		for _, ss := range sims[:next] {
			grew := ss.seq.NumOutputTokens() - outLen[ss.seq]
			if want := count(updated, ss.seq); grew != want {
				t.Fatalf("step %d: output of %v grew by %d, updated %d times", step, ss.seq, grew, want)
			}
		}
		for _, seq := range updated {
			if seq.Status() == StatusWaiting {
				t.Fatalf("step %d: updated %v is waiting", step, seq)
			}
		}
		// Sometimes a request is cancelled between steps, running or waiting.
		if r.Float64() < sc.abortProb {
			ss := sims[r.IntN(next)]
			if _, live := s.Sequence(ss.seq.ID()); live {
				if err := s.Abort(ss.seq.ID()); err != nil {
					t.Fatal(err)
				}
				counts.aborts++
			}
		}
		if err := pool.CheckInvariants(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got, want := pool.NumSeqs(), s.NumRunning(); got != want {
			t.Fatalf("step %d: pool holds %d sequences, %d running", step, got, want)
		}
	}

	// Every sequence finished with its reference output (or a prefix of it if cut short).
	for _, ss := range sims {
		seq := ss.seq
		if ss.aborted && seq.FinishReason() == FinishNone {
			continue // rejected by Add
		}
		if !seq.Finished() {
			t.Fatalf("%v did not finish", seq)
		}
		out := seq.Output()
		switch seq.FinishReason() {
		case FinishAbort, FinishError:
			if !slices.Equal(out, ss.want[:len(out)]) {
				t.Fatalf("%v (%s) output %v is not a prefix of %v", seq, seq.FinishReason(), out, ss.want)
			}
			if seq.FinishReason() == FinishError && ss.fits {
				t.Fatalf("%v fits the pool but finished with %v", seq, seq.Err())
			}
		default:
			if !slices.Equal(out, ss.want) || seq.FinishReason() != ss.wantReason {
				t.Fatalf("%v: output %v (%s), want %v (%s)", seq, out, seq.FinishReason(), ss.want, ss.wantReason)
			}
		}
		// (With a sliding group a sequence holds less than a block of every group per page once its
		// window moves on, so one that would not fit all at once may still finish.)
		if seq.FinishReason() != FinishAbort && !ss.fits && seq.FinishReason() != FinishError && !sliding(pool) {
			t.Fatalf("%v cannot fit the pool but finished with %s", seq, seq.FinishReason())
		}
	}
	if !slices.IsSorted(firstAdmitted) {
		t.Fatalf("first admissions out of arrival order: %v", firstAdmitted)
	}
	st := pool.Stats()
	if st.UsedBlocks != 0 || pool.NumSeqs() != 0 || s.NumRunning() != 0 || s.NumWaiting() != 0 {
		t.Fatalf("after the run: %+v, %d pool sequences, %d running, %d waiting", st, pool.NumSeqs(), s.NumRunning(), s.NumWaiting())
	}
	if err := pool.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// sliding reports whether the pool has a sliding KV group.
func sliding(p *kvcache.Pool) bool {
	for _, g := range p.Groups() {
		if g.Window > 0 {
			return true
		}
	}
	return false
}

func count(seqs []*Sequence, seq *Sequence) int {
	n := 0
	for _, s := range seqs {
		if s == seq {
			n++
		}
	}
	return n
}

// checkBatch checks one scheduled batch against the step's rules.
func checkBatch(t *testing.T, s *Scheduler, b *Batch, decoding []*Sequence) {
	t.Helper()
	cfg := s.cfg
	bs := s.pool.BlockSize()
	if b.NumTokens > cfg.MaxNumBatchedTokens || len(b.Chunks) > cfg.MaxNumSeqs || s.NumRunning() > cfg.MaxNumSeqs {
		t.Fatalf("batch of %d tokens, %d chunks, %d running: over %+v", b.NumTokens, len(b.Chunks), s.NumRunning(), cfg)
	}
	total, logits := 0, 0
	seen := map[*Sequence]bool{}
	owner := map[int32]*Sequence{} // block -> the chunk's sequence writing into it
	for i, c := range b.Chunks {
		seq := c.Seq
		total += c.Len
		if c.NeedsLogits {
			logits++
		}
		if seen[seq] {
			t.Fatalf("%v scheduled twice", seq)
		}
		seen[seq] = true
		if seq.Status() != StatusRunning || c.Start != seq.NumComputed() || c.Len < 1 {
			t.Fatalf("chunk %d of %v: start %d len %d", i, seq, c.Start, c.Len)
		}
		if i < b.NumDecodes && (c.Len != 1 || !c.NeedsLogits) {
			t.Fatalf("decode chunk %d of %v has len %d, logits %v", i, seq, c.Len, c.NeedsLogits)
		}
		end := c.Start + c.Len
		if !slices.Equal(c.Tokens, seq.Tokens()[c.Start:end]) || c.ContextLen != end ||
			c.NeedsLogits != (end == seq.NumTokens()) || len(c.BlockTable) < kvcache.BlocksFor(end, bs) {
			t.Fatalf("chunk %d of %v inconsistent: %+v", i, seq, c)
		}
		if want := kvcache.SlotMapping(nil, c.BlockTable, bs, c.Start, end); !slices.Equal(c.SlotMapping, want) {
			t.Fatalf("chunk %d of %v: slots %v, want %v", i, seq, c.SlotMapping, want)
		}
		if len(c.BlockTables) != s.pool.NumGroups() || &c.BlockTables[0][0] != &c.BlockTable[0] {
			t.Fatalf("chunk %d of %v: %d block tables for %d groups", i, seq, len(c.BlockTables), s.pool.NumGroups())
		}
		for _, table := range c.BlockTables {
			if len(table) < kvcache.BlocksFor(end, bs) {
				t.Fatalf("chunk %d of %v: a group's table of %d blocks for %d tokens", i, seq, len(table), end)
			}
			for _, slot := range kvcache.SlotMapping(nil, table, bs, c.Start, end) {
				owner[slot/int32(bs)] = seq
			}
		}
	}
	var ids, positions, slots, logitRows []int32
	for _, c := range b.Chunks {
		if c.Offset != len(ids) {
			t.Fatalf("chunk of %v at offset %d, want %d", c.Seq, c.Offset, len(ids))
		}
		if c.NeedsLogits {
			logitRows = append(logitRows, int32(len(ids)+c.Len-1))
		}
		ids = append(ids, c.Tokens...)
		positions = c.AppendPositions(positions)
		slots = append(slots, c.SlotMapping...)
	}
	if !slices.Equal(ids, b.TokenIDs) || !slices.Equal(positions, b.Positions) || !slices.Equal(slots, b.SlotMapping) ||
		!slices.Equal(logitRows, b.LogitIndices) {
		t.Fatalf("flat batch inputs disagree with the chunks")
	}
	if total != b.NumTokens || logits != b.NumLogits {
		t.Fatalf("batch says %d tokens, %d logits; chunks hold %d, %d", b.NumTokens, b.NumLogits, total, logits)
	}
	// A block written in this step belongs to its writer alone.
	for _, seq := range s.running {
		tables, err := s.pool.BlockTables(seq.ID())
		if err != nil {
			t.Fatalf("running %v has no table: %v", seq, err)
		}
		for _, table := range tables {
			for _, blk := range table {
				if w, ok := owner[blk]; ok && blk != kvcache.NullBlock && w != seq {
					t.Fatalf("%v writes block %d that %v holds", w, blk, seq)
				}
			}
		}
	}
	// Decodes first: everyone decoding before the step decodes, unless preempted or finished.
	decodes := map[*Sequence]bool{}
	for _, c := range b.Decodes() {
		decodes[c.Seq] = true
	}
	for _, seq := range decoding {
		if !decodes[seq] && !slices.Contains(b.Preempted, seq) && !slices.Contains(b.Finished, seq) {
			t.Fatalf("%v was decoding but got no decode chunk", seq)
		}
	}
	for _, seq := range b.Preempted {
		if seq.Status() != StatusWaiting || seq.NumComputed() != 0 || seen[seq] {
			t.Fatalf("preempted %v still scheduled or not reset", seq)
		}
	}
	// Preemption takes the latest arrivals: every preempted sequence arrived after every running one.
	for _, p := range b.Preempted {
		for _, r := range s.running {
			if r.arrival > p.arrival {
				t.Fatalf("preempted %v (arrival %d) while %v (arrival %d) kept running", p, p.arrival, r, r.arrival)
			}
		}
	}
	// Waiting stays in arrival order.
	if !slices.IsSortedFunc(s.waiting, func(a, b *Sequence) int { return int(a.arrival) - int(b.arrival) }) {
		t.Fatal("waiting queue out of arrival order")
	}
}

func TestSimulation(t *testing.T) {
	var total simCounts
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 77))
		bs := []int{1, 2, 4, 8, 16}[r.IntN(5)]
		maxSeqs := 1 + r.IntN(8)
		// Every fourth simulation has a full and a sliding KV group, every fourth a sliding one only.
		var groups []kvcache.Group
		switch seed % 4 {
		case 1:
			groups = []kvcache.Group{{}, {Window: 1 + r.IntN(20)}}
		case 3:
			groups = []kvcache.Group{{Window: 1 + r.IntN(20)}}
		}
		sc := simConfig{
			pool: kvcache.Config{
				NumBlocks:     (2 + r.IntN(96/bs+4)) * max(1, len(groups)),
				BlockSize:     bs,
				PrefixCaching: seed%3 != 2,
				HashSeed:      seed,
				Groups:        groups,
			},
			sched:     Config{MaxNumSeqs: maxSeqs, MaxNumBatchedTokens: maxSeqs + r.IntN(48)},
			numSeqs:   5 + r.IntN(40),
			maxPrompt: 1 + r.IntN(60),
			maxOutput: 1 + r.IntN(30),
			arrivals:  r.IntN(50),
			abortProb: []float64{0, 0, 0.02, 0.1}[r.IntN(4)],
			discard:   []float64{0, 0, 0.05}[r.IntN(3)],
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := simulate(t, r, sc)
			t.Logf("%+v %+v: %+v", sc.pool, sc.sched, c)
			total.steps += c.steps
			total.preemptions += c.preemptions
			total.chunkedPrefills += c.chunkedPrefills
			total.mixedSteps += c.mixedSteps
			total.hitTokens += c.hitTokens
			total.aborts += c.aborts
			total.tooLong += c.tooLong
			total.discards += c.discards
		})
	}
	t.Logf("all seeds: %+v", total)
	// The simulations must exercise what they claim to test.
	for name, n := range map[string]int{
		"preemptions": total.preemptions, "chunked prefills": total.chunkedPrefills,
		"steps mixing decodes and prefill": total.mixedSteps, "prefix-cache hit tokens": total.hitTokens,
		"aborts": total.aborts, "sequences too long for the pool": total.tooLong, "discarded batches": total.discards,
	} {
		if n == 0 {
			t.Errorf("no %s in any simulation", name)
		}
	}
}

func FuzzSimulation(f *testing.F) {
	f.Add(uint64(1), uint8(4), uint8(6), uint8(2), uint8(8), true)
	f.Add(uint64(2), uint8(1), uint8(3), uint8(1), uint8(1), false)
	f.Add(uint64(3), uint8(16), uint8(2), uint8(4), uint8(20), true)
	f.Fuzz(func(t *testing.T, seed uint64, blockSize, numBlocks, maxSeqs, extraBudget uint8, prefix bool) {
		r := rand.New(rand.NewPCG(seed, 1))
		seqs := 1 + int(maxSeqs%8)
		simulate(t, r, simConfig{
			pool:      kvcache.Config{NumBlocks: 1 + int(numBlocks%64), BlockSize: 1 + int(blockSize%16), PrefixCaching: prefix},
			sched:     Config{MaxNumSeqs: seqs, MaxNumBatchedTokens: seqs + int(extraBudget%64)},
			numSeqs:   1 + r.IntN(12),
			maxPrompt: 1 + r.IntN(40),
			maxOutput: 1 + r.IntN(20),
			arrivals:  r.IntN(10),
			abortProb: 0.05,
			discard:   0.05,
		})
	})
}
