package model

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/gollm/gollm/model/tp"
	"github.com/gollm/gollm/weights"
)

// Tensor parallelism (Options.TensorParallel) shards one model over ranks Megatron's way: each rank is
// a Model of its own over the same Step, built from a shard of every weight (shardGetter) on a backend
// wrapped by tpBackend, which runs the collectives the sharding needs:
//
//   - Q/K/V and gate/up are column-parallel: a rank holds the rows of its query heads, of the KV heads
//     those heads read (split across ranks, or replicated when there are fewer KV heads than ranks) and
//     its slice of the MLP's intermediate features, with their biases; q/k norms are per head and
//     replicated. Attention then runs on a rank's own heads, over its own KV pages: block tables and the
//     scheduler stay single.
//   - O and down are row-parallel: a rank holds the columns of its heads and features, its product is a
//     partial sum, and tpBackend all-reduces it before it joins the residual stream (a bias only on rank
//     0). The residual stream and every norm are replicated.
//   - The embedding and the LM head are sharded over the vocabulary: a rank holds ceil(V/size) rows
//     (zero rows past V) and one zero row more that stands for every token outside its range, so that
//     its embedding of the step is its share of the sum, all-reduced; its logits are its slice of the
//     vocabulary. A greedy pick reduces each rank's slice where it lives (on its GPU, bestPicker; else
//     on the rank's goroutine) and compares the ranks' best entries (pickParallelGreedy); Forward (and
//     so a sampled pick) has each rank copy its slice into the whole rows.
//
// The ranks run on goroutines of one process, one a rank: the logits meet in host memory, and on the
// CPU backend every all-reduce goes through the in-process communicator (model/tp). On GPUs
// rank r runs on GPU r and sums its activations as ops of its step, inside the decode step's CUDA graph
// (newCUDAGroup): with NCCL, or, where GOLLM_TP_ALLREDUCE=auto asks for it, small sums (a decode step's
// rows) in one kernel a rank that reads the peers' memory directly (peerCollective) and the rest with
// NCCL. One process rather than one per GPU: the engine, scheduler and block
// tables stay single without a control channel between processes, the logits gather is a host copy,
// and a failed rank is seen by its peers at once. A rank that fails aborts the group: its peers' waits
// in collectives are aborted so that none waits for it, every rank's collectives fail, and the model fails every
// later step.

// parallel is a Model's ranks under tensor parallelism.
type parallel struct {
	ranks  []*Model
	comms  []tp.Communicator
	vocab  int // the whole vocabulary
	shardV int // the vocabulary rows of a rank's shard, ceil(vocab/size)
	steps  []Step
	rows   [][]float32 // each rank's logits rows on the host, reused step to step
	err    error       // the failure that ended the group, returned by every later step
	group  *rankGroup  // the ranks' GPUs; nil on the CPU
}

// tpPlan is how a model's heads and features split over size ranks.
type tpPlan struct {
	size              int
	heads, kvHeads    int // per rank
	headDim           int
	inter, interStart []int // each rank's count of intermediate features, and its first
	shardV, vocab     int
	qGroup            int // query heads per KV head in the whole model
	replicateKV       bool
}

// planTP checks that cfg can be split over size ranks and returns the split.
func planTP(cfg *weights.Config, size int) (*tpPlan, error) {
	if size < 1 {
		return nil, fmt.Errorf("tensor parallel size %d must be at least 1", size)
	}
	hq, hkv := cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	if hq <= 0 || hkv <= 0 || hq%hkv != 0 {
		return nil, fmt.Errorf("config: %d attention heads, %d key/value heads", hq, hkv)
	}
	if hq%size != 0 {
		return nil, fmt.Errorf("tensor parallel size %d does not divide the %d attention heads", size, hq)
	}
	if hkv%size != 0 && size%hkv != 0 {
		return nil, fmt.Errorf("tensor parallel size %d neither divides the %d key/value heads nor is a multiple of them", size, hkv)
	}
	if cfg.IntermediateSize < size || cfg.VocabSize < size {
		return nil, fmt.Errorf("tensor parallel size %d exceeds the %d intermediate features or the %d tokens", size, cfg.IntermediateSize, cfg.VocabSize)
	}
	p := &tpPlan{size: size, heads: hq / size, kvHeads: max(1, hkv/size), headDim: headDim(cfg),
		shardV: (cfg.VocabSize + size - 1) / size, vocab: cfg.VocabSize, qGroup: hq / hkv, replicateKV: hkv < size}
	for r := range size {
		start, end := r*cfg.IntermediateSize/size, (r+1)*cfg.IntermediateSize/size
		p.interStart = append(p.interStart, start)
		p.inter = append(p.inter, end-start)
	}
	return p, nil
}

// TPRankConfig is the model that rank r of cfg sharded over size ranks runs (Options.TensorParallel):
// its query and KV heads, its intermediate features, its vocabulary shard and the zero row. It fails
// where the sharding does (planTP). A benchmark's roofline for one GPU of a group counts its shape.
func TPRankConfig(cfg *weights.Config, size, r int) (*weights.Config, error) {
	p, err := planTP(cfg, size)
	if err != nil {
		return nil, err
	}
	if r < 0 || r >= size {
		return nil, fmt.Errorf("rank %d of %d", r, size)
	}
	return p.rankConfig(cfg, r), nil
}

// rankConfig is rank r's model: its heads, its features, its vocabulary shard and the zero row.
func (p *tpPlan) rankConfig(cfg *weights.Config, r int) *weights.Config {
	c := *cfg
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = p.heads, p.kvHeads, p.headDim
	c.IntermediateSize = p.inter[r]
	c.VocabSize = p.shardV + 1
	return &c
}

// kvStart is the first KV head rank r holds.
func (p *tpPlan) kvStart(r int) int {
	if p.replicateKV {
		return r * p.heads / p.qGroup
	}
	return r * p.kvHeads
}

// shardGetter returns rank r's view of get: every tensor cut to the rank's shard (see parallel).
func (p *tpPlan) shardGetter(cfg *weights.Config, get tensorGetter, r int) tensorGetter {
	d := p.headDim
	embedName, headName := cfg.Tensor("embed_tokens.weight"), cfg.LMHeadTensor()
	return func(name string) (*weights.Tensor, error) {
		t, err := get(name)
		if err != nil {
			return nil, err
		}
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("tensor %q: tensor parallelism does not shard %v tensors", name, t.DType)
		}
		if numel(t.Shape) == 1 { // a scalar (a per-tensor weight, input or KV scale): every rank's
			return t, nil
		}
		module := name
		if i := strings.LastIndex(name, ".mlp."); i >= 0 {
			module = name[i+1:]
		} else if i := strings.LastIndex(name, ".self_attn."); i >= 0 {
			module = name[i+1:]
		}
		bias := strings.HasSuffix(name, ".bias")
		switch {
		case name == embedName || name == headName:
			lo := min(r*p.shardV, p.vocab) // a rank past the vocabulary's end holds zero rows only
			hi := min(p.vocab, lo+p.shardV)
			return sliceRows(t, lo, hi, p.shardV+1)
		case strings.HasPrefix(module, "self_attn.q_proj."):
			return sliceRows(t, r*p.heads*d, (r+1)*p.heads*d, p.heads*d)
		case strings.HasPrefix(module, "self_attn.k_proj."), strings.HasPrefix(module, "self_attn.v_proj."):
			lo := p.kvStart(r) * d
			return sliceRows(t, lo, lo+p.kvHeads*d, p.kvHeads*d)
		case strings.HasPrefix(module, "mlp.gate_proj."), strings.HasPrefix(module, "mlp.up_proj."):
			lo := p.interStart[r]
			return sliceRows(t, lo, lo+p.inter[r], p.inter[r])
		case module == "self_attn.o_proj.weight":
			return sliceCols(t, r*p.heads*d, (r+1)*p.heads*d)
		case module == "mlp.down_proj.weight":
			return sliceCols(t, p.interStart[r], p.interStart[r]+p.inter[r])
		case bias && (module == "self_attn.o_proj.bias" || module == "mlp.down_proj.bias"):
			if r == 0 { // a row-parallel product's bias is added once, before the all-reduce
				return t, nil
			}
			return sliceRows(t, 0, 0, t.Shape[0])
		}
		return t, nil // norms: replicated
	}
}

// numel is the number of elements of a tensor of shape.
func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// sliceRows returns rows [lo, hi) of t followed by zero rows up to rows in all.
func sliceRows(t *weights.Tensor, lo, hi, rows int) (*weights.Tensor, error) {
	if len(t.Shape) < 1 || hi > t.Shape[0] || lo > hi || rows < hi-lo {
		return nil, fmt.Errorf("tensor %q: shape %v has no rows [%d, %d)", t.Name, t.Shape, lo, hi)
	}
	rowBytes := t.DType.Size()
	for _, dim := range t.Shape[1:] {
		rowBytes *= dim
	}
	data := make([]byte, rows*rowBytes) // zero in every float dtype
	copy(data, t.Data[lo*rowBytes:hi*rowBytes])
	return &weights.Tensor{Name: t.Name, DType: t.DType, Shape: append([]int{rows}, t.Shape[1:]...), Data: data}, nil
}

// sliceCols returns columns [lo, hi) of the matrix t.
func sliceCols(t *weights.Tensor, lo, hi int) (*weights.Tensor, error) {
	if len(t.Shape) != 2 || hi > t.Shape[1] || lo > hi {
		return nil, fmt.Errorf("tensor %q: shape %v has no columns [%d, %d)", t.Name, t.Shape, lo, hi)
	}
	es, cols := t.DType.Size(), t.Shape[1]
	data := make([]byte, 0, t.Shape[0]*(hi-lo)*es)
	for row := range t.Shape[0] {
		data = append(data, t.Data[(row*cols+lo)*es:(row*cols+hi)*es]...)
	}
	return &weights.Tensor{Name: t.Name, DType: t.DType, Shape: []int{t.Shape[0], hi - lo}, Data: data}, nil
}

// loadParallel builds the ranks of a tensor-parallel model and the Model that drives them: on the CPU
// each rank's backend is newBackend's, its collectives the in-process communicator's; on GPUs
// (Options.Device "cuda", or "auto" with one) rank r runs on GPU r with NCCL (newCUDAGroup). The GPU
// ranks are built without their KV pools, which then all get the pages the tightest of them holds, so
// that one block table serves every rank.
func loadParallel(ctx context.Context, cfg *weights.Config, get tensorGetter, opts Options, newBackend NewBackendFunc, deferKV bool) (*Model, error) {
	p, err := planTP(cfg, opts.TensorParallel)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	shape, err := shapeOf(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	comms, err := tp.NewInProcess(p.size)
	if err != nil {
		return nil, fmt.Errorf("model: load: %w", err)
	}
	par := &parallel{comms: comms, vocab: cfg.VocabSize, shardV: p.shardV, steps: make([]Step, p.size), rows: make([][]float32, p.size)}
	rankBackend := func(int) NewBackendFunc { return newBackend }
	sharing := 1
	if opts.Device == DeviceCUDA || (opts.Device == DeviceAuto && cudaUsable() == nil) {
		g, err := newCUDAGroup(cfg, opts, comms)
		if err != nil {
			return nil, fmt.Errorf("model: load: %w", err)
		}
		par.group, rankBackend, sharing, deferKV = g, g.backends, g.sharing, true
	}
	// The ranks load at once, a goroutine each: each reads (or draws) and cuts every tensor for itself,
	// on its own device.
	par.ranks = make([]*Model, p.size)
	errs := make([]error, p.size)
	var wg sync.WaitGroup
	for r := range p.size {
		rankOpts := opts
		rankOpts.TensorParallel, rankOpts.Progress = 1, nil
		if r == 0 {
			rankOpts.Progress = opts.Progress // reports rank 0's shard
		}
		comm, build := comms[r], rankBackend(r)
		wrapped := func(s Shape) (Backend, error) {
			b, err := build(s)
			if err != nil {
				return nil, err
			}
			return &tpBackend{Backend: b, comm: comm}, nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			par.ranks[r], _, errs[r] = loadWeights(ctx, p.rankConfig(cfg, r), p.shardGetter(cfg, get, r), rankOpts, wrapped, deferKV)
			if errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		par.ranks = slices.DeleteFunc(par.ranks, func(m *Model) bool { return m == nil })
		par.close()
		return nil, err
	}
	if deferKV {
		if shape.NumBlocks, err = sizeKVRanks(par.ranks, opts, sharing); err != nil {
			par.close()
			return nil, fmt.Errorf("model: load: %w", err)
		}
	}
	return &Model{cfg: cfg, shape: shape, eps: float32(cfg.RMSNormEps), par: par}, nil
}

// sizeKVRanks reserves every rank's workspace, then gives each the same number of KV pages, as sizeKV
// does for a model run whole: opts.NumBlocks (AllocateKVBlocks, which refuses what does not fit), or the
// fewest that any rank's GPU holds at the memory utilization (kvCapacity, then allocateKV: AllocateKV's
// two halves), divided among the ranks sharing a GPU. It returns that number.
func sizeKVRanks(ranks []*Model, opts Options, sharing int) (int, error) {
	for _, m := range ranks {
		if err := m.reserveWorkspace(opts); err != nil {
			return 0, err
		}
	}
	if n := opts.NumBlocks; n > 0 {
		for r, m := range ranks {
			alloc, ok := m.backend.(*tpBackend).Backend.(kvAllocator)
			if !ok {
				return 0, errors.New("options: the backend was built without a KV pool and cannot allocate one")
			}
			if err := alloc.AllocateKVBlocks(n); err != nil {
				return 0, fmt.Errorf("rank %d: KV pool: %w", r, err)
			}
			m.shape.NumBlocks = n
		}
		return n, nil
	}
	sizers := make([]kvCapacitor, len(ranks))
	n := math.MaxInt
	for r, m := range ranks {
		c, ok := m.backend.(*tpBackend).Backend.(kvCapacitor)
		if !ok {
			return 0, errors.New("options: NumBlocks 0 needs a backend that sizes its KV pool (the CUDA backend)")
		}
		pages, err := c.kvCapacity(utilizationOf(opts))
		if err != nil {
			return 0, fmt.Errorf("rank %d: KV pool: %w", r, err)
		}
		sizers[r], n = c, min(n, pages/sharing)
	}
	if n < 1 {
		return 0, fmt.Errorf("KV pool: no room for a page on each of %d ranks sharing a GPU", sharing)
	}
	for r, m := range ranks {
		if err := sizers[r].allocateKV(n); err != nil {
			return 0, fmt.Errorf("rank %d: KV pool: %w", r, err)
		}
		m.shape.NumBlocks = n
	}
	return n, nil
}

// rankGroup is the GPUs of a tensor-parallel model (newCUDAGroup): each rank's backend constructor,
// how many ranks share a GPU, and how to stop and release them.
type rankGroup struct {
	backends func(r int) NewBackendFunc
	sharing  int
	// abort stops every rank's device collectives (a rank failed with err), close releases the
	// communicators and the GPUs once the ranks are closed.
	abort func(err error)
	close func() error
}

// forwardParallel is Forward on a tensor-parallel model: every rank runs the step and copies its
// slice of the vocabulary into the rows returned (ranks write disjoint columns, side by side).
func (m *Model) forwardParallel(s *Step) ([][]float32, error) {
	par := m.par
	out := make([][]float32, len(s.LogitRows))
	flat := make([]float32, len(out)*par.vocab)
	for i := range out {
		out[i] = flat[i*par.vocab : (i+1)*par.vocab : (i+1)*par.vocab]
	}
	err := m.forwardRanks(s, func(c tp.Communicator, rows [][]float32) error {
		r := c.Rank()
		if n := par.valid(r); n > 0 { // a rank past the vocabulary's end has no columns to place
			for i, row := range rows {
				copy(out[i][r*par.shardV:], row[:n])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("model: forward: %w", err)
	}
	return out, nil
}

// pickParallelGreedy is a greedy Start on a tensor-parallel model: each rank reduces its own slice of
// every logits row to its first largest entry (and whether the slice holds NaN or +Inf) where the
// logits live (its GPU: bestPicker; else on its own goroutine), and the host takes each row's best over
// the ranks in vocabulary order. Only the ranks'
// (value, index) pairs meet, never the rows: gathering whole rows and picking them on one goroutine
// cost more than the step itself at batch 64 (docs/bench/tp-h200.md).
func (m *Model) pickParallelGreedy(s *Step) ([]int32, error) {
	par := m.par
	numRows := len(s.LogitRows)
	bests := make([][]rowBest, len(par.ranks))
	err := m.stepRanks(s, func(r int, rank *Model, step *Step) error {
		if bp := rankPicker(rank.backend); bp != nil && !tpHostPick {
			bests[r] = make([]rowBest, numRows)
			return rank.forwardBest(step, par.valid(r), bests[r], bp)
		}
		rows, err := rank.forwardInto(step, &par.rows[r])
		if err == nil {
			bests[r] = par.reduceRows(r, rows)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("model: forward: %w", err)
	}
	ids := make([]int32, numRows)
	for i := range ids {
		ids[i] = par.combine(bests, i)
	}
	return ids, nil
}

// bestPicker is a backend that ends a step with each logits row reduced where the logits live to its
// first largest entry over the row's first cols columns, as bestOf does (cudaBackend.PickBest): a
// tensor-parallel rank's greedy pick then moves two numbers a row to the host instead of its slice of
// the vocabulary (docs/bench/tp-h200.md).
type bestPicker interface {
	PickBest(dst []rowBest, src Tensor, cols int) error
}

// rankPicker is rank backend b's bestPicker, or nil where the device under it has none.
func rankPicker(b Backend) bestPicker {
	if tb, ok := b.(*tpBackend); ok {
		if _, ok := tb.Backend.(bestPicker); !ok {
			return nil
		}
	}
	bp, _ := b.(bestPicker)
	return bp
}

// tpHostPick, set by tests, makes every rank's greedy pick copy its logits and reduce them on the host,
// as a backend without bestPicker does.
var tpHostPick bool

// forwardBest runs step s and ends it with bp (m's backend) reducing each logits row over its first
// cols columns into dst.
func (m *Model) forwardBest(s *Step, cols int, dst []rowBest, bp bestPicker) error {
	logits, err := m.forward(s)
	if err == nil {
		err = bp.PickBest(dst[:len(s.LogitRows)], logits, cols)
	}
	if err != nil {
		return fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	return nil
}

// rowBest is a rank's greedy reduction of one logits row over its vocabulary slice: the first largest
// entry v at slice index i (−Inf and 0 for a slice of nothing larger), and bad when the slice holds NaN
// or +Inf.
type rowBest struct {
	v   float32
	i   int32
	bad bool
}

// reduceRows is rank r's greedy reduction of its logits rows: each over the rank's tokens only, on
// the rank's share of the host's cores (GOMAXPROCS over the ranks, which reduce side by side).
func (par *parallel) reduceRows(r int, rows [][]float32) []rowBest {
	bests := make([]rowBest, len(rows))
	n := par.valid(r)
	forRows(len(rows), n, runtime.GOMAXPROCS(0)/max(1, len(par.ranks)), greedyGrain, func(i int) {
		bests[i] = bestOf(rows[i][:n])
	})
	return bests
}

// bestOf reduces x as Argmax and Pickable do.
func bestOf(x []float32) rowBest {
	b := rowBest{v: float32(math.Inf(-1))}
	for i, v := range x {
		if !(v < float32(math.Inf(1))) {
			b.bad = true
		}
		if v > b.v {
			b.v, b.i = v, int32(i)
		}
	}
	return b
}

// combine is row i's pick from the ranks' reductions: NonFinitePick when a rank's slice holds NaN or
// +Inf, else the first largest over the ranks in vocabulary order (rank r's slice begins at r·shardV),
// which is the whole row's Argmax.
func (par *parallel) combine(bests [][]rowBest, i int) int32 {
	best := rowBest{v: float32(math.Inf(-1))}
	for r := range bests {
		b := bests[r][i]
		if b.bad {
			return NonFinitePick
		}
		if b.v > best.v {
			best.v, best.i = b.v, int32(r*par.shardV)+b.i
		}
	}
	return best.i
}

// valid is the number of rank r's logits columns that are tokens: its shard's rows below the
// vocabulary's end (the rest are zero rows). It is at most shardV, and 0 on a rank that lies wholly
// past the end of a small vocabulary.
func (par *parallel) valid(r int) int { return max(0, min(par.shardV, par.vocab-r*par.shardV)) }

// forwardRanks runs step s on every rank, a goroutine each, and hands rank r's logits rows to each on
// that goroutine (row i is s.LogitRows[i]'s slice of the vocabulary, shardV+1 wide: see parallel). A
// failed rank aborts its peers, and the group fails every later step.
func (m *Model) forwardRanks(s *Step, each func(c tp.Communicator, rows [][]float32) error) error {
	return m.stepRanks(s, func(r int, rank *Model, step *Step) error {
		rows, err := rank.forwardInto(step, &m.par.rows[r])
		if err != nil {
			return err
		}
		return each(m.par.comms[r], rows)
	})
}

// stepRanks runs step s on every rank, a goroutine each: run(r, rank r's model, rank r's step), the step
// with each token as its row of the rank's vocabulary shard or the zero row. A failed rank aborts its
// peers, and the group fails every later step.
func (m *Model) stepRanks(s *Step, run func(r int, rank *Model, step *Step) error) error {
	if m.closed {
		return ErrClosed
	}
	if m.pending {
		return fmt.Errorf("%w: the step before was begun and its pick not committed", ErrInvalidStep)
	}
	if err := m.validate(s); err != nil {
		return err
	}
	par := m.par
	if par.err != nil {
		return par.err
	}
	err := tp.Run(par.comms, func(c tp.Communicator) error {
		r := c.Rank()
		// The rank's step: each token as its row of the rank's vocabulary shard, or the zero row.
		step := &par.steps[r]
		*step = *s
		lo := int32(r * par.shardV)
		step.Tokens = make([]int32, len(s.Tokens))
		for i, tok := range s.Tokens {
			step.Tokens[i] = int32(par.shardV)
			if tok >= lo && tok < lo+int32(par.shardV) {
				step.Tokens[i] = tok - lo
			}
		}
		if err := run(r, par.ranks[r], step); err != nil {
			par.abort(err) // a peer may be waiting in a device collective for this rank
			return err
		}
		return nil
	})
	if err != nil {
		par.err = err
	}
	return err
}

// abort stops the ranks' device collectives (none on the CPU), err being the failure that ends them.
func (par *parallel) abort(err error) {
	if par.group != nil {
		par.group.abort(err)
	}
}

// close closes every rank, then their GPUs.
func (par *parallel) close() error {
	var errs []error
	for _, m := range par.ranks {
		errs = append(errs, m.Close())
	}
	if par.group != nil {
		errs = append(errs, par.group.close())
	}
	return errors.Join(errs...)
}

// tpBackend is a rank's backend: the device's own, with the collectives of the sharding after the ops
// whose results are partial (see parallel). A backend that sums on its device (deviceReducer: the CUDA
// backend, in a group of newCUDAGroup) runs them as ops of its step; on others the activations are host
// float32 slices (the CPU backend's) that the communicator sums.
type tpBackend struct {
	Backend
	comm tp.Communicator
	err  error // the first collective's failure; reported by CopyToHost
}

// deviceReducer is implemented by backends whose steps sum a tensor over the ranks themselves.
type deviceReducer interface {
	AllReduceSum(t Tensor)
}

// rowParallel marks the Weight of a row-parallel product (o_proj, down_proj), whose output MatMul
// all-reduces.
type rowParallel struct{ w Weight }

func (b *tpBackend) Upload(t *weights.Tensor) (Weight, error) {
	w, err := b.Backend.Upload(t)
	return markRowParallel(t.Name, w), err
}

// UploadFP8 uploads a shard of an FP8 weight: a column-parallel one's rows with their scales, a
// row-parallel one's columns with every row's scale. Its input is quantized per token over the rank's
// columns (or with the checkpoint's static scale), as vLLM's sharded FP8 layers do.
func (b *tpBackend) UploadFP8(fw *FP8Weight) (Weight, error) {
	w, err := b.Backend.UploadFP8(fw)
	return markRowParallel(strings.TrimSuffix(fw.Name, "+"), w), err
}

// markRowParallel wraps the weight named name in rowParallel when it is an O or down product's.
func markRowParallel(name string, w Weight) Weight {
	if w.Data != nil && (strings.HasSuffix(name, "self_attn.o_proj.weight") || strings.HasSuffix(name, "mlp.down_proj.weight")) {
		return Weight{Rows: w.Rows, Cols: w.Cols, Bias: w.Bias, Data: rowParallel{w}}
	}
	return w
}

func (b *tpBackend) NewTensor(rows, cols int) (Tensor, error) {
	t, err := b.Backend.NewTensor(rows, cols)
	if err == nil {
		_, host := t.Data.([]float32)
		if _, device := b.Backend.(deviceReducer); !host && !device {
			return Tensor{}, errors.New("tensor parallelism: the backend's activations are neither host float32 nor summed on its device")
		}
	}
	return t, err
}

// checkFP8 is the rank's backend's (fp8Checker), where it has one.
func (b *tpBackend) checkFP8(fp8Weights bool, s Shape) error {
	if fc, ok := b.Backend.(fp8Checker); ok {
		return fc.checkFP8(fp8Weights, s)
	}
	return nil
}

func (b *tpBackend) BeginStep(s *Step) error {
	b.err = nil
	return b.Backend.BeginStep(s)
}

func (b *tpBackend) Embed(dst Tensor, table Weight) {
	b.Backend.Embed(dst, table)
	b.allReduce(dst)
}

func (b *tpBackend) MatMul(dst, x Tensor, w Weight) {
	rp, ok := w.Data.(rowParallel)
	if !ok {
		b.Backend.MatMul(dst, x, w)
		return
	}
	inner := rp.w
	inner.Bias = w.Bias
	b.Backend.MatMul(dst, x, inner)
	b.allReduce(dst)
}

// allReduce sums t over the ranks: as an op of the device's step, or now on the host; after a host
// failure it does nothing more and the step fails at its end.
func (b *tpBackend) allReduce(t Tensor) {
	if d, ok := b.Backend.(deviceReducer); ok {
		d.AllReduceSum(t)
		return
	}
	if b.err == nil {
		b.err = b.comm.AllReduceSum(f32(t))
	}
}

func (b *tpBackend) CopyToHost(dst [][]float32, src Tensor) error {
	if b.err != nil {
		return b.err
	}
	if err := b.Backend.CopyToHost(dst, src); err != nil {
		return err
	}
	return b.collectiveErr()
}

// collectiveChecker is implemented by backends whose collectives may fail where no call returns it (work
// in a replayed CUDA graph).
type collectiveChecker interface {
	collectiveErr() error
}

// collectiveErr is the device backend's collective failure, checked once a step's results are in.
func (b *tpBackend) collectiveErr() error {
	if c, ok := b.Backend.(collectiveChecker); ok {
		if err := c.collectiveErr(); err != nil {
			return fmt.Errorf("tensor parallelism: %w", err)
		}
	}
	return nil
}

// PickBest is the device backend's (rankPicker checks it has one), after a failed collective's error.
func (b *tpBackend) PickBest(dst []rowBest, src Tensor, cols int) error {
	if b.err != nil {
		return b.err
	}
	bp, ok := b.Backend.(bestPicker)
	if !ok {
		return errors.New("tensor parallelism: the rank's backend does not pick on its device")
	}
	if err := bp.PickBest(dst, src, cols); err != nil {
		return err
	}
	return b.collectiveErr()
}
