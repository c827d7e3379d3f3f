//go:build cuda

package model

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/internal/cuda"
)

// The step's metadata and streams: BeginStep lays a step's metadata out, run uploads it and has the ops
// queued (graph_cuda.go) and their results copied back; PickAsync (pick_cuda.go) ends a step without
// waiting for it.

// stepStreams is the backend's streams and what they carry from step to step: the metadata arena, the
// picks, the ring of steps in flight and the argmax's and sampler's buffers.
type stepStreams struct {
	stream *cuda.Stream
	// up carries each step's metadata upload, down its picks' download (see upload and PickAsync): off
	// the kernels' stream, ordered by the slots' events, so that neither copy sits between two steps'
	// kernels. Two streams, so that an upload never queues behind the step before's download.
	up, down *cuda.Stream

	// Step metadata: host arena built by BeginStep (and GatherRows), staged in page-locked memory of the
	// step's ring slot and uploaded in one asynchronous copy on stream up into the slot's half of
	// meta (metaCap int32 each), which the step's kernels wait for (the slot's uploaded event): the
	// copy runs while the step before is still on the device.
	host    []int32
	meta    cuda.DevicePtr
	metaCap int // int32 elements
	// ids holds the picked token ids (argmax or draw) of the steps of both slots, idsCap for each (see
	// idsAt): a step writes its slot's and its Embed reads the previous step's (Step.InputFrom).
	ids    cuda.DevicePtr
	idsCap int

	// Ring of two slots for steps in flight (PickAsync returns before its step ends, and the engine
	// queues the next step before reading the picks): each slot has its page-locked metadata staging,
	// landing place of the picked ids, sampler arguments, and the event that marks its step's end.
	slots [2]stepSlot
	slot  int // the slot the next step uses

	// The argmax's partial maxima (see ensureArgmaxPartials): argCap values and indices.
	argValues, argIndices cuda.DevicePtr
	argCap                int

	// PickBest's device output (room for bestCap rows): a call's rows' indices, then their values.
	bestPick cuda.DevicePtr
	bestCap  int

	// The sampler's per-row arguments (see PickAsync): sampleCap rows on the device and, per ring slot,
	// page-locked.
	sampleArgs cuda.DevicePtr
	sampleCap  int
	// sampleKept, when set (tests), receives each row's count of tokens the draw chose from.
	sampleKept cuda.DevicePtr

	// pdlStep: this step launches with programmatic dependent launch (see BeginStep and pdlNow).
	pdlStep bool
}

// cudaStep is the step BeginStep prepared.
type cudaStep struct {
	s                  *Step
	numTokens, numSeqs int
	decode             bool // every sequence has one query row
	// leadDecodes: in a step that is not a decode step, how many sequences lead it with one query row
	// each (the scheduler's decodes, which it puts first); leadItems: how many of the prefill items (laid
	// out first) are theirs. Attention may run them on the decode kernels (opPlan.leadDecodes).
	leadDecodes, leadItems int
	graph                  bool // a decode step that may run as the graph of bucket rows
	rows                   int  // graph: the bucket; else numTokens
	seqs                   int  // graph: the bucket; else numSeqs
	stride                 int  // block-table row length
	contextCap             int  // graph: power-of-two bound on every context
	items, paddedItems     int  // prefill items of the real sequences, and with the padding ones
	graphRun               bool // the ops are being queued padded to rows (a graph or its warm-up)
	offTokens, offPos      int  // int32 offsets into the metadata arena
	offSlots, offCtx       int  // KV group 0's slots (Step.SlotMapping)
	offLogits, offItems    int
	offTables, offFrom     int // KV group 0's block tables (Step.BlockTables)
	// groupSlots and groupTables are the offsets of KV groups 1 and up's slots and block tables
	// (Step.GroupBlockTables): [group−1].
	groupSlots, groupTables []int
	// shared, when not nil, is the step's shared-prefix decode (sharedDecision): its layout's arrays
	// are in the arena at offShared (sharedArgs).
	shared    *attention.SharedDecision
	offShared [6]int
}

// slotsOff is the metadata offset of KV group g's slots: each row's K/V slot in the group's pages.
func (st *cudaStep) slotsOff(g int) int {
	if g == 0 {
		return st.offSlots
	}
	return st.groupSlots[g-1]
}

// tablesOff is the metadata offset of KV group g's block tables ([seqs][stride]).
func (st *cudaStep) tablesOff(g int) int {
	if g == 0 {
		return st.offTables
	}
	return st.groupTables[g-1]
}

// BeginStep lays the step's metadata out in the host arena; CopyToHost uploads it. A decode step of at
// most maxGraphBatch sequences is padded to its bucket: padding rows have token 0, position 0, slot −1
// (nothing stored), a context of one token in page 0, and logits row 0. With KV groups, each group has
// its slots (group 0's are Step.SlotMapping, the others' computed here from the positions and the
// group's tables) and its block tables (entries −1 behind a sliding group's windows go up as they are:
// no kernel reads them).
func (b *cudaBackend) BeginStep(s *Step) error {
	if len(b.kCache) == 0 {
		return errors.New("cuda backend: no KV pool allocated")
	}
	b.ops, b.args, b.err = b.ops[:0], b.args[:0], nil
	// The tunings pick the launches a graph holds.
	b.sig = b.tune.hash(fnvOffset)
	if b.decode != nil && b.decode.Tuning != (attention.CUDATuning{}) { // benchmarks' switches only
		b.sig = fnvString(b.sig, fmt.Sprintf("attention %+v", b.decode.Tuning))
	}
	numTokens, numSeqs := len(s.Tokens), len(s.ContextLens)
	// A sequence of one row is at its context's end (Model.validate): a decode. The scheduler puts a
	// step's decodes first; a decode step has nothing else.
	lead := 0
	for lead < numSeqs && s.QueryStart[lead+1]-s.QueryStart[lead] == 1 {
		lead++
	}
	st := cudaStep{s: s, numTokens: numTokens, numSeqs: numSeqs, decode: lead == numSeqs}
	if !st.decode {
		st.leadDecodes = lead
	}
	bs := b.shape.BlockSize
	maxCtx := 0
	for _, c := range s.ContextLens {
		maxCtx = max(maxCtx, int(c))
	}
	st.rows, st.seqs = numTokens, numSeqs
	// A decode step may run as its bucket's graph; with the shared-prefix path too, where its groups fit
	// a shared-prefix graph (sharedDecision).
	graph := st.decode && !b.cfg.noGraphs && !b.graphsOff && numTokens <= maxGraphBatch && len(s.LogitRows) <= numTokens
	var rows, contextCap int
	if graph {
		rows, contextCap = graphBucket(numTokens), max(minGraphContext, nextPow2(maxCtx))
	}
	if st.decode {
		st.shared = b.sharedDecision(s, rows, contextCap, (contextCap+bs-1)/bs, max(1, (maxCtx+bs-1)/bs))
	}
	st.graph = graph && (st.shared == nil || st.shared.Padded != nil)
	if st.graph {
		st.rows, st.seqs, st.contextCap = rows, rows, contextCap
		st.stride = (st.contextCap + bs - 1) / bs
	} else {
		st.stride = max(1, (maxCtx+bs-1)/bs)
	}
	// Programmatic dependent launch only for steps of at most pdlMaxRows rows (see pdlMaxRows).
	pdlRows := pdlMaxRows
	if b.tune.PDLRows > 0 {
		pdlRows = b.tune.PDLRows
	}
	b.pdlStep = st.rows <= pdlRows && b.usePDL()
	if b.pdlStep {
		b.sig = fnvString(b.sig, "pdl")
	}
	numLogitRows := len(s.LogitRows)
	if st.graph {
		numLogitRows = st.rows
	}
	h := b.host[:0]
	pad := func(src []int32, n int, fill int32) {
		h = append(h, src...)
		for range n - len(src) {
			h = append(h, fill)
		}
	}
	st.offTokens = len(h)
	pad(s.Tokens, st.rows, 0)
	st.offFrom = len(h)
	pad(s.InputFrom, st.rows, -1)
	st.offPos = len(h)
	pad(s.Positions, st.rows, 0)
	st.offSlots = len(h)
	pad(s.SlotMapping, st.rows, -1)
	groups := max(1, len(b.shape.KVGroups))
	for g := 1; g < groups; g++ {
		st.groupSlots = append(st.groupSlots, len(h))
		for seq, table := range s.GroupBlockTables[g-1] {
			for row := s.QueryStart[seq]; row < s.QueryStart[seq+1]; row++ {
				h = append(h, attention.Slot(table, bs, int(s.Positions[row])))
			}
		}
		pad(nil, st.rows-numTokens, -1)
	}
	st.offCtx = len(h)
	pad(s.ContextLens, st.seqs, 1)
	st.offLogits = len(h)
	pad(s.LogitRows, numLogitRows, 0)
	st.offItems = len(h)
	h = attention.PrefillItems(h, s.QueryStart, b.shape.NumHeads/b.shape.NumKVHeads, b.preKernel.Vectors())
	st.items = (len(h) - st.offItems) / 4
	st.leadItems = attention.PrefillItemsBefore(h[st.offItems:], int32(st.leadDecodes))
	if st.seqs > numSeqs { // the padding sequences' items: one row each, rows numTokens, numTokens+1, …
		padStarts := make([]int32, 0, st.seqs-numSeqs+1)
		for r := numTokens; r <= st.rows; r++ {
			padStarts = append(padStarts, int32(r))
		}
		first := len(h)
		h = attention.PrefillItems(h, padStarts, b.shape.NumHeads/b.shape.NumKVHeads, b.preKernel.Vectors())
		for i := first; i < len(h); i += 4 {
			h[i] += int32(numSeqs) // sequence ids of the padding
		}
	}
	st.paddedItems = (len(h) - st.offItems) / 4
	for g := range groups {
		if g == 0 {
			st.offTables = len(h)
		} else {
			st.groupTables = append(st.groupTables, len(h))
		}
		for seq := range st.seqs {
			var table []int32
			if seq < numSeqs {
				need := (int(s.ContextLens[seq]) + bs - 1) / bs
				table = s.BlockTables[seq]
				if g > 0 {
					table = s.GroupBlockTables[g-1][seq]
				}
				table = table[:need]
			}
			pad(table, st.stride, 0)
		}
	}
	if st.shared != nil {
		// A graph step's arrays are its bucket's (Padded: the graph's sizes), its real layout's first.
		l := st.shared.Layout
		if st.graph {
			l = st.shared.Padded
		}
		for i, x := range [][]int32{l.VirtualSeqs, l.SeqSlot, l.VirtualLens, l.SuffixLens,
			l.VirtualTables(s.BlockTables, st.stride), l.SuffixTables(s.BlockTables, bs, st.stride)} {
			st.offShared[i] = len(h)
			h = append(h, x...)
		}
	}
	b.host = h
	b.st = st
	// The picks' buffer grows here, before any op is recorded, so that Embed reads the buffer the
	// previous step's picks are in (ensureIDs carries them over).
	if err := b.ensureIDs(max(st.rows, numLogitRows)); err != nil {
		return fmt.Errorf("cuda backend: %w", err)
	}
	return nil
}

// sharedDecision is the shared-prefix decode of a decode step, or nil for the plain kernels: where
// Options.SharedPrefix allows it, the decode kernels cover the model, some sequences share pages
// (attention.FindSharedGroups), no layer has a window, and the dispatcher takes the shared path (always,
// where it can run, with SharedPrefixAlways) within the split-k workspace.
//
// A step that may run as a graph (rows > 0: its bucket, contextCap its context cap, graphStride its
// block tables' width) is planned for a shared-prefix graph (attention.DecideSharedGraph: a layout padded
// to a bucket of its groups, SharedDecision.Graph, whose launches are the same for every step of the
// bucket), unless maxSharedGraphKeys other buckets have captured graphs already; such a step then runs eagerly
// on tables stride pages wide (attention.DecideShared, charged for the graph it loses), as does a step
// that runs eagerly anyway.
func (b *cudaBackend) sharedDecision(s *Step, rows, contextCap, graphStride, stride int) *attention.SharedDecision {
	f := b.facts()
	if b.cfg.sharedPrefix == SharedPrefixOff || b.windowed || !f.decodeKernels {
		return nil
	}
	batch := attention.Batch{QueryStart: s.QueryStart, ContextLens: s.ContextLens, BlockTables: s.BlockTables}
	groups := b.grouper.Find(&batch, b.shape.BlockSize)
	if len(groups) == 0 {
		return nil
	}
	c := attention.DecodeCall{ContextLens: s.ContextLens, MaxBlocks: stride, NumHeads: f.numHeads,
		NumKVHeads: f.numKVHeads, HeadDim: f.headDim, BlockSize: f.blockSize, DType: f.attnDType, KVFP8: f.kvFP8, Tuning: f.attnTuning}
	always := b.cfg.sharedPrefix == SharedPrefixAlways
	fits := func(d *attention.SharedDecision, l *attention.SharedLayout) bool {
		return attention.SharedWorkspaceBytes(l, d.Plan, f.numHeads, f.numKVHeads, f.headDim, f.attnDType.Size()) <= splitWorkspaceBytes
	}
	if rows > 0 {
		gc := c
		gc.MaxBlocks = graphStride
		gc.Graph = &attention.GraphCall{MinBatch: graphBucketLow(rows), PartitionTokens: f.tune.AttnPartition}
		d := attention.DecideSharedGraph(gc, groups, f.attn, rows, contextCap)
		if d.Padded != nil && b.sharedGraphRoom(d.Graph) {
			switch {
			case !d.Use && !always:
				return nil // the plain kernels, in the bucket's graph
			case fits(&d, d.Padded):
				return &d
			}
		}
		c.LosesGraph = true // an eager step, where the plain one would be a graph
	}
	d := attention.DecideShared(c, groups, f.attn)
	if d.Layout == nil || !d.Use && !always || !fits(&d, d.Layout) {
		return nil
	}
	return &d
}

// sharedArgs are the step's shared-prefix arrays on the device (cudaStep.shared), with the layout the
// ops run: the padded one where they run padded to the graph's bucket (graphRun), else the step's own,
// whose arrays are the padded ones' first entries.
func (b *cudaBackend) sharedArgs() *attention.CUDASharedArgs {
	st := &b.st
	o := st.offShared
	l := st.shared.Layout
	if st.graphRun && st.shared.Padded != nil {
		l = st.shared.Padded
	}
	return &attention.CUDASharedArgs{Layout: l, Plan: st.shared.Plan,
		VirtualSeqs: b.metaPtr(o[0]), SeqSlot: b.metaPtr(o[1]), VirtualLens: b.metaPtr(o[2]), SuffixLens: b.metaPtr(o[3]),
		VirtualTables: b.metaPtr(o[4]), SuffixTables: b.metaPtr(o[5])}
}

// metaPtr returns the device address of int32 offset off of the metadata arena.
// The step's slot is b.slot: ops run before PickAsync moves it on.
func (b *cudaBackend) metaPtr(off int) cuda.DevicePtr {
	return b.meta.Add(4 * int64(b.slot*b.metaCap+off))
}

// CopyToHost runs the step and copies src's first len(dst) rows into dst. src is a matrix product's
// output (the logits), so it is float32.
func (b *cudaBackend) CopyToHost(dst [][]float32, src Tensor) error {
	if len(dst) == 0 {
		return b.run(nil)
	}
	t := tensorOf(src)
	rows, cols := len(dst), src.Cols
	if rows > src.Rows {
		return fmt.Errorf("cuda backend: copy %d rows of a %d-row tensor", rows, src.Rows)
	}
	return b.run(func() error {
		if err := b.stream.Synchronize(); err != nil {
			return err
		}
		if contiguous(dst, cols) {
			return b.dev.CopyFromDevice(cuda.Bytes(unsafe.Slice(&dst[0][0], rows*cols)), t.ptr)
		}
		for r := range dst {
			if err := b.dev.CopyFromDevice(cuda.Bytes(dst[r][:cols]), t.ptr.Add(4*int64(r*cols))); err != nil {
				return err
			}
		}
		return nil
	})
}

// contiguous reports whether the rows of dst lie one after another in memory, cols floats each (as
// Model.Forward lays them out), so that one copy fills them all.
func contiguous(dst [][]float32, cols int) bool {
	base := unsafe.Pointer(unsafe.SliceData(dst[0]))
	for r := range dst {
		if len(dst[r]) < cols || unsafe.Pointer(unsafe.SliceData(dst[r])) != unsafe.Add(base, 4*r*cols) {
			return false
		}
	}
	return true
}

// argmaxChunk is ArgmaxChunks' chunk of logits (ARGMAX_CHUNK in kernels/argmax.cu).
const argmaxChunk = 2048

// argmaxChunksParams mirrors ArgmaxChunksParams in kernels/argmax.cu (40 bytes: every launch of the
// kernel passes this type).
type argmaxChunksParams struct {
	Values, Indices, Logits cuda.DevicePtr
	Cols, Chunks, Ld        int32
}

// argmaxPartialsParams mirrors ArgmaxPartialsParams in kernels/argmax.cu (Best: 0 for none; 40 bytes:
// every launch of the kernel passes this type).
type argmaxPartialsParams struct {
	Out, Values, Indices, Best cuda.DevicePtr
	Tiles                      int32
}

var (
	_ [40]byte = [unsafe.Sizeof(argmaxChunksParams{})]byte{}
	_ [40]byte = [unsafe.Sizeof(argmaxPartialsParams{})]byte{}
)

// ensureArgmaxPartials makes the argmax's partial maxima (values and indices) hold n entries: the fused
// LM-head product's one per token and tile of 16 logits, or ArgmaxChunks' one per row and chunk. A new
// buffer drops the graphs, whose argmax used the old one.
func (b *cudaBackend) ensureArgmaxPartials(n int) error {
	if n <= b.argCap {
		return nil
	}
	n = nextPow2(n)
	if err := b.dropGraphs(); err != nil {
		return err
	}
	if err := errors.Join(b.dev.Free(b.argValues), b.dev.Free(b.argIndices)); err != nil {
		return err
	}
	b.argValues, b.argIndices, b.argCap = 0, 0, 0
	var err error
	if b.argValues, err = b.dev.Alloc(4 * int64(n)); err != nil {
		return err
	}
	if b.argIndices, err = b.dev.Alloc(4 * int64(n)); err != nil {
		return err
	}
	b.argCap = n
	return nil
}

// run executes the recorded step on the owner goroutine of the context: upload the metadata, queue the// run executes the recorded step on the owner goroutine of the context: upload the metadata, queue the
// ops (eagerly, into a new graph, or as the bucket's graph), then finish (nil: just wait).
func (b *cudaBackend) run(finish func() error) error {
	defer func() { b.ops, b.args = b.ops[:0], b.args[:0] }()
	if b.err != nil {
		return b.err
	}
	if err := b.quiesce(); err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	if err := b.ensureSlot(&b.slots[b.slot]); err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	err := b.dev.Do(func() error {
		err := b.upload(&b.slots[b.slot])
		if err == nil {
			err = b.queue()
		}
		if err == nil && finish != nil {
			err = finish()
		} else if err == nil {
			err = b.stream.Synchronize()
		}
		if err != nil {
			// Let queued copies finish before the next step rewrites their page-locked buffers.
			_ = errors.Join(b.stream.Synchronize(), b.up.Synchronize(), b.down.Synchronize())
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cuda backend: step: %w", err)
	}
	return nil
}

// upload copies the metadata arena to the device through the staging buffer of slot (b.slots[b.slot]),
// on stream up, and has the kernels' stream wait for it; it grows the device buffer (and drops the
// graphs that point at the old one) when it is short. It runs inside Do; slot has its events (ensureSlot)
// and no step in flight, so its staging buffer and its half of meta are free.
func (b *cudaBackend) upload(slot *stepSlot) error {
	n := len(b.host)
	if n > b.metaCap {
		if err := b.dropGraphs(); err != nil {
			return err
		}
		if b.meta != 0 {
			if err := b.dev.Free(b.meta); err != nil {
				return err
			}
		}
		size := max(4096, nextPow2(n))
		p, err := b.dev.Alloc(4 * int64(len(b.slots)*size))
		if err != nil {
			return err
		}
		b.meta, b.metaCap = p, size
		// A different buffer changes every op's pointers: the signature has to include it.
	}
	b.sig = fnvWord(b.sig, uint64(b.meta))
	if 4*n > len(slot.meta) {
		if err := b.dev.FreeHost(slot.meta); err != nil {
			return err
		}
		slot.meta = nil
		p, err := b.dev.AllocHost(4 * max(4096, nextPow2(n)))
		if err != nil {
			return err
		}
		slot.meta = p
	}
	staged := slot.meta[:4*n]
	copy(staged, cuda.Bytes(b.host))
	if err := b.dev.CopyToDeviceAsync(b.metaPtr(0), staged, b.up); err != nil {
		return err
	}
	if err := slot.uploaded.Record(b.up); err != nil {
		return err
	}
	return b.stream.Wait(slot.uploaded)
}
