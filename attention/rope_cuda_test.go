//go:build cuda

package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
)

// ropeCase is a decode batch whose newest K/V rows are not in the cache yet: they and the unrotated
// queries sit in a float Q/K/V buffer, as the Q/K/V product leaves them, for a call with CUDADecodeArgs.RoPE.
type ropeCase struct {
	*gpuDecodeCase
	rope      CUDARoPE
	slots     []int32
	padding   int       // the sequence whose slot is −1 (a graph's padding row): nothing may be stored
	wantK     [][]byte  // per sequence: its newest K row of every KV head, in the dtype ([kvHeads][D])
	wantV     [][]byte  // the same for V
	paddingKV [2][]byte // the padding sequence's K and V rows as uploaded (they must stay)
}

// ropeRotate is HF LLaMA's rotate-half of one head by position pos, with the kernels' arithmetic: the
// angle inv_freq[i]·pos in float32, its cos and sin evaluated in double, rounded to float32, times scaling.
func ropeRotate(x []float32, invFreq []float32, pos int32, scaling float32) []float32 {
	half := len(x) / 2
	out := make([]float32, len(x))
	for i := range half {
		angle := invFreq[i] * float32(pos)
		s, c := math.Sincos(float64(angle))
		cf, sf := float32(c)*scaling, float32(s)*scaling
		a, b := x[i], x[i+half]
		out[i] = a*cf - b*sf
		out[i+half] = b*cf + a*sf
	}
	return out
}

// newRoPECase builds the batch: random cache and Q/K/V rows; the host copy of the cache gets each
// sequence's rotated newest key and its value (the padding sequence's too: the kernels attend to the new
// row whether or not they store it; on the device its uploaded row must stay), the host queries are the
// rotated ones rounded to the dtype, and the float64 reference is computed from them. With bias, the
// Q/K/V rows come without a random bias (CUDARoPE.Bias) that the kernels must add before rotating.
func newRoPECase(t *testing.T, k *CUDAKernels, rng *rand.Rand, codec elemCodec, group, kvHeads, headDim, window int, scaling float32, bias bool) *ropeCase {
	t.Helper()
	const blockSize = 16
	lens := raggedLens(rng, blockSize)
	c := &ropeCase{gpuDecodeCase: newGPUWindowCase(t, k, rng, codec, group, kvHeads, headDim, blockSize, window, lens), padding: 2}
	d, hq := headDim, c.numHeads
	cols := (hq + 2*kvHeads) * d
	qkv := make([]float32, len(lens)*cols)
	for i := range qkv {
		qkv[i] = (rng.Float32()*2 - 1) * 3
	}
	var b []float32
	if bias {
		b = make([]float32, cols)
		for i := range b {
			b[i] = rng.Float32()*4 - 2
		}
	}
	invFreq := make([]float32, d/2)
	for i := range invFreq {
		invFreq[i] = float32(1 / math.Pow(10000, float64(2*i)/float64(d)))
	}
	positions := make([]int32, len(lens))
	c.slots = make([]int32, len(lens))
	kv := c.cache
	for s, n := range lens {
		pos := n - 1
		positions[s] = pos
		slot := c.tables[s][int(pos)/blockSize]*blockSize + pos%blockSize
		c.slots[s] = slot
		row := slices.Clone(qkv[s*cols:][:cols])
		for i := range b {
			row[i] += b[i]
		}
		for h := range hq {
			copy(c.q[(s*hq+h)*d:][:d], ropeRotate(row[h*d:][:d], invFreq, pos, scaling))
		}
		kRow := make([]float32, kvHeads*d)
		vRow := make([]float32, kvHeads*d)
		for h := range kvHeads {
			copy(kRow[h*d:], ropeRotate(row[(hq+h)*d:][:d], invFreq, pos, scaling))
			copy(vRow[h*d:], row[(hq+kvHeads+h)*d:][:d])
		}
		at := int(slot) * kvHeads * d
		if s == c.padding { // attended to like the others' (the kernels patch it in), but not stored
			c.slots[s] = -1
			c.paddingKV[0] = codec.round(append([]float32(nil), kv.K[at:at+kvHeads*d]...))
			c.paddingKV[1] = codec.round(append([]float32(nil), kv.V[at:at+kvHeads*d]...))
		}
		c.wantK = append(c.wantK, codec.round(kRow))
		c.wantV = append(c.wantV, codec.round(vRow))
		copy(kv.K[at:], kRow)
		copy(kv.V[at:], vRow)
	}
	codec.round(c.q)
	c.ref = denseDecodeReference(c.q, kv, c.numHeads, float64(c.scale), c.tables, lens, c.window)
	c.rope = CUDARoPE{
		QKV: c.upload(t, cuda.Bytes(qkv)), QKVCols: cols,
		Positions: c.upload(t, cuda.Bytes(positions)), Slots: c.upload(t, cuda.Bytes(c.slots)),
		InvFreq: c.upload(t, cuda.Bytes(invFreq)), AttentionScaling: scaling,
	}
	if bias {
		c.rope.Bias = c.upload(t, cuda.Bytes(b))
	}
	return c
}

// rowOffset is the byte offset of sequence s's newest K/V row (all KV heads) in the caches.
func (c *ropeCase) rowOffset(s int) int64 {
	pos := int(c.lens[s] - 1)
	slot := int(c.tables[s][pos/c.blockSize])*c.blockSize + pos%c.blockSize
	return int64(slot * c.kvHeads * c.headDim * c.codec.size)
}

// poisonNewest writes NaN over every real sequence's newest K/V row on the device, so that a kernel that
// reads them before writing them, or does not write them, fails.
func (c *ropeCase) poisonNewest(t *testing.T) {
	t.Helper()
	nan := make([]byte, c.kvHeads*c.headDim*c.codec.size)
	for i := 0; i < len(nan); i += 4 {
		nan[i], nan[i+1], nan[i+2], nan[i+3] = 0xc0, 0x7f, 0xc0, 0x7f
	}
	for s := range c.lens {
		if s == c.padding {
			continue
		}
		for _, p := range []cuda.DevicePtr{c.dK, c.dV} {
			if err := c.dev.CopyToDevice(p.Add(c.rowOffset(s)), nan); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkRows compares the newest K/V rows on the device with the expected ones, and the padding
// sequence's rows with what was uploaded (bit for bit). The bound is a unit in the last place of the
// dtype at the inputs' scale (about 1), not at the result's: the device may fuse a·cos − b·sin into one
// multiply-add where the host rounds twice, which a cancelling result shows in its own last places; a
// wrong angle, sign or pairing is off by the inputs' scale.
func (c *ropeCase) checkRows(t *testing.T, what string) {
	t.Helper()
	tol := map[int]float64{2: 1.0 / 128, 4: 1e-6}[c.codec.size]
	if c.codec.typ == cuda.Float16 {
		tol = 1.0 / 1024
	}
	n := c.kvHeads * c.headDim
	got := make([]byte, n*c.codec.size)
	gotF, wantF := make([]float32, n), make([]float32, n)
	for s := range c.lens {
		for i, p := range []cuda.DevicePtr{c.dK, c.dV} {
			if err := c.dev.CopyFromDevice(got, p.Add(c.rowOffset(s))); err != nil {
				t.Fatal(err)
			}
			name := [2]string{"K", "V"}[i]
			if s == c.padding {
				if string(got) != string(c.paddingKV[i]) {
					t.Errorf("%s: the padding row's %s (slot −1) was overwritten", what, name)
				}
				continue
			}
			c.codec.decode(gotF, got)
			c.codec.decode(wantF, [2][][]byte{c.wantK, c.wantV}[i][s])
			for j := range gotF {
				if e := math.Abs(float64(gotF[j] - wantF[j])); !(e <= tol*(math.Abs(float64(wantF[j]))+1)) {
					t.Errorf("%s: sequence %d newest %s[%d] = %g, want %g", what, s, name, j, gotF[j], wantF[j])
					return
				}
			}
		}
	}
}

// TestCUDADecodeRoPE runs every kernel with CUDADecodeArgs.RoPE: the queries come unrotated from a float
// Q/K/V buffer and every sequence's newest K/V row is NaN in the cache, so the kernels must rotate the
// queries, rotate the newest key, attend to it and the value without reading them from the cache (a read
// would bring the NaN in), and store both — grouped (classic; the persistent kernel must give way),
// split-k in one and two merge levels and with the reduce kernel, with and without programmatic dependent
// launch (the early prologue). Checked against the float64 reference on the host-rotated data and the CPU
// twin, the stored rows, and a padding row (slot −1) whose cache row must stay untouched.
func TestCUDADecodeRoPE(t *testing.T) {
	k := gpuKernels(t)
	for _, codec := range codecs {
		for _, headDim := range []int{64, 128} {
			for _, group := range []int{1, 4, 6, 8, 32} {
				// A sliding window of 21 (Mistral's layers fold the rotation too): the pages before each
				// window are −1 in the tables, the newest row still patched in.
				for _, window := range []int{0, 21} {
					// The Q/K/V product's bias (Qwen2's) added by the kernels on every other case.
					bias := (group+window)%2 == 0
					t.Run(fmt.Sprintf("%s/d%d/g%d/w%d/bias=%v", codec.name, headDim, group, window, bias), func(t *testing.T) {
						t.Parallel()
						rng := rand.New(rand.NewPCG(uint64(headDim*100+group), uint64(codec.typ)+7))
						scaling := float32(1)
						if group%2 == 0 {
							scaling = 1.125 // an attention_scaling other than one (YaRN-style), exactly representable
						}
						c := newRoPECase(t, k, rng, codec, group, 2, headDim, window, scaling, bias)
						runRoPEVariants(t, k, c)
					})
				}
			}
		}
	}
}

func runRoPEVariants(t *testing.T, k *CUDAKernels, c *ropeCase) {
	t.Helper()
	twin := toFloat64(c.cpuTwin(c.cache))
	ws, wsBytes := c.splitWorkspace(t)
	paths := []CUDAPath{PathMMA, PathFMA}
	if c.codec.typ == cuda.Float32 {
		paths = []CUDAPath{PathFMA}
	}
	defer checkCountersZero(t, k)
	run := func(what string, call func(a *CUDADecodeArgs) error, dependent bool) {
		t.Helper()
		c.poisonOut(t)
		c.poisonNewest(t)
		poison(t, c.dev, ws, wsBytes)
		a := c.args()
		a.Q = 0 // must not be read
		a.RoPE = &c.rope
		a.Dependent = dependent
		if err := call(a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		c.checkOutput(t, what, twin, "CPU twin")
		c.checkRows(t, what)
	}
	info := k.dev.Info()
	pdl := []bool{false}
	if info.Major == 9 && info.Minor == 0 {
		pdl = append(pdl, true)
	}
	for _, path := range paths {
		for _, dep := range pdl {
			suffix := fmt.Sprintf("%s/dependent=%v", path, dep)
			run("grouped/"+suffix, func(a *CUDADecodeArgs) error { return k.DecodeGrouped(nil, a, path) }, dep)
			run("grouped-persistent-asked/"+suffix, func(a *CUDADecodeArgs) error {
				return k.decodeGrouped(nil, a, path, CUDATuning{persistPrograms: 3})
			}, dep)
			for _, part := range []int{2 * c.blockSize, 256} {
				for _, m := range []struct {
					name string
					t    CUDATuning
				}{{"fused", CUDATuning{}}, {"fused-chunk2", CUDATuning{MergeChunk: 2}}, {"reduce-kernel", CUDATuning{SplitKReduceKernel: true}}} {
					run(fmt.Sprintf("split-k/partition%d/%s/%s", part, m.name, suffix), func(a *CUDADecodeArgs) error {
						return k.decodeSplitK(nil, a, part, ws, wsBytes, path, m.t)
					}, dep)
				}
			}
		}
	}
}

// TestCUDAFoldsRoPE checks which calls take the rotation: not those that may run the persistent grouped
// kernel (short contexts, more items than program slots), which has no RoPE path; all others. Describe
// names the persistent kernel for exactly the calls that may run it.
func TestCUDAFoldsRoPE(t *testing.T) {
	k := gpuKernels(t)
	many := 4 * k.numSMs // sequences: with 2 KV heads, more items than any occupancy gives slots
	for _, tc := range []struct {
		name       string
		batch, ctx int
		want       bool
	}{
		{"many-short", many, 256, false},
		{"many-long", many, 1024, true},
		{"few-short", 4, 256, true},
	} {
		lens := make([]int32, tc.batch)
		for i := range lens {
			lens[i] = int32(tc.ctx)
		}
		a := &CUDADecodeArgs{HostContextLens: lens, MaxBlocks: tc.ctx / 16, NumHeads: 8, NumKVHeads: 2, HeadDim: 128,
			BlockSize: 16, DType: cuda.BFloat16}
		if got := k.FoldsRoPE(a); got != tc.want {
			t.Errorf("%s: FoldsRoPE = %v, want %v", tc.name, got, tc.want)
		}
		info, err := k.Describe("DecodeGrouped", a, PathAuto)
		if err != nil {
			t.Fatal(err)
		}
		if persistent := strings.Contains(info.Name, "Persistent"); persistent == tc.want {
			t.Errorf("%s: Describe names %s", tc.name, info.Name)
		}
	}
}
