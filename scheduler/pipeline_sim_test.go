package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gollm/gollm/kvcache"
)

// The equivalence simulation runs one random workload twice, with plain Schedule/Update steps and
// pipelined (ScheduleNext whenever it accepts), over a fake device that keeps the KV contents (as
// in sim_test.go) and feeds a pipelined step's inputs from the previous step's samples through
// InputFrom, as the real device does. The fake model's token is a function of the context, so
// both runs must give every sequence the same tokens and finish reason, whatever was scheduled when.

// workSeq is one request of a workload. Its abort point is a function of its own progress, so
// that both runs abort it at the same logical point: when it has abortAt output tokens, either at
// once (after the Update that produced the last one) or, with abortInFlight, once a batch that
// samples its next token is outstanding.
type workSeq struct {
	id            kvcache.SeqID
	prompt        []int32
	limits        Limits
	addStep       int
	abortAt       int // -1: never
	abortInFlight bool
}

type workload struct {
	pool    kvcache.Config
	sched   Config
	seqs    []workSeq
	discard float64 // probability that the oldest outstanding batch is discarded
}

type outcome struct {
	output []int32
	reason FinishReason
}

type pipeCounts struct {
	steps, nextBatches, preemptions, hitTokens, aborts, inFlightAborts, discards, discardedPairs int
	cancels                                                                                      int // ScheduleNext batches discarded before their predecessor's Update
	// Sequences that sampled a stop token, or were aborted, while holding a placeholder.
	placeholderStops, placeholderAborts int
	// ScheduleNext batches that admitted sequences, and the sequences they admitted; admissions
	// undone by a cancel or the discard of the previous batch.
	admittingNext, nextAdmissions, undoneAdmissions int
	// Decodes of a ScheduleNext batch after a prompt-ending chunk of the previous batch; prefill
	// chunks of a ScheduleNext batch continuing one of the previous batch.
	decodesAfterPrompt, continuedPrefills int
}

func (c *pipeCounts) add(o pipeCounts) {
	c.steps += o.steps
	c.nextBatches += o.nextBatches
	c.preemptions += o.preemptions
	c.hitTokens += o.hitTokens
	c.aborts += o.aborts
	c.inFlightAborts += o.inFlightAborts
	c.discards += o.discards
	c.discardedPairs += o.discardedPairs
	c.cancels += o.cancels
	c.placeholderStops += o.placeholderStops
	c.placeholderAborts += o.placeholderAborts
	c.admittingNext += o.admittingNext
	c.nextAdmissions += o.nextAdmissions
	c.undoneAdmissions += o.undoneAdmissions
	c.decodesAfterPrompt += o.decodesAfterPrompt
	c.continuedPrefills += o.continuedPrefills
}

func randomWorkload(r *rand.Rand, seed uint64) workload {
	bs := []int{1, 2, 4, 8}[r.IntN(4)]
	maxSeqs := 1 + r.IntN(6)
	maxPrompt := 1 + r.IntN(40)
	maxOutput := 1 + r.IntN(24)
	// Every fourth workload has a full and a sliding KV group, every fourth a sliding one only.
	var groups []kvcache.Group
	switch seed % 4 {
	case 1:
		groups = []kvcache.Group{{}, {Window: 1 + r.IntN(16)}}
	case 3:
		groups = []kvcache.Group{{Window: 1 + r.IntN(16)}}
	}
	w := workload{
		pool: kvcache.Config{
			NumBlocks:     (2 + r.IntN(64/bs+4)) * max(1, len(groups)),
			BlockSize:     bs,
			PrefixCaching: seed%3 != 2,
			HashSeed:      seed,
			Groups:        groups,
		},
		sched:   Config{MaxNumSeqs: maxSeqs, MaxNumBatchedTokens: maxSeqs + r.IntN(40)},
		discard: []float64{0, 0.03, 0.1}[r.IntN(3)],
	}
	shared := make([][]int32, 2)
	for i := range shared {
		shared[i] = make([]int32, maxPrompt)
		for j := range shared[i] {
			shared[i][j] = int32(r.IntN(simVocab))
		}
	}
	arrivals := r.IntN(40)
	for i := range 4 + r.IntN(24) {
		n := 1 + r.IntN(maxPrompt)
		var prompt []int32
		if k := r.IntN(3); k < len(shared) {
			prompt = append(prompt, shared[k][:r.IntN(n+1)]...)
		}
		for len(prompt) < n {
			prompt = append(prompt, int32(r.IntN(simVocab)))
		}
		ws := workSeq{
			id:      kvcache.SeqID(100 + i),
			prompt:  prompt,
			limits:  Limits{MaxTokens: 1 + r.IntN(maxOutput)},
			addStep: r.IntN(arrivals + 1),
			abortAt: -1,
		}
		if r.IntN(3) == 0 {
			ws.limits.StopTokenIDs = []int32{int32(r.IntN(simVocab)), int32(r.IntN(simVocab))}
			ws.limits.MinTokens = r.IntN(3)
		}
		if r.IntN(5) == 0 {
			ws.abortAt = r.IntN(ws.limits.MaxTokens + 1)
			ws.abortInFlight = r.IntN(2) == 0
		}
		w.seqs = append(w.seqs, ws)
	}
	slices.SortStableFunc(w.seqs, func(a, b workSeq) int { return a.addStep - b.addStep })
	return w
}

// flight is a batch the fake device has run: what it sampled, and the input token of each chunk.
type flight struct {
	b        *Batch
	inputs   []int32 // per chunk: the input token of its last position
	sampled  []int32
	admitted []*Sequence // sequences the batch's ScheduleNext admitted
}

// pipeRun is one run of a workload.
type pipeRun struct {
	t         *testing.T
	w         workload
	pipelined bool
	r         *rand.Rand // discards only
	s         *Scheduler
	pool      *kvcache.Pool
	kv        []int32
	seqs      []*Sequence // in w.seqs order
	added     int
	flights   []flight // outstanding, oldest first
	counts    pipeCounts
}

func runWorkload(t *testing.T, w workload, pipelined bool, r *rand.Rand) (map[kvcache.SeqID]outcome, pipeCounts) {
	t.Helper()
	pool, err := kvcache.NewPool(w.pool)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(w.sched, pool)
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeRun{t: t, w: w, pipelined: pipelined, r: r, s: s, pool: pool, kv: make([]int32, w.pool.NumBlocks*w.pool.BlockSize)}
	for i := range p.kv {
		p.kv[i] = -1
	}
	for _, ws := range w.seqs {
		p.seqs = append(p.seqs, NewSequence(ws.id, ws.prompt, ws.limits))
	}
	for iter := 0; ; iter++ {
		if iter > 100000 {
			t.Fatalf("no progress: %d waiting, %d running", s.NumWaiting(), s.NumRunning())
		}
		for p.added < len(p.seqs) && w.seqs[p.added].addStep <= p.counts.steps {
			if err := s.Add(p.seqs[p.added]); err != nil && !errors.Is(err, ErrTooLong) {
				t.Fatalf("Add: %v", err)
			}
			p.added++
		}
		p.aborts()
		if len(p.flights) == 0 {
			if p.added == len(p.seqs) && !s.HasUnfinished() {
				break
			}
			var decoding []*Sequence
			for _, seq := range s.running {
				if seq.NumTokens()-seq.NumComputed() == 1 {
					decoding = append(decoding, seq)
				}
			}
			b := s.Schedule()
			p.counts.steps++
			p.counts.preemptions += len(b.Preempted)
			checkBatch(t, s, b, decoding)
			if b.Empty() {
				continue
			}
			p.launch(b, nil)
		}
		if p.pipelined && len(p.flights) == 1 {
			prev := p.flights[0]
			waiting := slices.Clone(s.waiting)
			type cachedState struct {
				admitted  bool
				numCached int
			}
			cached := map[*Sequence]cachedState{}
			for _, seq := range waiting {
				cached[seq] = cachedState{seq.admitted, seq.numCached}
			}
			used := pool.Stats().UsedBlocks
			if next := s.ScheduleNext(prev.b); next != nil {
				p.counts.steps++
				p.counts.nextBatches++
				admitted := p.checkNext(prev.b, next, waiting)
				p.launch(next, prev.sampled)
				p.flights[1].admitted = admitted
				if p.r.Float64() < p.w.discard/2 { // the engine could not start it
					p.counts.cancels++
					p.counts.undoneAdmissions += len(admitted)
					if err := s.Discard(next); err != nil {
						t.Fatal(err)
					}
					p.flights = p.flights[:1]
					for _, c := range next.Chunks {
						if c.Seq.numAhead != 0 {
							t.Fatalf("%v keeps a placeholder after its batch was cancelled", c.Seq)
						}
					}
					// As if never admitted: back at the head, in order, without blocks.
					if !slices.Equal(s.waiting, waiting) || pool.Stats().UsedBlocks != used {
						t.Fatalf("after the cancel: waiting %v, %d blocks used; before %v, %d", s.waiting, pool.Stats().UsedBlocks, waiting, used)
					}
					for _, seq := range admitted {
						if _, err := pool.NumTokens(seq.ID()); seq.Status() != StatusWaiting || seq.NumComputed() != 0 ||
							seq.numReserved != 0 || err == nil || (cachedState{seq.admitted, seq.numCached}) != cached[seq] {
							t.Fatalf("cancelled admission of %v not undone (pool: %v)", seq, err)
						}
					}
				}
			}
		}
		// In flight: after the pipelined step's launch, so that a sequence can be aborted while it
		// holds a placeholder (its output count is the same as right after Schedule).
		p.aborts()
		p.handBack()
		if err := pool.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		if pool.NumSeqs() != s.NumRunning() {
			t.Fatalf("pool holds %d sequences, %d running", pool.NumSeqs(), s.NumRunning())
		}
	}

	out := map[kvcache.SeqID]outcome{}
	for i, seq := range p.seqs {
		ws := w.seqs[i]
		if seq.FinishReason() == FinishNone && seq.arrival == 0 {
			out[seq.ID()] = outcome{reason: FinishError} // rejected by Add
			continue
		}
		if !seq.Finished() {
			t.Fatalf("%v did not finish", seq)
		}
		if seq.FinishReason() == FinishAbort && seq.NumOutputTokens() != ws.abortAt {
			t.Fatalf("%v aborted with %d output tokens, want %d", seq, seq.NumOutputTokens(), ws.abortAt)
		}
		if seq.numAhead != 0 || len(seq.tokens) != seq.NumTokens() {
			t.Fatalf("finished %v keeps a placeholder", seq)
		}
		out[seq.ID()] = outcome{slices.Clone(seq.Output()), seq.FinishReason()}
	}
	if st := pool.Stats(); st.UsedBlocks != 0 || pool.NumSeqs() != 0 {
		t.Fatalf("leak after the run: %+v, %d sequences", st, pool.NumSeqs())
	}
	p.counts.hitTokens = int(pool.Stats().HitTokens)
	return out, p.counts
}

// aborts applies the workload's abort schedule.
func (p *pipeRun) aborts() {
	for i, seq := range p.seqs[:p.added] {
		ws := p.w.seqs[i]
		if ws.abortAt < 0 || seq.Finished() || seq.arrival == 0 || seq.NumOutputTokens() != ws.abortAt {
			continue
		}
		if ws.abortInFlight && !p.samplesNext(seq) {
			continue
		}
		if seq.numAhead != 0 {
			p.counts.placeholderAborts++
		}
		if err := p.s.Abort(seq.ID()); err != nil {
			p.t.Fatal(err)
		}
		p.counts.aborts++
		if ws.abortInFlight {
			p.counts.inFlightAborts++
		}
	}
}

// samplesNext reports whether an outstanding batch samples seq's next token.
func (p *pipeRun) samplesNext(seq *Sequence) bool {
	for _, f := range p.flights {
		for _, c := range f.b.Chunks {
			if c.Seq == seq && c.NeedsLogits && c.Start+c.Len == seq.NumTokens() {
				return true
			}
		}
	}
	return false
}

// launch runs batch b on the fake device: every chunk writes its tokens' KV, then every chunk that
// needs logits attends to its context and samples. A ScheduleNext batch takes its inputs from
// prevSampled, the previous batch's samples, through InputFrom.
func (p *pipeRun) launch(b *Batch, prevSampled []int32) {
	t := p.t
	bs := p.w.pool.BlockSize
	f := flight{b: b}
	if b.InputFrom != nil && len(b.InputFrom) != b.NumTokens {
		t.Fatalf("InputFrom has %d rows for %d tokens", len(b.InputFrom), b.NumTokens)
	}
	for _, c := range b.Chunks {
		tokens := c.Tokens
		if b.InputFrom != nil {
			tokens = slices.Clone(c.Tokens)
			for j := range tokens {
				if from := b.InputFrom[c.Offset+j]; from >= 0 {
					if tokens[j] != 0 {
						t.Fatalf("pipelined row of %v has token %d", c.Seq, tokens[j])
					}
					tokens[j] = prevSampled[from]
				}
			}
		}
		for j, slot := range c.SlotMapping {
			p.kv[slot] = tokens[j]
		}
		for _, table := range c.BlockTables[1:] {
			for j := range c.Len {
				p.kv[kvcache.Slot(table, bs, c.Start+j)] = tokens[j]
			}
		}
		f.inputs = append(f.inputs, tokens[len(tokens)-1])
	}
	for i, c := range b.Chunks {
		// A pipelined chunk's input is not in its sequence yet: it is the previous step's pick.
		known := c.Seq.Tokens()
		want := slices.Clone(known[:min(len(known), c.ContextLen)])
		if len(want) < c.ContextLen {
			want = append(want, f.inputs[i])
		}
		// Every group holds every position the chunk's queries see (a sliding one from the window of
		// the chunk's first query on).
		for g, grp := range p.pool.Groups() {
			from := 0
			if grp.Window > 0 {
				from = max(0, c.Start-grp.Window+1)
			}
			for pos := from; pos < c.ContextLen; pos++ {
				if got := p.kv[kvcache.Slot(c.BlockTables[g], bs, pos)]; got != want[pos] {
					t.Fatalf("%v attends in group %d at position %d to %d, want %d", c.Seq, g, pos, got, want[pos])
				}
			}
		}
		if c.NeedsLogits {
			f.sampled = append(f.sampled, nextToken(want))
		}
	}
	p.flights = append(p.flights, f)
}

// checkNext checks a ScheduleNext batch against the batch it follows and the waiting queue before
// the call; it returns the sequences the batch admitted.
func (p *pipeRun) checkNext(prev, next *Batch, waiting []*Sequence) []*Sequence {
	t := p.t
	bs := p.w.pool.BlockSize
	cfg := p.w.sched
	if len(next.InputFrom) != next.NumTokens || next.NumTokens > cfg.MaxNumBatchedTokens || len(next.Chunks) > cfg.MaxNumSeqs ||
		p.s.NumRunning() > cfg.MaxNumSeqs || next.Empty() || len(next.Preempted)+len(next.Finished) != 0 {
		t.Fatalf("next batch %+v", next)
	}
	var prevLogits []int // prev's logits rows: chunk indices
	for i, c := range prev.Chunks {
		if c.NeedsLogits {
			prevLogits = append(prevLogits, i)
		}
	}
	inPrev := map[*Sequence]Chunk{}
	for _, c := range prev.Chunks {
		inPrev[c.Seq] = c
	}
	wasWaiting := map[*Sequence]bool{}
	for _, seq := range waiting {
		wasWaiting[seq] = true
	}
	var admitted []*Sequence
	chosen := map[*Sequence]bool{}
	off, logits, lastFrom := 0, 0, int32(-1)
	for i, c := range next.Chunks {
		seq := c.Seq
		if chosen[seq] || seq.Status() != StatusRunning {
			t.Fatalf("chunk %d of %v: twice, or not running", i, seq)
		}
		chosen[seq] = true
		table, err := p.pool.BlockTable(seq.ID())
		if err != nil {
			t.Fatal(err)
		}
		end := off + c.Len
		if c.Offset != off || c.ContextLen != c.Start+c.Len || c.Len < 1 ||
			!slices.Equal(c.Tokens, next.TokenIDs[off:end]) || !slices.Equal(c.SlotMapping, next.SlotMapping[off:end]) ||
			!slices.Equal(c.SlotMapping, kvcache.SlotMapping(nil, table, bs, c.Start, c.Start+c.Len)) ||
			!slices.Equal(next.Positions[off:end], c.AppendPositions(nil)) {
			t.Fatalf("chunk %d of %v: %+v", i, seq, c)
		}
		if c.NeedsLogits {
			if next.LogitIndices[logits] != int32(end-1) {
				t.Fatalf("chunk %d of %v: logits row %d at %d", i, seq, logits, next.LogitIndices[logits])
			}
			logits++
		}
		off = end
		n, _ := p.pool.NumTokens(seq.ID())
		if i < next.NumDecodes {
			// Fed from prev's pick for the same sequence, one position past prev's chunk.
			from := next.InputFrom[c.Offset]
			if from <= lastFrom || int(from) >= len(prevLogits) {
				t.Fatalf("decode %d of %v: InputFrom %d after %d", i, seq, from, lastFrom)
			}
			lastFrom = from
			pc := prev.Chunks[prevLogits[from]]
			if pc.Seq != seq || c.Start != pc.Start+pc.Len || c.Len != 1 || !c.NeedsLogits || c.Tokens[0] != 0 ||
				seq.numAhead != 1 || seq.NumTokens() != c.Start || n != c.Start+1 {
				t.Fatalf("decode %d of %v (%d in the pool): %+v after %+v", i, seq, n, c, pc)
			}
			if prevLogits[from] >= prev.NumDecodes {
				p.counts.decodesAfterPrompt++
			}
			continue
		}
		for _, from := range next.InputFrom[c.Offset : c.Offset+c.Len] {
			if from != -1 {
				t.Fatalf("prefill %d of %v: InputFrom %v", i, seq, next.InputFrom[c.Offset:c.Offset+c.Len])
			}
		}
		wantStart := seq.NumComputed()
		if pc, ok := inPrev[seq]; ok {
			if pc.NeedsLogits {
				t.Fatalf("prefill %d of %v after a chunk with logits", i, seq)
			}
			wantStart = pc.Start + pc.Len
			p.counts.continuedPrefills++
		}
		if wasWaiting[seq] {
			admitted = append(admitted, seq)
		}
		if seq.numAhead != 0 || c.Start != wantStart || c.NeedsLogits != (c.Start+c.Len == seq.NumTokens()) || n != seq.NumTokens() ||
			!slices.Equal(c.Tokens, seq.Tokens()[c.Start:c.Start+c.Len]) {
			t.Fatalf("prefill %d of %v: %+v, want start %d", i, seq, c, wantStart)
		}
	}
	if off != next.NumTokens || logits != next.NumLogits || len(next.LogitIndices) != logits {
		t.Fatalf("next batch: %d tokens, %d logits: %+v", off, logits, next)
	}
	// First come, first served: the admitted are the old head, in order.
	if !slices.Equal(admitted, waiting[:len(admitted)]) || !slices.Equal(p.s.waiting, waiting[len(admitted):]) {
		t.Fatalf("admitted %v of waiting %v; %v wait now", admitted, waiting, p.s.waiting)
	}
	if len(admitted) > 0 {
		p.counts.admittingNext++
		p.counts.nextAdmissions += len(admitted)
	}
	for _, c := range prev.Chunks {
		if c.NeedsLogits && c.Seq.Status() == StatusRunning && !chosen[c.Seq] && c.Seq.NumOutputTokens()+1 < c.Seq.limits.MaxTokens {
			t.Fatalf("%v left out of the next batch", c.Seq)
		}
	}
	// No running sequence holds a block the next step writes, but its owner.
	for _, seq := range p.s.running {
		tables, _ := p.pool.BlockTables(seq.ID())
		for _, c := range next.Chunks {
			for _, written := range c.BlockTables {
				for _, slot := range kvcache.SlotMapping(nil, written, bs, c.Start, c.Start+c.Len) {
					for _, table := range tables {
						if c.Seq != seq && slices.Contains(table, slot/int32(bs)) {
							t.Fatalf("%v writes into a block of %v", c.Seq, seq)
						}
					}
				}
			}
		}
	}
	return admitted
}

// handBack updates (or sometimes discards) the oldest outstanding batch.
func (p *pipeRun) handBack() {
	t := p.t
	f := p.flights[0]
	if p.r.Float64() < p.w.discard {
		p.counts.discards++
		if err := p.s.Discard(f.b); err != nil {
			t.Fatal(err)
		}
		if len(p.flights) == 2 {
			p.counts.discardedPairs++
			if err := p.s.Discard(p.flights[1].b); !errors.Is(err, ErrStaleBatch) {
				t.Fatalf("Discard of the batch after a discarded one = %v, want ErrStaleBatch", err)
			}
			// Its admissions are undone: back at the head of the queue, in order.
			var back []*Sequence
			for _, seq := range p.flights[1].admitted {
				if !seq.Finished() {
					back = append(back, seq)
				}
			}
			p.counts.undoneAdmissions += len(back)
			if len(p.s.waiting) < len(back) || !slices.Equal(p.s.waiting[:len(back)], back) {
				t.Fatalf("after the discard: waiting %v, want %v first", p.s.waiting, back)
			}
			for _, seq := range back {
				if _, err := p.pool.NumTokens(seq.ID()); seq.Status() != StatusWaiting || seq.NumComputed() != 0 || err == nil {
					t.Fatalf("admission of %v not undone", seq)
				}
			}
		}
		p.flights = nil
		for _, seq := range p.s.running {
			if seq.numAhead != 0 {
				t.Fatalf("%v keeps a placeholder after Discard", seq)
			}
		}
		return
	}
	var later *Batch
	if len(p.flights) == 2 {
		later = p.flights[1].b
		if _, err := p.s.Update(later, p.flights[1].sampled); !errors.Is(err, ErrStaleBatch) {
			t.Fatalf("Update of the later batch first = %v, want ErrStaleBatch", err)
		}
	}
	updated, err := p.s.Update(f.b, f.sampled)
	if err != nil {
		t.Fatal(err)
	}
	p.flights = p.flights[1:]
	for _, seq := range updated {
		if later == nil || !seq.Finished() || seq.FinishReason() != FinishStop {
			continue
		}
		for _, c := range later.Chunks {
			if c.Seq == seq {
				p.counts.placeholderStops++
			}
		}
	}
	// The later batch's inputs are now its sequences' tokens.
	if len(p.flights) == 1 {
		nf := p.flights[0]
		for i, c := range nf.b.Chunks {
			seq := c.Seq
			if seq.Status() != StatusRunning {
				continue
			}
			if seq.numAhead != 0 || seq.NumComputed() != c.Start || seq.Tokens()[c.Start+c.Len-1] != nf.inputs[i] ||
				(i < nf.b.NumDecodes && seq.NumTokens() != c.Start+1) {
				t.Fatalf("after Update(prev): %v, chunk at %d+%d ran with input %d", seq, c.Start, c.Len, nf.inputs[i])
			}
		}
	}
	p.aborts()
}

func TestPipelinedEquivalence(t *testing.T) {
	var plainTotal, pipeTotal pipeCounts
	for seed := range uint64(150) {
		w := randomWorkload(rand.New(rand.NewPCG(seed, 0x5eed)), seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			plain, pc := runWorkload(t, w, false, rand.New(rand.NewPCG(seed, 1)))
			piped, qc := runWorkload(t, w, true, rand.New(rand.NewPCG(seed, 2)))
			plainTotal.add(pc)
			pipeTotal.add(qc)
			for _, ws := range w.seqs {
				a, b := plain[ws.id], piped[ws.id]
				if !slices.Equal(a.output, b.output) || a.reason != b.reason {
					t.Errorf("sequence %d: plain %v (%s), pipelined %v (%s)", ws.id, a.output, a.reason, b.output, b.reason)
				}
				// The plain run is the reference where nothing cut the sequence short.
				if a.reason == FinishStop || a.reason == FinishLength {
					want, reason := reference(ws.prompt, ws.limits)
					if !slices.Equal(a.output, want) || a.reason != reason {
						t.Errorf("sequence %d: %v (%s), reference %v (%s)", ws.id, a.output, a.reason, want, reason)
					}
				}
			}
			t.Logf("%+v %+v: plain %+v, pipelined %+v", w.pool, w.sched, pc, qc)
		})
	}
	t.Logf("plain: %+v", plainTotal)
	t.Logf("pipelined: %+v", pipeTotal)
	for name, n := range map[string]int{
		"pipelined steps": pipeTotal.nextBatches, "preemptions": pipeTotal.preemptions,
		"prefix-cache hits": pipeTotal.hitTokens, "aborts": pipeTotal.aborts,
		"aborts in flight": pipeTotal.inFlightAborts, "discards": pipeTotal.discards,
		"discarded pairs": pipeTotal.discardedPairs, "stops with a placeholder": pipeTotal.placeholderStops,
		"aborts with a placeholder": pipeTotal.placeholderAborts, "cancelled pipelined steps": pipeTotal.cancels,
		"pipelined steps admitting": pipeTotal.admittingNext, "undone admissions": pipeTotal.undoneAdmissions,
		"pipelined decodes after a prompt's end": pipeTotal.decodesAfterPrompt,
		"pipelined prefills continued":           pipeTotal.continuedPrefills,
	} {
		if n == 0 {
			t.Errorf("no %s in the pipelined runs: the test does not exercise them", name)
		}
	}
	if pipeTotal.nextBatches < pipeTotal.steps/4 {
		t.Errorf("only %d of %d pipelined-run steps were pipelined", pipeTotal.nextBatches, pipeTotal.steps)
	}
}
