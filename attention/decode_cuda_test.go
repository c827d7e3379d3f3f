//go:build cuda

package attention

import (
	"errors"
	"fmt"
	"github.com/gollm/gollm/model/kernels"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/gputest"
)

// These tests run the CUDA kernels on the device (go test -tags cuda ./attention/ on a machine with a
// GPU); without one they skip, unless GOLLM_REQUIRE_GPU=1.

var testGPU struct {
	once sync.Once
	k    *CUDAKernels
	err  error
}

func gpuKernels(t testing.TB) *CUDAKernels {
	t.Helper()
	testGPU.once.Do(func() {
		dev, err := cuda.Open(0)
		if err != nil {
			testGPU.err = err
			return
		}
		if testGPU.k, testGPU.err = LoadCUDAKernels(dev); testGPU.err != nil {
			return
		}
		if info := dev.Info(); info.Major == 9 && info.Minor == 0 { // the Hopper prefix kernels, as the model's backend loads them
			sm90, err := dev.LoadModule(kernels.PrefillSM90PTX)
			if err == nil {
				err = testGPU.k.LoadSM90(sm90)
			}
			testGPU.err = err
		}
	})
	gputest.Require(t, testGPU.err)
	return testGPU.k
}

// elemCodec converts between float32 and a device dtype.
type elemCodec struct {
	name   string
	typ    cuda.DataType
	size   int
	encode func([]byte, []float32)
	decode func([]float32, []byte)
	tol    float64 // relative error bound against the float64 reference
}

var codecs = []elemCodec{
	{"bf16", cuda.BFloat16, 2, dtype.EncodeBF16, dtype.DecodeBF16, 1e-2},
	{"fp16", cuda.Float16, 2, dtype.EncodeF16, dtype.DecodeF16, 1e-2},
	{"fp32", cuda.Float32, 4, dtype.EncodeF32, dtype.DecodeF32, 1e-5},
}

// round makes x exactly representable in the codec's dtype (the reference then sees the GPU's inputs).
func (c elemCodec) round(x []float32) []byte {
	b := make([]byte, len(x)*c.size)
	c.encode(b, x)
	c.decode(x, b)
	return b
}

// gpuDecodeCase is one decode batch in a paged cache, on the host and on the device.
type gpuDecodeCase struct {
	codec                      elemCodec
	numHeads, kvHeads, headDim int
	blockSize, maxBlocks       int
	scale                      float32
	window                     int // 0, or a sliding window (CUDADecodeArgs.Window)
	lens                       []int32
	tables                     [][]int32
	cache                      *Cache    // float32 copy of the device cache (values rounded to the dtype)
	q                          []float32 // [batch][numHeads][headDim], rounded
	ref                        []float64 // dense float64 attention
	// fp8: the device pages hold e4m3 codes of scales kScale and vScale (toFP8); args says so.
	fp8            bool
	kScale, vScale float32

	dev                         *cuda.Device
	dK, dV, dQ, dOut, dTab, dLn cuda.DevicePtr
}

// newGPUDecodeCase builds fresh random data: K/V pages scattered by a random permutation over a pool
// with spare pages, block-table padding set to an id far out of range (a kernel that reads past a
// sequence's last page faults), and uploads it.
func newGPUDecodeCase(t *testing.T, k *CUDAKernels, rng *rand.Rand, codec elemCodec, group, kvHeads, headDim, blockSize int, lens []int32) *gpuDecodeCase {
	t.Helper()
	return newGPUWindowCase(t, k, rng, codec, group, kvHeads, headDim, blockSize, 0, lens)
}

// newGPUWindowCase is newGPUDecodeCase with a sliding window: each sequence's block-table entries of the
// pages before its newest query's first key are −1, as a KV pool that gave them back leaves them (a
// kernel that reads one faults).
func newGPUWindowCase(t *testing.T, k *CUDAKernels, rng *rand.Rand, codec elemCodec, group, kvHeads, headDim, blockSize, window int, lens []int32) *gpuDecodeCase {
	t.Helper()
	c := &gpuDecodeCase{codec: codec, numHeads: group * kvHeads, kvHeads: kvHeads, headDim: headDim,
		blockSize: blockSize, scale: float32(1 / math.Sqrt(float64(headDim))), window: window, lens: lens, dev: k.Device()}
	pages := 0
	for _, n := range lens {
		c.maxBlocks = max(c.maxBlocks, ceilDiv(int(n), blockSize))
		pages += ceilDiv(int(n), blockSize)
	}
	c.maxBlocks += 3 // padding columns
	numBlocks := pages + 5
	c.cache = NewCache(numBlocks, blockSize, kvHeads, headDim)
	for i := range c.cache.K {
		c.cache.K[i] = rng.Float32()*2 - 1
		c.cache.V[i] = rng.Float32()*2 - 1
	}
	kBytes, vBytes := codec.round(c.cache.K), codec.round(c.cache.V)
	c.q = make([]float32, len(lens)*c.numHeads*headDim)
	for i := range c.q {
		c.q[i] = (rng.Float32()*2 - 1) * 3 // scores of a few units: a peaked, not flat, softmax
	}
	qBytes := codec.round(c.q)
	perm := rng.Perm(numBlocks)
	flat := make([]int32, len(lens)*c.maxBlocks)
	next := 0
	for s, n := range lens {
		table := make([]int32, ceilDiv(int(n), blockSize))
		for j := range table {
			table[j] = int32(perm[next])
			next++
			if window > 0 && (j+1)*blockSize <= int(n)-window {
				table[j] = -1 // wholly before the window
			}
		}
		c.tables = append(c.tables, table)
		row := flat[s*c.maxBlocks : (s+1)*c.maxBlocks]
		for j := range row {
			row[j] = math.MaxInt32 / 2
		}
		copy(row, table)
	}
	c.ref = denseDecodeReference(c.q, c.cache, c.numHeads, float64(c.scale), c.tables, lens, window)

	c.dK = c.upload(t, kBytes)
	c.dV = c.upload(t, vBytes)
	c.dQ = c.upload(t, qBytes)
	c.dTab = c.upload(t, cuda.Bytes(flat))
	c.dLn = c.upload(t, cuda.Bytes(lens))
	c.dOut = c.alloc(t, int64(len(qBytes)))
	return c
}

func (c *gpuDecodeCase) alloc(t *testing.T, n int64) cuda.DevicePtr {
	t.Helper()
	p, err := c.dev.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.dev.Free(p) })
	return p
}

func (c *gpuDecodeCase) upload(t *testing.T, b []byte) cuda.DevicePtr {
	t.Helper()
	p := c.alloc(t, int64(len(b)))
	if err := c.dev.CopyToDevice(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *gpuDecodeCase) args() *CUDADecodeArgs {
	return &CUDADecodeArgs{
		Out: c.dOut, Q: c.dQ, KCache: c.dK, VCache: c.dV, BlockTables: c.dTab, ContextLens: c.dLn,
		HostContextLens: c.lens, MaxBlocks: c.maxBlocks, NumHeads: c.numHeads, NumKVHeads: c.kvHeads,
		HeadDim: c.headDim, BlockSize: c.blockSize, DType: c.codec.typ, Scale: c.scale, Window: c.window,
		KVFP8: c.fp8, KScale: c.kScale, VScale: c.vScale,
	}
}

// nanPattern is a NaN in fp32 and two NaNs in bf16 or fp16.
const nanPattern = 0x7fc07fc0

func poison(t *testing.T, d *cuda.Device, p cuda.DevicePtr, bytes int64) {
	t.Helper()
	if err := d.Fill32(p, nanPattern, bytes/4, nil); err != nil {
		t.Fatal(err)
	}
}

// checkCountersZero fails unless the fused split-k merge's counters are all zero, as every split-k call
// must leave them.
func checkCountersZero(t *testing.T, k *CUDAKernels) {
	t.Helper()
	if err := k.dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	counters := make([]uint32, splitKCounterBytes/4)
	if err := k.dev.CopyFromDevice(cuda.Bytes(counters), k.counters); err != nil {
		t.Fatal(err)
	}
	for i, n := range counters {
		if n != 0 {
			t.Fatalf("split-k counter %d is %d after the calls, want 0", i, n)
		}
	}
}

func (c *gpuDecodeCase) poisonOut(t *testing.T) {
	poison(t, c.dev, c.dOut, int64(len(c.q)*c.codec.size))
}

// output downloads Out as float32.
func (c *gpuDecodeCase) output(t *testing.T) []float32 {
	t.Helper()
	return c.download(t, c.dOut)
}

// download waits for the device and reads an output of the case's shape at out as float32.
func (c *gpuDecodeCase) download(t *testing.T, ptr cuda.DevicePtr) []float32 {
	t.Helper()
	if err := c.dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(c.q)*c.codec.size)
	if err := c.dev.CopyFromDevice(b, ptr); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(c.q))
	c.codec.decode(out, b)
	return out
}

// denseDecodeReference is decode attention in float64 over gathered rows, written independently of the
// kernels: scores, max-subtracted softmax, weighted sum; with a window (> 0) over the last window
// positions of each context only.
func denseDecodeReference(q []float32, c *Cache, numHeads int, scale float64, tables [][]int32, lens []int32, window int) []float64 {
	d, group := c.HeadDim, numHeads/c.NumKVHeads
	out := make([]float64, len(q))
	for s, n := range lens {
		first := 0
		if window > 0 {
			first = max(0, int(n)-window)
		}
		for h := range numHeads {
			kvh := h / group
			qr := q[(s*numHeads+h)*d:][:d]
			scores := make([]float64, n)
			mx := math.Inf(-1)
			for pos := first; pos < int(n); pos++ {
				slot := int(tables[s][pos/c.BlockSize])*c.BlockSize + pos%c.BlockSize
				kr := c.K[(slot*c.NumKVHeads+kvh)*d:][:d]
				var dot float64
				for i := range d {
					dot += float64(qr[i]) * float64(kr[i])
				}
				scores[pos] = dot * scale
				mx = max(mx, scores[pos])
			}
			var sum float64
			o := out[(s*numHeads+h)*d:][:d]
			for pos := first; pos < int(n); pos++ {
				w := math.Exp(scores[pos] - mx)
				sum += w
				slot := int(tables[s][pos/c.BlockSize])*c.BlockSize + pos%c.BlockSize
				vr := c.V[(slot*c.NumKVHeads+kvh)*d:][:d]
				for i := range d {
					o[i] += w * float64(vr[i])
				}
			}
			for i := range o {
				o[i] /= sum
			}
		}
	}
	return out
}

// relErr is ‖got − ref‖ / ‖ref‖, +Inf when got holds a NaN or an infinity.
func relErr(got []float32, ref []float64) float64 {
	var num, den float64
	for i, r := range ref {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return math.Inf(1)
		}
		num += (g - r) * (g - r)
		den += r * r
	}
	return math.Sqrt(num / den)
}

func raggedLens(rng *rand.Rand, blockSize int) []int32 {
	return []int32{
		1, int32(blockSize - 1), int32(blockSize), int32(blockSize + 1), 64, 65,
		int32(200 + rng.IntN(400)), int32(1200 + rng.IntN(900)),
	}
}

// TestCUDADecodeKernels runs both kernels (and, for bf16/fp16, both arithmetic paths) at every shape of
// kernels.md: dtypes bf16/fp16/fp32, head_dim 64/128 (and 256 in 16 bits, page 16, groups 1, 2, 8, 16),
// pages 8/16/32, groups 1, 2, 4, 6, 8, 16, 32, a
// ragged batch with context 1, page−1, page, page+1, a tile, a tile+1 and two long contexts, against a
// float64 dense reference and the CPU twin, on fresh random data, output poisoned with NaN.
func TestCUDADecodeKernels(t *testing.T) {
	k := gpuKernels(t)
	for _, codec := range codecs {
		for _, headDim := range []int{64, 128, 256} {
			blockSizes, groups := []int{8, 16, 32}, []int{1, 2, 4, 6, 8, 16, 32}
			if headDim == wideHeadDim { // 16-bit dtypes; fewer shapes, the same code as 64 and 128
				if codec.typ == cuda.Float32 {
					continue
				}
				blockSizes, groups = []int{16}, []int{1, 2, 8, 16}
			}
			for _, blockSize := range blockSizes {
				for _, group := range groups {
					name := fmt.Sprintf("%s/d%d/page%d/g%d", codec.name, headDim, blockSize, group)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						seed := uint64(headDim*1000 + blockSize*100 + group)
						rng := rand.New(rand.NewPCG(seed, uint64(codec.typ)))
						lens := raggedLens(rng, blockSize)
						c := newGPUDecodeCase(t, k, rng, codec, group, 2, headDim, blockSize, lens)
						runKernelVariants(t, k, c)
					})
				}
			}
		}
	}
}

// TestCUDADecodeWindow runs every kernel and path with sliding windows shorter than, equal to and longer
// than the contexts (1, a page, a page and a bit, a tile plus one, 300, 4096) over a ragged batch whose
// windows start inside pages and on their edges, the block-table entries of the pages wholly before each
// window −1 (a kernel that reads one faults), head_dim 64, 128 and 256, against the float64 reference
// and the CPU twin (Attend with Batch.Window).
func TestCUDADecodeWindow(t *testing.T) {
	k := gpuKernels(t)
	for _, codec := range codecs {
		for _, headDim := range []int{64, 128, 256} {
			if headDim == wideHeadDim && codec.typ == cuda.Float32 {
				continue
			}
			for _, window := range []int{1, 16, 21, 65, 300, 4096} {
				for _, group := range []int{2, 8} {
					name := fmt.Sprintf("%s/d%d/w%d/g%d", codec.name, headDim, window, group)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						rng := rand.New(rand.NewPCG(uint64(headDim*10000+window), uint64(group)))
						lens := []int32{1, 15, 16, 17, 21, 64, 65, 300, 301, int32(1200 + rng.IntN(900))}
						c := newGPUWindowCase(t, k, rng, codec, group, 2, headDim, 16, window, lens)
						runKernelVariants(t, k, c)
					})
				}
			}
		}
	}
}

// TestCUDADecodeOddRows runs every kernel and path where batch × query heads × partitions is odd (3 KV
// heads of 3 query heads, SmolLM2-135M's shape; 21 and 3 partitions), so that nothing after the split-k
// workspace's first array relies on an even row count for its alignment (the acc array's 16-byte pieces
// once started 8 bytes off there: a misaligned-address fault).
func TestCUDADecodeOddRows(t *testing.T) {
	k := gpuKernels(t)
	for _, codec := range codecs {
		for _, headDim := range []int{64, 128} {
			for _, lens := range [][]int32{{650}, {650, 17, 301}} {
				t.Run(fmt.Sprintf("%s/d%d/b%d", codec.name, headDim, len(lens)), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(headDim), uint64(len(lens))))
					c := newGPUDecodeCase(t, k, rng, codec, 3, 3, headDim, 16, lens)
					runKernelVariants(t, k, c)
				})
			}
		}
	}
}

// cpuTwin returns the CPU twin's attention (Attend) of case c over cache: one query row a sequence.
func (c *gpuDecodeCase) cpuTwin(cache *Cache) []float32 {
	twin := make([]float32, len(c.q))
	starts := make([]int32, len(c.lens)+1)
	for s := range c.lens {
		starts[s+1] = int32(s + 1)
	}
	Attend(twin, c.q, c.numHeads, c.scale, cache, &Batch{QueryStart: starts, ContextLens: c.lens, BlockTables: c.tables, Window: c.window})
	return twin
}

// checkedTwin is cpuTwin, checked against the float64 reference first (a twin that misses it puts the
// reference itself in question).
func (c *gpuDecodeCase) checkedTwin(t *testing.T, cache *Cache) []float32 {
	t.Helper()
	twin := c.cpuTwin(cache)
	if e := relErr(twin, c.ref); e > 1e-5 {
		t.Fatalf("CPU twin vs reference: %.3g", e)
	}
	return twin
}

// splitWorkspace allocates a split-k workspace for case c at partitions of two pages or more.
func (c *gpuDecodeCase) splitWorkspace(t *testing.T) (cuda.DevicePtr, int64) {
	t.Helper()
	bytes := SplitKWorkspaceBytes(len(c.lens), c.numHeads, c.headDim, ceilDiv(longestContext(c.lens), 2*c.blockSize))
	return c.alloc(t, bytes), bytes
}

// checkOutput checks the device output of case c against the float64 reference and against twin (what
// names the call, twinName the twin) within the dtype's tolerance; a miss is an error, not fatal.
func (c *gpuDecodeCase) checkOutput(t *testing.T, what string, twin []float64, twinName string) {
	t.Helper()
	out := c.output(t)
	if e := relErr(out, c.ref); !(e < c.codec.tol) {
		t.Errorf("%s: relative error vs float64 reference %.3g (limit %g)", what, e, c.codec.tol)
	}
	if e := relErr(out, twin); !(e < c.codec.tol) {
		t.Errorf("%s: relative error vs %s %.3g (limit %g)", what, twinName, e, c.codec.tol)
	}
}

// runKernelVariants checks every kernel and path on case c against the reference and the CPU twin.
func runKernelVariants(t *testing.T, k *CUDAKernels, c *gpuDecodeCase) {
	t.Helper()
	twin := toFloat64(c.checkedTwin(t, c.cache))
	// Groups that take the narrow kernels (narrowTile) run the mma path twice: on them (the default) and
	// on the 16-row head tile (CUDATuning.NoNarrow, passed with every call: k is shared by parallel
	// subtests, so its Tuning is never changed here).
	type pathCase struct {
		path     CUDAPath
		noNarrow bool
	}
	paths := []pathCase{{PathMMA, false}, {PathFMA, false}}
	if narrowTile(c.numHeads / c.kvHeads) {
		paths = append(paths, pathCase{PathMMA, true})
	}
	if c.headDim == wideHeadDim { // the mma path on the narrow tile only
		paths = []pathCase{{PathFMA, false}}
		if narrowTile(c.numHeads / c.kvHeads) {
			paths = append(paths, pathCase{PathMMA, false})
		}
	}
	if c.codec.typ == cuda.Float32 {
		paths = []pathCase{{PathFMA, false}}
	}
	partitions := []int{2 * c.blockSize, 256}
	ws, wsBytes := c.splitWorkspace(t)
	check := func(what string) {
		t.Helper()
		c.checkOutput(t, what, twin, "CPU twin")
	}
	defer checkCountersZero(t, k)
	for _, pc := range paths {
		path := pc.path
		// tune is the path case's tuning with the switches of one variant.
		tune := func(t CUDATuning) CUDATuning {
			t.NoNarrow = pc.noNarrow
			return t
		}
		check := func(what string) {
			t.Helper()
			if pc.noNarrow {
				what += "/no-narrow"
			}
			check(what)
		}
		c.poisonOut(t)
		if err := k.decodeGrouped(nil, c.args(), path, tune(CUDATuning{})); err != nil {
			t.Fatal(err)
		}
		check("grouped/" + path.String())
		for _, tn := range []struct {
			name string
			t    CUDATuning
		}{{"no-evict-first", CUDATuning{NoEvictFirst: true}}, {"evict-first-large", CUDATuning{EvictFirstLarge: true}}} {
			c.poisonOut(t)
			if err := k.decodeGrouped(nil, c.args(), path, tune(tn.t)); err != nil {
				t.Fatal(err)
			}
			check("grouped/" + path.String() + "/" + tn.name)
		}
		if path == PathMMA && c.numHeads/c.kvHeads <= 16 && c.headDim != wideHeadDim {
			// The persistent kernel with 1, 3 and 7 programs: each walks several items of the ragged
			// batch (contexts of 1 token to a few thousand) through one pipeline.
			for _, programs := range []int{1, 3, 7} {
				c.poisonOut(t)
				if err := k.decodeGrouped(nil, c.args(), path, tune(CUDATuning{persistPrograms: programs})); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("grouped/persistent/%d-programs", programs))
			}
		}
		for _, part := range partitions {
			// The fused merge in one level (default at these partition counts) and in two levels with
			// chunks of 2 and 3 partitions (ragged last chunks), and the reduce kernel.
			for _, m := range []struct {
				name string
				t    CUDATuning
			}{
				{"fused", CUDATuning{}},
				{"fused-chunk2", CUDATuning{MergeChunk: 2}},
				{"fused-chunk3", CUDATuning{MergeChunk: 3}},
				{"reduce-kernel", CUDATuning{SplitKReduceKernel: true}},
			} {
				c.poisonOut(t)
				poison(t, c.dev, ws, wsBytes)
				if err := k.decodeSplitK(nil, c.args(), part, ws, wsBytes, path, tune(m.t)); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("split-k/%s/partition%d/%s", path, part, m.name))
			}
		}
		if info := k.dev.Info(); info.Major == 9 && info.Minor == 0 {
			// Programmatic dependent launch: the mma programs queue their first tiles older than each
			// sequence's newest position before the PDL wait, the others after it.
			a := c.args()
			a.Dependent = true
			c.poisonOut(t)
			if err := k.decodeGrouped(nil, a, path, tune(CUDATuning{})); err != nil {
				t.Fatal(err)
			}
			check("grouped/" + path.String() + "/dependent")
			for _, part := range partitions {
				c.poisonOut(t)
				poison(t, c.dev, ws, wsBytes)
				if err := k.decodeSplitK(nil, a, part, ws, wsBytes, path, tune(CUDATuning{})); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("split-k/%s/partition%d/dependent", path, part))
			}
		}
	}
}

// TestCUDADecodeDispatch runs Decode, which follows Plan with this device's SM count, on a batch that must
// split (one long sequence, one KV head) and one that must not (many sequences × KV heads), and checks
// the outputs; then replays the split call from a captured CUDA graph.
func TestCUDADecodeDispatch(t *testing.T) {
	k := gpuKernels(t)
	for _, tc := range []struct {
		name                       string
		batch, ctx, group, kvHeads int
		want                       Kernel
	}{
		{"batch1-long-mqa", 1, 20000, 8, 1, SplitK},
		// 16 partitions of one tile (the bound's floor where longer ones leave SMs idle): a workspace
		// sized for 256-token partitions was too small (found in review).
		{"batch1-ctx1000", 1, 1000, 8, 1, SplitK},
		{"batch64-gqa", 64, 700, 4, 8, Grouped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.batch), uint64(tc.ctx)))
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx - rng.IntN(16))
			}
			c := newGPUDecodeCase(t, k, rng, codecs[0], tc.group, tc.kvHeads, 128, 16, lens)
			wsBytes := SplitKWorkspaceBound(tc.batch, c.numHeads, c.headDim, tc.ctx)
			ws := c.alloc(t, wsBytes)
			c.poisonOut(t)
			plan, err := k.Decode(nil, c.args(), ws, wsBytes)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("plan %+v", plan)
			if plan.Kernel != tc.want {
				t.Errorf("Plan chose %v, want %v", plan.Kernel, tc.want)
			}
			if e := relErr(c.output(t), c.ref); !(e < c.codec.tol) {
				t.Fatalf("relative error %.3g", e)
			}

			// The same call captured into a graph and replayed twice.
			s, err := c.dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			if err := s.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			if _, err := k.Decode(s, c.args(), ws, wsBytes); err != nil {
				t.Fatal(err)
			}
			g, err := s.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			defer g.Destroy()
			exec, err := g.Instantiate()
			if err != nil {
				t.Fatal(err)
			}
			defer exec.Destroy()
			c.poisonOut(t)
			if err := c.dev.Synchronize(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := exec.Launch(s); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if e := relErr(c.output(t), c.ref); !(e < c.codec.tol) {
				t.Fatalf("graph replay: relative error %.3g", e)
			}
			checkCountersZero(t, k)
		})
	}
}

// TestCUDAKernelsClose loads and closes the decode kernels five times on the test's device: each Close
// returns the module's and the counters' memory (the model's backend closes them with itself; before,
// every load leaked them until the context went), and a closed CUDAKernels refuses calls.
func TestCUDAKernelsClose(t *testing.T) {
	dev := gpuKernels(t).Device()
	before, _, err := dev.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	var k *CUDAKernels
	for range 5 {
		if k, err = LoadCUDAKernels(dev); err != nil {
			t.Fatal(err)
		}
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after, _, err := dev.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	// The driver hands memory out in 2 MiB pages; five leaked loads would hold at least 5 × 64 KiB of
	// counters and the module's code, far beyond one page of slack.
	if before-after > 2<<20 {
		t.Errorf("free device memory %d before five loads and closes, %d after", before, after)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	c := newGPUDecodeCase(t, gpuKernels(t), rng, codecs[0], 4, 2, 64, 16, []int32{100})
	if err := k.DecodeGrouped(nil, c.args(), PathAuto); err == nil {
		t.Errorf("a closed CUDAKernels ran a decode")
	}
}

func TestCUDADecodeErrors(t *testing.T) {
	k := gpuKernels(t)
	rng := rand.New(rand.NewPCG(9, 9))
	c := newGPUDecodeCase(t, k, rng, codecs[0], 4, 2, 64, 16, []int32{100, 3000})
	a := c.args()
	a.HeadDim = 96
	if err := k.DecodeGrouped(nil, a, PathAuto); !errors.Is(err, ErrUnsupported) {
		t.Errorf("head_dim 96: %v, want ErrUnsupported", err)
	}
	a = c.args()
	a.DType = cuda.Float32
	if err := k.DecodeGrouped(nil, a, PathMMA); !errors.Is(err, ErrUnsupported) {
		t.Errorf("fp32 on the mma path: %v, want ErrUnsupported", err)
	}
	ws := c.alloc(t, 1024)
	if err := k.DecodeSplitK(nil, c.args(), 256, ws, 1024, PathAuto); !errors.Is(err, ErrWorkspaceTooSmall) {
		t.Errorf("small workspace: %v, want ErrWorkspaceTooSmall", err)
	}
	if err := k.DecodeSplitK(nil, c.args(), 100, ws, 1024, PathAuto); err == nil {
		t.Errorf("partition of 100 tokens with pages of 16: no error")
	}
	// A partition past the block table's tokens: near 2³¹ the kernels' ctx + partition − 1 wrapped, no
	// program came last, and the merge counters stayed non-zero for every later call (found in review).
	big := SplitKWorkspaceBytes(2, c.numHeads, c.headDim, 1)
	wsBig := c.alloc(t, big)
	for _, pt := range []int{c.args().MaxBlocks*16 + 16, 1<<31 - 64} {
		if err := k.DecodeSplitK(nil, c.args(), pt, wsBig, big, PathAuto); err == nil {
			t.Errorf("partition of %d tokens with a table of %d: no error", pt, c.args().MaxBlocks*16)
		}
	}
	checkCountersZero(t, k)
	a = c.args()
	a.MaxBlocks = 1 << 27 // 2³¹ tokens of 16
	if err := k.DecodeGrouped(nil, a, PathAuto); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a table of 2³¹ tokens: %v, want ErrUnsupported", err)
	}
	a = c.args()
	a.HostContextLens = make([]int32, maxGridYZ+1)
	for i := range a.HostContextLens {
		a.HostContextLens[i] = 1
	}
	if err := k.DecodeGrouped(nil, a, PathAuto); !errors.Is(err, ErrUnsupported) {
		t.Errorf("%d sequences: %v, want ErrUnsupported", len(a.HostContextLens), err)
	}
}
