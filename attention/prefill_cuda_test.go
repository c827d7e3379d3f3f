//go:build cuda

package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/gputest"
	"github.com/gollm/gollm/model/kernels"
)

// The prefill kernels live in the model's fat binary (see prefill_cuda.go); these tests load it.
var testPrefill struct {
	once sync.Once
	dev  *cuda.Device
	pre  *CUDAPrefill
	err  error
}

func gpuPrefill(t testing.TB) (*cuda.Device, *CUDAPrefill) {
	t.Helper()
	testPrefill.once.Do(func() {
		dev, err := cuda.Open(0)
		if err != nil {
			testPrefill.err = err
			return
		}
		mod, err := dev.LoadModule(kernels.Fatbin)
		if err != nil {
			testPrefill.err = err
			return
		}
		testPrefill.dev = dev
		info := dev.Info()
		if testPrefill.pre, testPrefill.err = LoadCUDAPrefill(mod, info.SharedPerBlockOptin); testPrefill.err != nil {
			return
		}
		if info.Major == 9 && info.Minor == 0 { // the Hopper kernels, as the model's backend loads them
			sm90, err := dev.LoadModule(kernels.PrefillSM90PTX)
			if err == nil {
				err = testPrefill.pre.LoadSM90(sm90, info.SharedPerBlockOptin)
			}
			testPrefill.err = err
		}
	})
	gputest.Require(t, testPrefill.err)
	if info := testPrefill.dev.Info(); info.Major == 9 && info.Minor == 0 {
		// Every Hopper kernel fits the block's shared memory there: one left out (loadPrefillFn skips
		// what does not fit) would drop its shapes to the mma.sync kernel without a test failing.
		for _, tn := range []string{"bf16", "f16"} {
			for _, kv := range []string{"", "_e4m3"} {
				for _, d := range prefillSM90HeadDims {
					if key := fmt.Sprintf("%s%s_d%d", tn, kv, d); testPrefill.pre.sm90[key].fn == nil {
						t.Fatalf("an sm_90 GPU without the Hopper prefill kernel %s", key)
					}
				}
			}
		}
	}
	return testPrefill.dev, testPrefill.pre
}

// densePrefillReference is causal attention in float64 over gathered rows, written independently of the
// kernels: row j of sequence s (qlen rows, context ctx) sits at position ctx-qlen+j and attends to keys
// [0, position], or with b.Window to its last Window of them.
func densePrefillReference(q []float32, c *Cache, numHeads int, scale float64, b *Batch) []float64 {
	d, group := c.HeadDim, numHeads/c.NumKVHeads
	out := make([]float64, len(q))
	for s := range b.ContextLens {
		qlen := int(b.QueryStart[s+1] - b.QueryStart[s])
		ctx := int(b.ContextLens[s])
		for j := range qlen {
			row := int(b.QueryStart[s]) + j
			pos := ctx - qlen + j
			first := 0
			if b.Window > 0 {
				first = max(0, pos-b.Window+1)
			}
			for h := range numHeads {
				kvh := h / group
				qv := q[(row*numHeads+h)*d:][:d]
				scores := make([]float64, pos+1)
				best := math.Inf(-1)
				for key := first; key <= pos; key++ {
					slot := int(Slot(b.BlockTables[s], c.BlockSize, key))
					kr := c.K[(slot*c.NumKVHeads+kvh)*d:][:d]
					var dot float64
					for i := range d {
						dot += float64(qv[i]) * float64(kr[i])
					}
					scores[key] = dot * scale
					best = max(best, scores[key])
				}
				var sum float64
				for key := first; key <= pos; key++ {
					scores[key] = math.Exp(scores[key] - best)
					sum += scores[key]
				}
				o := out[(row*numHeads+h)*d:][:d]
				for key := first; key <= pos; key++ {
					slot := int(Slot(b.BlockTables[s], c.BlockSize, key))
					vr := c.V[(slot*c.NumKVHeads+kvh)*d:][:d]
					for i := range d {
						o[i] += scores[key] / sum * float64(vr[i])
					}
				}
			}
		}
	}
	return out
}

// prefillCodec converts between float32 and a device dtype for the prefill tests.
type prefillCodec struct {
	name   string
	typ    cuda.DataType
	size   int
	encode func([]byte, []float32)
	decode func([]float32, []byte)
	tol    float64
}

var prefillCodecs = []prefillCodec{
	{"bf16", cuda.BFloat16, 2, dtype.EncodeBF16, dtype.DecodeBF16, 1e-2},
	{"fp16", cuda.Float16, 2, dtype.EncodeF16, dtype.DecodeF16, 1e-2},
	{"fp32", cuda.Float32, 4, dtype.EncodeF32, dtype.DecodeF32, 1e-5},
}

// prefillSeqs are a prefill test's sequences: (context after the step, rows of the step).
var prefillSeqs = [][2]int{{300, 45}, {77, 1}, {130, 130}, {64, 17}, {200, 64}}

// TestCUDAPrefill runs the prefill kernels (the tensor-core one and the FMA one) on a step of chunks with
// cached prefixes, a whole prompt and a single row, pages scattered by a random permutation, against a
// float64 dense reference, the output poisoned with NaN first, and the cache slots no row attends to
// (runPrefillCase): every 16-bit dtype × head size 64, 128 and 256 × page size 8, 12, 16, 32, 64 and 128
// (the Hopper kernel takes the powers of two to 64, Kernels leaves it out of the others) × group
// 1, 4 and 8, and float32 (FMA kernel only).
func TestCUDAPrefill(t *testing.T) {
	dev, pre := gpuPrefill(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, cd := range prefillCodecs {
		for _, headDim := range []int{64, 128, 256} {
			for _, blockSize := range []int{8, 12, 16, 32, 64, 128} {
				for _, group := range []int{1, 4, 8} {
					for _, kernel := range pre.Kernels(headDim, blockSize, cd.typ, false) {
						name := fmt.Sprintf("%s/d%d/page%d/group%d/%v", cd.name, headDim, blockSize, group, kernel)
						t.Run(name, func(t *testing.T) {
							runPrefillCase(t, dev, pre, rng, cd, prefillSeqs, headDim, blockSize, group, kernel, 0, nil)
						})
					}
				}
			}
		}
	}
}

// TestCUDAPrefillWindow runs the prefill kernels with sliding windows shorter than, equal to and longer
// than the sequences (1, 16, 21, 64, 130, 1000: windows that start inside pages and on their edges, tiles
// wholly before a window skipped), the block-table entries of the pages before every row's window −1 (a
// kernel that reads one faults), head sizes 64, 128 and 256, against the float64 reference.
func TestCUDAPrefillWindow(t *testing.T) {
	dev, pre := gpuPrefill(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, cd := range prefillCodecs {
		for _, headDim := range []int{64, 128, 256} {
			for _, window := range []int{1, 16, 21, 64, 130, 1000} {
				for _, kernel := range pre.Kernels(headDim, 16, cd.typ, false) {
					name := fmt.Sprintf("%s/d%d/w%d/%v", cd.name, headDim, window, kernel)
					t.Run(name, func(t *testing.T) {
						runPrefillCase(t, dev, pre, rng, cd, prefillSeqs, headDim, 16, 4, kernel, window, nil)
					})
				}
			}
		}
	}
}

// TestCUDAPrefillLongContext runs the tensor-core prefill kernels (the Hopper one where loaded) on the last rows of long prompts, Llama's
// heads at bf16 (head size 128, group 4): 16 rows at the end of a 131071-token context (a chunk attending to a
// cached prefix of 131055 tokens, over 8192 scattered pages), 40 rows at the end of 32768, and a single
// row at 8192, against the float64 reference: positions, block tables and the online softmax over
// thousands of tiles, where a long prompt's last chunk runs.
func TestCUDAPrefillLongContext(t *testing.T) {
	dev, pre := gpuPrefill(t)
	rng := rand.New(rand.NewPCG(7, 8))
	seqs := [][2]int{{131071, 16}, {32768, 40}, {8192, 1}}
	for _, kernel := range pre.Kernels(128, 16, cuda.BFloat16, false) {
		if kernel != PrefillFMA {
			t.Run(kernel.String(), func(t *testing.T) {
				runPrefillCase(t, dev, pre, rng, prefillCodecs[0], seqs, 128, 16, 4, kernel, 0, nil)
			})
		}
	}
}

// runPrefillCase builds seqs (as prefillSeqs) in a cache of random pages (2 KV heads of group query heads; with a
// window, the table entries of the pages before each sequence's first row's window −1), runs the prefill
// kernel (kernel; PrefillAuto: Kernel's choice) and checks it against densePrefillReference, as a whole and row by row.
// With fp8 (a K and a V scale) the pages are FP8 e4m3 codes of the random values (CUDAPrefillArgs.KVFP8),
// the reference is computed over what they read back (float32(code) · scale), and the output is also
// checked against the CPU twin's FP8 attention (Attend over an FP8 Cache with those scales).
func runPrefillCase(t *testing.T, dev *cuda.Device, pre *CUDAPrefill, rng *rand.Rand, cd prefillCodec, seqs [][2]int,
	headDim, blockSize, group int, kernel PrefillKernel, window int, fp8 []float32) {
	t.Helper()
	const kvHeads = 2
	numHeads := group * kvHeads
	b := &Batch{QueryStart: []int32{0}, Window: window}
	pages := 0
	for _, sq := range seqs {
		pages += ceilDiv(sq[0], blockSize)
	}
	numBlocks := pages + 3
	perm := rng.Perm(numBlocks)
	maxBlocks := 0
	var positions []int32
	for _, sq := range seqs {
		ctx, rows := sq[0], sq[1]
		table := make([]int32, ceilDiv(ctx, blockSize))
		first := 0 // the first key of the sequence's first row
		if window > 0 {
			first = max(0, ctx-rows-window+1)
		}
		for j := range table {
			table[j] = int32(perm[0])
			perm = perm[1:]
			if (j+1)*blockSize <= first {
				table[j] = -1 // no row of the step attends to it
			}
		}
		maxBlocks = max(maxBlocks, len(table))
		b.BlockTables = append(b.BlockTables, table)
		b.ContextLens = append(b.ContextLens, int32(ctx))
		b.QueryStart = append(b.QueryStart, b.QueryStart[len(b.QueryStart)-1]+int32(rows))
		for j := range rows {
			positions = append(positions, int32(ctx-rows+j))
		}
	}
	maxBlocks += 2 // padding columns, out of range
	c := NewCache(numBlocks, blockSize, kvHeads, headDim)
	for i := range c.K {
		c.K[i] = rng.Float32()*2 - 1
		c.V[i] = rng.Float32()*2 - 1
	}
	// The slots no row attends to hold NaN (a last page's slots past its sequence's end, the pages no
	// table holds), as a recycled or never-written page may: a kernel must neither sum them nor multiply
	// them by a zero weight (0 · NaN is NaN).
	poison := func(page, from int) {
		at := (page*blockSize + from) * kvHeads * headDim
		for i := at; i < (page+1)*blockSize*kvHeads*headDim; i++ {
			c.K[i], c.V[i] = float32(math.NaN()), float32(math.NaN())
		}
	}
	for s, table := range b.BlockTables {
		if r := int(b.ContextLens[s]) % blockSize; r != 0 {
			poison(int(table[len(table)-1]), r)
		}
	}
	for _, page := range perm {
		poison(page, 0)
	}
	round := func(x []float32) []byte {
		out := make([]byte, len(x)*cd.size)
		cd.encode(out, x)
		cd.decode(x, out)
		return out
	}
	var kBytes, vBytes []byte
	var c8 *Cache
	if fp8 != nil {
		c8 = NewFP8Cache(numBlocks, blockSize, kvHeads, headDim).WithScales(fp8[0], fp8[1])
		for i := range c.K {
			c8.K8[i] = dtype.F32ToE4M3Sat(c.K[i] / fp8[0])
			c8.V8[i] = dtype.F32ToE4M3Sat(c.V[i] / fp8[1])
			c.K[i] = dtype.E4M3ToF32(c8.K8[i]) * fp8[0]
			c.V[i] = dtype.E4M3ToF32(c8.V8[i]) * fp8[1]
		}
		kBytes, vBytes = c8.K8, c8.V8
	} else {
		kBytes, vBytes = round(c.K), round(c.V)
	}
	rows := int(b.QueryStart[len(b.QueryStart)-1])
	q := make([]float32, rows*numHeads*headDim)
	for i := range q {
		q[i] = (rng.Float32()*2 - 1) * 3
	}
	qBytes := round(q)
	scale := float32(1 / math.Sqrt(float64(headDim)))
	ref := densePrefillReference(q, c, numHeads, float64(scale), b)
	flat := make([]int32, len(seqs)*maxBlocks)
	for s, table := range b.BlockTables {
		row := flat[s*maxBlocks : (s+1)*maxBlocks]
		for j := range row {
			row[j] = math.MaxInt32 / 2
		}
		copy(row, table)
	}
	vectors := kernel.Vectors()
	if kernel == PrefillAuto {
		vectors = pre.Kernel(headDim, blockSize, cd.typ, fp8 != nil).Vectors()
	}
	items := PrefillItems(nil, b.QueryStart, group, vectors)

	upload := func(data []byte) cuda.DevicePtr {
		p, err := dev.Alloc(int64(max(4, len(data))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dev.Free(p) })
		if err := dev.CopyToDevice(p, data); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dOut := upload(make([]byte, len(qBytes)))
	if err := dev.Fill32(dOut, 0x7fc07fc0, int64(len(qBytes)/4), nil); err != nil {
		t.Fatal(err)
	}
	args := &CUDAPrefillArgs{
		Out: dOut, Q: upload(qBytes), KCache: upload(kBytes), VCache: upload(vBytes),
		BlockTables: upload(cuda.Bytes(flat)), Positions: upload(cuda.Bytes(positions)),
		Items: upload(cuda.Bytes(items)), NumItems: len(items) / 4, MaxBlocks: maxBlocks,
		NumHeads: numHeads, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize,
		DType: cd.typ, Scale: scale, Window: window, Kernel: kernel,
	}
	if fp8 != nil {
		args.KVFP8, args.KScale, args.VScale = true, fp8[0], fp8[1]
	}
	if err := pre.Attend(nil, args); err != nil {
		t.Fatal(err)
	}
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	gotBytes := make([]byte, len(qBytes))
	if err := dev.CopyFromDevice(gotBytes, dOut); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(q))
	cd.decode(got, gotBytes)
	var num, den float64
	for i := range ref {
		d := float64(got[i]) - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	if e := math.Sqrt(num / den); !(e < cd.tol) {
		t.Fatalf("relative error %.3g (tolerance %g)", e, cd.tol)
	}
	if c8 != nil {
		twin := make([]float32, len(q))
		Attend(twin, q, numHeads, scale, c8, b)
		twin64 := make([]float64, len(twin))
		for i, x := range twin {
			twin64[i] = float64(x)
		}
		if e := relErr(twin, ref); !(e < 1e-5) {
			t.Fatalf("CPU twin vs reference: %.3g", e) // the reference itself is in question
		}
		if e := relErr(got, twin64); !(e < cd.tol) {
			t.Fatalf("relative error vs the CPU twin's FP8 attention %.3g (tolerance %g)", e, cd.tol)
		}
	}
	// Row by row too: a wrong mask shows in a few rows only.
	for r := range rows {
		for h := range numHeads {
			var num, den float64
			for i := range headDim {
				at := (r*numHeads+h)*headDim + i
				d := float64(got[at]) - ref[at]
				num += d * d
				den += ref[at] * ref[at]
			}
			if e := math.Sqrt(num / den); !(e < 4*cd.tol) {
				t.Fatalf("row %d head %d: relative error %.3g", r, h, e)
			}
		}
	}
}

// BenchmarkCUDAPrefill times the prefill kernels on one prompt attending to itself from position 0
// (the shapes of Llama-3-8B, d128, and Llama-3.2-1B, d64: 32 query heads, 8 KV heads; 1024 and 4096
// tokens), bf16, page 16, pages scattered: the tensor-core kernel and the FMA kernel, median of 30 runs
// timed with events (cuda.Timer), and TFLOP/s of the causal work (4 · D · Hq · Σ (position + 1)). Its peer is
// scripts/bench/prefill_sdpa.py (scaled_dot_product_attention, causal, on a contiguous cache). The
// 16384-token prompts (the tensor-core kernel only) compare Mistral-7B-v0.1's window of 4096 with no
// window: the windowed kernel skips the tiles before each item's window, about 0.44 of the causal work
// (the TFLOP/s figure counts the whole causal work, so it rises by the share skipped); and Gemma 3's
// head_dim 256 (16 query heads, 8 KV heads). The 8192- and 32768-token prompts are Llama-3.1-8B's long
// prefill in one chunk (its share of the time to first token: scripts/bench/prefill_peer.py times
// SDPA on the same shapes), whose TFLOP/s set against the GPU's dense bf16 rate is the kernel's efficiency.
// The -fp8 shapes read FP8 e4m3 pages (scales 1) through every kernel loaded for them (tensor-core
// kernels only), against the same shapes over bf16 pages.
//
//	go test -tags cuda -run XXX -bench CUDAPrefill ./attention
func BenchmarkCUDAPrefill(b *testing.B) {
	dev, pre := gpuPrefill(b)
	timer, err := dev.NewTimer(30, 5, 50_000) // median of 30 runs after 5, a 50 µs spin before each
	if err != nil {
		b.Fatal(err)
	}
	defer timer.Close()
	for _, sh := range []struct {
		name                   string
		headDim, tokens        int
		numHeads, kvHeads, bsz int
		window                 int
		mmaOnly                bool
		fp8                    bool // FP8 pages (KScale and VScale 1)
	}{
		{"d128-hq32-hkv8-L1024", 128, 1024, 32, 8, 16, 0, false, false},
		{"d128-hq32-hkv8-L4096", 128, 4096, 32, 8, 16, 0, false, false},
		{"d64-hq32-hkv8-L1024", 64, 1024, 32, 8, 16, 0, false, false},
		{"d64-hq32-hkv8-L4096", 64, 4096, 32, 8, 16, 0, false, false},
		{"d128-hq32-hkv8-L8192", 128, 8192, 32, 8, 16, 0, true, false},
		{"d128-hq32-hkv8-L16384", 128, 16384, 32, 8, 16, 0, true, false},
		{"d128-hq32-hkv8-L32768", 128, 32768, 32, 8, 16, 0, true, false},
		{"d128-hq32-hkv8-L16384-W4096", 128, 16384, 32, 8, 16, 4096, true, false},
		{"d256-hq16-hkv8-L4096", 256, 4096, 16, 8, 16, 0, true, false},
		{"d128-hq32-hkv8-L1024-fp8", 128, 1024, 32, 8, 16, 0, true, true},
		{"d128-hq32-hkv8-L8192-fp8", 128, 8192, 32, 8, 16, 0, true, true},
		{"d128-hq32-hkv8-L32768-fp8", 128, 32768, 32, 8, 16, 0, true, true},
		{"d64-hq32-hkv8-L4096-fp8", 64, 4096, 32, 8, 16, 0, true, true},
		{"d256-hq16-hkv8-L4096-fp8", 256, 4096, 16, 8, 16, 0, true, true},
	} {
		b.Run(sh.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			blocks := ceilDiv(sh.tokens, sh.bsz)
			perm := rng.Perm(blocks + 8)
			table := make([]int32, blocks)
			for i := range table {
				table[i] = int32(perm[i])
			}
			kvElems := (blocks + 8) * sh.bsz * sh.kvHeads * sh.headDim
			qElems := sh.tokens * sh.numHeads * sh.headDim
			rnd := func(n int) []byte {
				x := make([]float32, n)
				for i := range x {
					x[i] = rng.Float32()*2 - 1
				}
				out := make([]byte, 2*n)
				dtype.EncodeBF16(out, x)
				return out
			}
			rndKV := rnd
			if sh.fp8 {
				rndKV = func(n int) []byte {
					out := make([]byte, n)
					for i := range out {
						out[i] = dtype.F32ToE4M3Sat(rng.Float32()*2 - 1)
					}
					return out
				}
			}
			positions := make([]int32, sh.tokens)
			for i := range positions {
				positions[i] = int32(i)
			}
			group := sh.numHeads / sh.kvHeads
			var ptrs []cuda.DevicePtr
			upload := func(data []byte) cuda.DevicePtr {
				p, err := dev.Alloc(int64(len(data)))
				if err != nil {
					b.Fatal(err)
				}
				ptrs = append(ptrs, p)
				if err := dev.CopyToDevice(p, data); err != nil {
					b.Fatal(err)
				}
				return p
			}
			defer func() {
				for _, p := range ptrs {
					_ = dev.Free(p)
				}
			}()
			args := &CUDAPrefillArgs{
				Out: upload(make([]byte, 2*qElems)), Q: upload(rnd(qElems)), KCache: upload(rndKV(kvElems)),
				VCache: upload(rndKV(kvElems)), BlockTables: upload(cuda.Bytes(table)), Positions: upload(cuda.Bytes(positions)),
				MaxBlocks: blocks, NumHeads: sh.numHeads,
				NumKVHeads: sh.kvHeads, HeadDim: sh.headDim, BlockSize: sh.bsz, DType: cuda.BFloat16,
				Scale: float32(1 / math.Sqrt(float64(sh.headDim))), Window: sh.window,
				KVFP8: sh.fp8, KScale: 1, VScale: 1,
			}
			flops := 4 * float64(sh.headDim) * float64(sh.numHeads) * float64(sh.tokens) * float64(sh.tokens+1) / 2
			for _, kernel := range pre.Kernels(sh.headDim, sh.bsz, cuda.BFloat16, sh.fp8) {
				if kernel == PrefillFMA && sh.mmaOnly {
					continue
				}
				items := PrefillItems(nil, []int32{0, int32(sh.tokens)}, group, kernel.Vectors())
				args.Kernel, args.Items, args.NumItems = kernel, upload(cuda.Bytes(items)), len(items)/4
				us, err := timer.Median(1, func(int) error { return pre.Attend(nil, args) })
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(us, kernel.String()+"-us")
				b.ReportMetric(flops/(us*1e-6)/1e12, kernel.String()+"-TFLOP/s")
			}
		})
	}
}
