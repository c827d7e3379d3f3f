package model

import (
	"fmt"
	"math"

	"github.com/gollm/gollm/attention"
	"github.com/gollm/gollm/weights"
)

// cpuBackend is the pure-Go reference backend. Activations are []float32 and the KV cache is one
// attention.Cache per page array of the KV layout (per layer without KV groups), float32 or FP8 e4m3
// (Shape.KVCacheDType; each layer reads its array through a view with its scales). FP8 Linear weights
// (UploadFP8) keep their e4m3 codes and scales, and MatMul computes FP8Weight's product: the
// reference the GPU's FP8 kernels are checked against, not a fast path. Matrices of a bfloat16 checkpoint stay bfloat16 (bf16Matrix,
// 2 bytes per parameter: about 270 MB for a 135M-parameter model, 16 GB for 8B) and are widened inside
// the matrix-product kernels: on the 2-core machine this was measured on, a decode step then costs the
// same CPU time as with a float32 copy (the widening costs what the halved memory traffic saves) at half
// the memory, and bigger models, more bound by memory, gain. Float32 and float16 checkpoints, and every
// vector, are converted to float32 once at upload (4 bytes per parameter). All arithmetic is float32
// (norms accumulate in float64). Matrix products split the output features across GOMAXPROCS goroutines.
type cpuBackend struct {
	shape   Shape
	caches  []*attention.Cache // per layer: its page array (a view with its scales when FP8)
	workers int
	// sharedPrefix is Options.SharedPrefix: whether decodes that share pages read them once.
	sharedPrefix string
	xq, sx       []float32 // scratch of FP8 products: the input quantized to e4m3 values [T][in], its scales [T]

	// Step state, refreshed by BeginStep.
	step     *Step
	batches  []attention.Batch // per KV group: the step's metadata with the group's block tables
	slots    [][]int32         // per KV group: the K/V slot of each token row
	cos, sin [2][]float32      // [T][D/2] rotary factors of each token's position: RopeInvFreq's, LocalRopeInvFreq's
	k, v, q  []float32         // scratch: [T][Hkv*D], [T][Hkv*D], [T][Hq*D]

	// grouper finds the steps' shared groups (SharedPrefixAlways), its scratch kept from step to step.
	grouper attention.SharedGrouper
}

// NewCPUBackend returns the pure-Go backend for shape. It allocates the KV cache at once: NumKVSlots (the
// layers, without KV groups) × 2 × NumBlocks × BlockSize × NumKVHeads × HeadDim × 4 bytes, or 1 byte
// with an FP8 KV cache (KVBytesPerBlock × NumBlocks), after checking that they fit the host memory
// available (an error wrapping ErrKVTooLarge otherwise).
// Uploaded weights cost 2 bytes per parameter for bfloat16 checkpoints and 4 bytes for float32 and
// float16 ones, in addition to the checkpoint's memory map (which the caller may close after Load).
func NewCPUBackend(shape Shape) (Backend, error) {
	if shape.NumLayers <= 0 || shape.NumBlocks <= 0 || shape.BlockSize <= 0 || shape.NumKVHeads <= 0 ||
		shape.HeadDim <= 0 || shape.NumHeads <= 0 || len(shape.RopeInvFreq) != shape.HeadDim/2 ||
		(shape.LocalRopeInvFreq != nil && len(shape.LocalRopeInvFreq) != shape.HeadDim/2) ||
		(shape.Layers != nil && len(shape.Layers) != shape.NumLayers) {
		return nil, fmt.Errorf("cpu backend: invalid shape %+v", shape)
	}
	for l, ls := range shape.Layers {
		if ls.Window < 0 || (ls.LocalRope && shape.LocalRopeInvFreq == nil) || ls.KVSlot < 0 ||
			ls.KVSlot >= shape.NumKVSlots() || ls.KVGroup < 0 || ls.KVGroup >= max(1, len(shape.KVGroups)) {
			return nil, fmt.Errorf("cpu backend: layer %d: invalid %+v", l, ls)
		}
	}
	fp8, err := shape.kvFP8()
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if err := checkHostKV(shape, 0); err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	b := &cpuBackend{shape: shape, workers: defaultWorkers()}
	slots := make([]*attention.Cache, shape.NumKVSlots())
	for i := range slots {
		if fp8 {
			slots[i] = attention.NewFP8Cache(shape.NumBlocks, shape.BlockSize, shape.NumKVHeads, shape.HeadDim)
		} else {
			slots[i] = attention.NewCache(shape.NumBlocks, shape.BlockSize, shape.NumKVHeads, shape.HeadDim)
		}
	}
	b.caches = make([]*attention.Cache, shape.NumLayers)
	for l := range b.caches {
		b.caches[l] = slots[shape.Layer(l).KVSlot]
		if fp8 {
			b.caches[l] = b.caches[l].WithScales(shape.KVScales[l].K, shape.KVScales[l].V)
		}
	}
	return b, nil
}

func f32(t Tensor) []float32 { return t.Data.([]float32)[:t.Rows*t.Cols] }

func (b *cpuBackend) Upload(t *weights.Tensor) (Weight, error) {
	w := Weight{Rows: 1}
	switch len(t.Shape) {
	case 1:
		w.Cols = t.Shape[0]
	case 2:
		w.Rows, w.Cols = t.Shape[0], t.Shape[1]
	default:
		return Weight{}, fmt.Errorf("cpu backend: tensor %q: rank %d, want 1 or 2", t.Name, len(t.Shape))
	}
	if want := w.Rows * w.Cols * t.DType.Size(); len(t.Data) != want || want == 0 {
		return Weight{}, fmt.Errorf("cpu backend: tensor %q: %d bytes of %v for shape %v", t.Name,
			len(t.Data), t.DType, t.Shape)
	}
	if t.DType == weights.DTypeBF16 && len(t.Shape) == 2 && w.Cols%2 == 0 {
		w.Data = newBF16Matrix(t.Data)
		return w, nil
	}
	w.Data = t.Float32()
	return w, nil
}

func (b *cpuBackend) UploadFP8(w *FP8Weight) (Weight, error) {
	if err := w.check(); err != nil {
		return Weight{}, fmt.Errorf("cpu backend: %w", err)
	}
	return Weight{Rows: w.Rows, Cols: w.Cols, Data: &fp8Matrix{
		codes:      append([]byte(nil), w.Codes...),
		scales:     append([]float32(nil), w.Scales...),
		inputScale: w.InputScale,
	}}, nil
}

func (b *cpuBackend) NewTensor(rows, cols int) (Tensor, error) {
	if rows <= 0 || cols <= 0 {
		return Tensor{}, fmt.Errorf("cpu backend: tensor [%d][%d]: dimensions must be positive", rows, cols)
	}
	return Tensor{Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}, nil
}

func (b *cpuBackend) BeginStep(s *Step) error {
	b.step = s
	numTokens := len(s.Tokens)
	sh := &b.shape
	groups := max(1, len(sh.KVGroups))
	b.batches = b.batches[:0]
	b.slots = b.slots[:0]
	for g := range groups {
		tables := s.BlockTables
		if g > 0 {
			tables = s.GroupBlockTables[g-1]
		}
		batch := attention.Batch{QueryStart: s.QueryStart, ContextLens: s.ContextLens, BlockTables: tables}
		if b.sharedPrefix == SharedPrefixAlways { // auto: the CPU gains nothing by it (attention.Batch.Shared)
			batch.Shared = b.grouper.Find(&batch, sh.BlockSize)
		}
		b.batches = append(b.batches, batch)
		if g == 0 {
			b.slots = append(b.slots, s.SlotMapping)
			continue
		}
		slots := make([]int32, numTokens)
		for seq, tab := range tables {
			for row := s.QueryStart[seq]; row < s.QueryStart[seq+1]; row++ {
				slots[row] = attention.Slot(tab, sh.BlockSize, int(s.Positions[row]))
			}
		}
		b.slots = append(b.slots, slots)
	}
	half := sh.HeadDim / 2
	for table, inv := range [2][]float32{sh.RopeInvFreq, sh.LocalRopeInvFreq} {
		if inv == nil {
			continue
		}
		cos, sin := grow(b.cos[table], numTokens*half), grow(b.sin[table], numTokens*half)
		for t, pos := range s.Positions {
			// As transformers: the angle is a float32 product, cos and sin are rounded to float32.
			p := float32(pos)
			for i, f := range inv {
				angle := float64(f * p)
				cos[t*half+i] = float32(math.Cos(angle)) * sh.RopeAttentionScaling
				sin[t*half+i] = float32(math.Sin(angle)) * sh.RopeAttentionScaling
			}
		}
		b.cos[table], b.sin[table] = cos, sin
	}
	kvCols := sh.NumKVHeads * sh.HeadDim
	b.k = grow(b.k, numTokens*kvCols)
	b.v = grow(b.v, numTokens*kvCols)
	b.q = grow(b.q, numTokens*sh.NumHeads*sh.HeadDim)
	return nil
}

// grow returns s resliced to n elements, reallocated when its capacity is short.
func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (b *cpuBackend) Embed(dst Tensor, table Weight) {
	out, h := f32(dst), table.Cols
	for t, tok := range b.step.Tokens {
		switch tab := table.Data.(type) {
		case []float32:
			copy(out[t*h:(t+1)*h], tab[int(tok)*h:int(tok+1)*h])
		case bf16Matrix:
			decodeBF16Pairs(out[t*h:(t+1)*h], tab[int(tok)*h/2:int(tok+1)*h/2])
		}
	}
	if scale := b.shape.EmbedScale; scale != 0 {
		for i := range out {
			out[i] *= scale
		}
	}
}

func (b *cpuBackend) AddRMSNorm(dst, residual, add Tensor, w Weight, eps float32) {
	res, out, gain := f32(residual), f32(dst), w.Data.([]float32)
	h := residual.Cols
	var extra []float32
	if add.Data != nil {
		extra = f32(add)
	}
	for r := range residual.Rows {
		row := res[r*h : (r+1)*h]
		if extra != nil {
			for i, x := range extra[r*h : (r+1)*h] {
				row[i] += x
			}
		}
		rmsNorm(out[r*h:(r+1)*h], row, gain, eps)
	}
}

// rmsNorm writes rmsnorm(x)·gain into dst (which may be x): the mean square accumulated in float64, the
// rest in float32 as transformers computes it.
func rmsNorm(dst, x, gain []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(float64(float32(sum/float64(len(x)))+eps)))
	dst, gain = dst[:len(x)], gain[:len(x)]
	for i, v := range x {
		dst[i] = gain[i] * (v * inv)
	}
}

func (b *cpuBackend) QKNorm(qkv Tensor, q, k Weight, eps float32) {
	sh := &b.shape
	d, data := sh.HeadDim, f32(qkv)
	qGain, kGain := q.Data.([]float32), k.Data.([]float32)
	for t := range qkv.Rows {
		row := data[t*qkv.Cols : (t+1)*qkv.Cols]
		for h := range sh.NumHeads + sh.NumKVHeads { // the q heads, then the k heads
			gain := qGain
			if h >= sh.NumHeads {
				gain = kGain
			}
			head := row[h*d : (h+1)*d]
			rmsNorm(head, head, gain, eps)
		}
	}
}

func (b *cpuBackend) MatMul(dst, x Tensor, w Weight) {
	switch data := w.Data.(type) {
	case []float32:
		matMul(f32(dst), f32(x), data, x.Rows, w.Cols, w.Rows, b.workers)
	case bf16Matrix:
		matMulBF16(f32(dst), f32(x), data, x.Rows, w.Cols, w.Rows, b.workers)
	case *fp8Matrix:
		b.xq, b.sx = grow(b.xq, x.Rows*w.Cols), grow(b.sx, x.Rows)
		quantizeRows(b.xq, b.sx, f32(x), x.Rows, w.Cols, data.inputScale)
		matMulFP8(f32(dst), b.xq, b.sx, data, x.Rows, w.Cols, w.Rows, b.workers)
	}
	if w.Bias != nil {
		out, bias := f32(dst), w.Bias.Data.([]float32)
		for r := range dst.Rows {
			row := out[r*dst.Cols : (r+1)*dst.Cols]
			for o, v := range bias[:len(row)] {
				row[o] += v
			}
		}
	}
}

func (b *cpuBackend) RoPEWriteKV(qkv Tensor, layer int) {
	sh := &b.shape
	d, half := sh.HeadDim, sh.HeadDim/2
	cols := qkv.Cols
	data := f32(qkv)
	qCols, kvCols := sh.NumHeads*d, sh.NumKVHeads*d
	table := 0
	if sh.Layer(layer).LocalRope {
		table = 1
	}
	for t := range qkv.Rows {
		row := data[t*cols : (t+1)*cols]
		cos, sin := b.cos[table][t*half:(t+1)*half], b.sin[table][t*half:(t+1)*half]
		for h := range sh.NumHeads + sh.NumKVHeads { // the q heads, then the k heads
			rotateHalf(row[h*d:(h+1)*d], cos, sin)
		}
		copy(b.k[t*kvCols:(t+1)*kvCols], row[qCols:qCols+kvCols])
		copy(b.v[t*kvCols:(t+1)*kvCols], row[qCols+kvCols:qCols+2*kvCols])
	}
	b.caches[layer].Write(b.k, b.v, b.slots[sh.Layer(layer).KVGroup])
}

// rotateHalf applies HF LLaMA's rotary embedding to one head: x*cos + rotate_half(x)*sin, where
// rotate_half(x) = [-x[half:], x[:half]] and cos, sin are the half-length factors (repeated twice).
func rotateHalf(x, cos, sin []float32) {
	half := len(cos)
	lo, hi := x[:half], x[half:2*half]
	sin = sin[:half]
	for i, c := range cos {
		a, b := lo[i], hi[i]
		lo[i] = a*c - b*sin[i]
		hi[i] = b*c + a*sin[i]
	}
}

func (b *cpuBackend) Attention(dst, qkv Tensor, layer int) {
	sh := &b.shape
	qCols := sh.NumHeads * sh.HeadDim
	data := f32(qkv)
	for t := range qkv.Rows {
		copy(b.q[t*qCols:(t+1)*qCols], data[t*qkv.Cols:t*qkv.Cols+qCols])
	}
	ls := sh.Layer(layer)
	batch := b.batches[ls.KVGroup]
	batch.Window = ls.Window
	attention.Attend(f32(dst), b.q, sh.NumHeads, sh.Scale(), b.caches[layer], &batch)
}

func (b *cpuBackend) SwiGLU(dst, gateUp Tensor) {
	in, out := f32(gateUp), f32(dst)
	inter := dst.Cols
	for r := range dst.Rows {
		gate, up := in[r*2*inter:r*2*inter+inter], in[r*2*inter+inter:(r+1)*2*inter]
		o := out[r*inter : (r+1)*inter]
		for i, g := range gate {
			o[i] = float32(float64(g)/(1+math.Exp(-float64(g)))) * up[i]
		}
	}
}

func (b *cpuBackend) GeGLU(dst, gateUp Tensor) {
	in, out := f32(gateUp), f32(dst)
	inter := dst.Cols
	for r := range dst.Rows {
		gate, up := in[r*2*inter:r*2*inter+inter], in[r*2*inter+inter:(r+1)*2*inter]
		o := out[r*inter : (r+1)*inter]
		for i, g := range gate {
			o[i] = geluTanh(g) * up[i]
		}
	}
}

// geluTanh is PyTorch's gelu(x, approximate="tanh"), in float64 rounded to float32.
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

func (b *cpuBackend) Softcap(x Tensor, c float32) {
	vals := f32(x)
	for i, v := range vals {
		vals[i] = c * float32(math.Tanh(float64(v/c)))
	}
}

func (b *cpuBackend) GatherRows(dst, src Tensor, rows []int32) {
	out, in := f32(dst), f32(src)
	c := src.Cols
	for j, r := range rows {
		copy(out[j*c:(j+1)*c], in[int(r)*c:int(r+1)*c])
	}
}

func (b *cpuBackend) CopyToHost(dst [][]float32, src Tensor) error {
	if len(dst) == 0 {
		return nil
	}
	in := f32(src)
	for r := range dst {
		copy(dst[r], in[r*src.Cols:(r+1)*src.Cols])
	}
	return nil
}

func (b *cpuBackend) Close() error {
	b.caches = nil
	return nil
}
