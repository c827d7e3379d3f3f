//go:build cuda

package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/weightstest"
	"github.com/x448/float16"
)

// TestCUDAFP8Refused checks what the CUDA backend refuses without a device: FP8 weights on a GPU older
// than compute capability 8.9 (naming the GPU). An FP8 KV cache: TestCUDAFP8KVRefusedBelow89.
func TestCUDAFP8Refused(t *testing.T) {
	b := &cudaBackend{}
	if err := b.checkFP8(false, Shape{}); err != nil {
		t.Fatalf("no FP8: %v", err)
	}
	checkFP8Gate(t, fp8WeightsMissing, "fp8 weights")
}

// checkFP8Gate checks an FP8 gate (fp8WeightsMissing, fp8KVMissing) on GPUs on either side of compute
// capability 8.9, the first with the e4m3 conversions in hardware: it passes those at 8.9 or newer
// ("") and refuses the others with a message that names what (the refused feature), the need, the GPU
// and the CPU's flag.
func checkFP8Gate(t *testing.T, missing func(cuda.Info) string, what string) {
	t.Helper()
	for _, tc := range []struct {
		info cuda.Info
		ok   bool
	}{
		{cuda.Info{Name: "NVIDIA A100", Major: 8, Minor: 0}, false},
		{cuda.Info{Name: "NVIDIA A10", Major: 8, Minor: 6}, false},
		{cuda.Info{Name: "NVIDIA L4", Major: 8, Minor: 9}, true},
		{cuda.Info{Name: "NVIDIA H200", Major: 9, Minor: 0}, true},
		{cuda.Info{Name: "NVIDIA B200", Major: 10, Minor: 0}, true},
	} {
		m := missing(tc.info)
		if tc.ok != (m == "") {
			t.Errorf("%s (%d.%d): %q", tc.info.Name, tc.info.Major, tc.info.Minor, m)
		}
		if !tc.ok && (!strings.Contains(m, "compute capability 8.9") || !strings.Contains(m, tc.info.Name) ||
			!strings.Contains(m, "--device cpu") || !strings.Contains(m, what)) {
			t.Errorf("%s: %q does not name %s, the need, the GPU and the CPU's flag", tc.info.Name, m, what)
		}
	}
}

// TestCUDAFP8KVLoad loads a float checkpoint with an FP8 KV cache on the GPU: on compute capability 8.9
// or newer it loads with one-byte pages; below, Load refuses it before any weight is uploaded, naming
// what is missing.
func TestCUDAFP8KVLoad(t *testing.T) {
	dev := gpuDevice(t)
	dir := t.TempDir()
	weightstest.WriteLlamaBF16(t, dir, fp8TestConfig, 1)
	opts := Options{KVCacheDType: KVCacheFP8, Device: DeviceCUDA, NumBlocks: 16, BlockSize: 16}
	m, err := Load(openFolder(t, dir), opts)
	if missing := fp8KVMissing(dev.Info()); missing == "" {
		if err != nil {
			t.Fatal(err)
		}
		if m.Shape().KVCacheDType != KVCacheFP8 {
			t.Errorf("KV cache dtype %q", m.Shape().KVCacheDType)
		}
		m.Close()
		return
	}
	if err == nil {
		m.Close()
		t.Fatal("loaded")
	}
	if want := "fp8 KV cache: needs compute capability 8.9"; !errors.Is(err, weights.ErrUnsupported) ||
		!strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want one saying %q", err, want)
	}
}

// fp8TestInput draws rows × k activations: rows of different magnitudes (saturating a static scale of
// 0.01 at the largest), a row of zeros (the dynamic scale's floor) and, with nanRow ≥ 0, a NaN in that row.
func fp8TestInput(rng *rand.Rand, rows, k, nanRow int) []float32 {
	x := make([]float32, rows*k)
	for r := range rows {
		scale := []float64{1, 30, 0.01, 0}[r%4]
		for i := range k {
			x[r*k+i] = float32(rng.NormFloat64() * scale)
		}
	}
	if nanRow >= 0 {
		x[nanRow*k+k/2] = float32(math.NaN())
	}
	return x
}

// checkCodePadding fails t where one of rows rows of codes (kp a row) holds a code other than zero in
// its padding columns, cols to kp.
func checkCodePadding(t *testing.T, codes []byte, rows, cols, kp int) {
	t.Helper()
	for r := range rows {
		for i := cols; i < kp; i++ {
			if c := codes[r*kp+i]; c != 0 {
				t.Fatalf("row %d: padding column %d holds code %#x", r, i, c)
			}
		}
	}
}

// sameFloat reports whether a and b are the same float32 or both NaN.
func sameFloat(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// TestCUDAFP8MatMul checks the FP8 product (kernels/fp8.cu) against FP8Weight's definition computed in
// float64 from the codes (fp8Product), for 1-64 rows (every token-tile kernel, and k split between
// warps) and a prefill size, ragged and aligned k and n (the padded layout), per-channel and
// per-tensor weight scales, dynamic and static input scales (static ones saturating), with and without
// a bias, a row of zeros and a row holding a NaN (its outputs NaN, the other rows untouched), in the
// compute dtypes bfloat16 and float32 (the input's dtype), on the FP8 kernel and, past
// fp8KernelMaxRows rows (where the plan sends them), on cuBLASLt with ScaleE4M3. The quantized input rows must equal the CPU backend's (quantizeRows) code
// for code and scale for scale; the products may differ from the float64 sum by float32 rounding of a
// sum of k terms (2^-14 of Σ|terms|) on the FP8 kernel, and on cuBLASLt and Hopper's e4m3 mma kernel (up
// to 8 rows, kernels/fp8_sm90.cu) by cuda.LtE4M3Tolerance (2^-8 of Σ|terms|: the tensor cores keep about
// 13 bits of a partial sum). Either still fails on a wrong
// scale or operand: an output of random-sign terms is about Σ|terms|/√k (1/40 of it at k = 1000, six
// times 2^-8), and the test's rows' scales differ by factors of 30 to 3000, so a scale missing, taken
// from another row or applied twice moves an output by a multiple of itself.
func TestCUDAFP8MatMul(t *testing.T) {
	dev := gpuDevice(t)
	rng := rand.New(rand.NewPCG(43, 8))
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF32} {
		b, err := newCUDABackend(gemvShapeForTest(), cudaConfig{dtype: dt, dev: dev})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if b.fp8.lt == nil {
			if err := b.loadFP8(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%v: cuBLASLt loaded %v, its outer-vector scales used %v, e4m3 mma kernel %v, e4m3 GEMM %v", dt,
			b.fp8.lt != nil, b.fp8.ltScaled, b.fp8.mma[0] != nil, b.fp8.gemm[0] != nil)
		if info := dev.Info(); info.Major == 9 && info.Minor == 0 && (b.fp8.mma[0] == nil || b.fp8.gemm[0] == nil) {
			t.Fatalf("compute capability 9.0 without the e4m3 mma kernel (%v) or the e4m3 GEMM (%v)",
				b.fp8.mma[0] != nil, b.fp8.gemm[0] != nil)
		}
		mma := b.fp8.mma
		for _, sh := range []struct{ n, k int }{{256, 512}, {100, 200}, {48, 64}, {24, 1000}, {16, 2048}, {16, 4096}, {16, 8192}, {16, 14336}, {40, 17002}} {
			for _, rows := range []int{1, 2, 5, 8, 9, 16, 17, 32, 33, 64, 200} {
				if rows == 200 && sh.n != 100 {
					continue
				}
				for _, tc := range []struct {
					perTensor bool
					static    float32
					bias      bool
				}{{false, 0, false}, {true, 0, true}, {false, 0.01, true}, {true, 0.01, false}} {
					for _, path := range []matmulPath{pathFP8, pathFP8Lt, pathFP8Gemm} {
						if path == pathFP8Lt && (rows <= fp8KernelMaxRows || b.fp8.lt == nil) ||
							path == pathFP8Gemm && (rows > gemvMaxTokens || b.fp8.gemm[0] == nil) {
							continue
						}
						// On Hopper: the e4m3 mma kernel, then the f16 one the other GPUs run.
						kernels := [][4]*cuda.Function{mma}
						if mma[0] != nil && path == pathFP8 {
							kernels = append(kernels, [4]*cuda.Function{})
						}
						for _, kernel := range kernels {
							b.fp8.mma = kernel
							name := fmt.Sprintf("%v/n%d_k%d/rows%d/tensor=%v_static=%v_bias=%v/%v", dt, sh.n, sh.k, rows, tc.perTensor,
								tc.static, tc.bias, path)
							if kernel[0] != nil && path == pathFP8 {
								name += "/mma"
							}
							t.Run(name, func(t *testing.T) {
								checkFP8Product(t, b, dt, rng, rows, sh.n, sh.k, tc.perTensor, tc.static, tc.bias, path)
							})
						}
						b.fp8.mma = mma
					}
				}
			}
		}
	}
}

// TestCUDAFP8GemmShapes runs the skinny GEMM's e4m3 kernel (pathFP8Gemm) at launch shapes the small
// products of TestCUDAFP8MatMul never plan: blocks of 1, 2 and 4 warpgroups, k split over clusters of up
// to 8 blocks (the partial tiles summed through distributed shared memory), ragged rows and columns,
// against the float64 reference as there.
func TestCUDAFP8GemmShapes(t *testing.T) {
	dev := gpuDevice(t)
	b, err := newCUDABackend(gemvShapeForTest(), cudaConfig{dtype: weights.DTypeBF16, dev: dev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.loadFP8(); err != nil {
		t.Fatal(err)
	}
	if b.fp8.gemm[0] == nil {
		if info := dev.Info(); info.Major == 9 && info.Minor == 0 {
			t.Fatal("compute capability 9.0 without the e4m3 GEMM")
		}
		t.Skipf("no e4m3 GEMM on %s (Hopper only)", dev.Info().Name)
	}
	rng := rand.New(rand.NewPCG(44, 9))
	for _, sh := range []struct{ n, k int }{{500, 2048}, {1024, 960}} {
		for _, launch := range []gemmShape{{1, 1}, {2, 2}, {4, 8}, {1, 8}, {3, 3}} {
			for _, rows := range []int{9, 33, 64} {
				t.Run(fmt.Sprintf("n%d_k%d/wg%d_ks%d/rows%d", sh.n, sh.k, launch.wg, launch.ks, rows), func(t *testing.T) {
					b.tune.GemmWarps, b.tune.GemmKS = launch.wg, launch.ks
					defer func() { b.tune.GemmWarps, b.tune.GemmKS = 0, 0 }()
					checkFP8Product(t, b, weights.DTypeBF16, rng, rows, sh.n, sh.k, false, 0, true, pathFP8Gemm)
				})
			}
		}
	}
}

func checkFP8Product(t *testing.T, b *cudaBackend, dt weights.DType, rng *rand.Rand, rows, n, k int, perTensor bool,
	static float32, withBias bool, path matmulPath) {
	w := randomFP8(rng, n, k, static)
	if perTensor {
		for i := range w.Scales {
			w.Scales[i] = w.Scales[0]
		}
	}
	cw, bias, bw, x, xt := fp8Operands(t, b, dt, rng, w, rows, k, withBias)
	y := newDeviceTensor(t, b, rows, n)
	poison(t, b, y.ptr, rows*n)
	if err := b.runFP8(&stepOp{kind: opMatMul, out: n, in: k, fp8: true}, &opArgs{d: y, x: xt, w: cw, bias: bw},
		&opPlan{rows: rows, mm: matmulPlan{path: path}}); err != nil {
		t.Fatal(err)
	}
	got := syncAndRead(t, b, y.ptr, rows*n)

	// The quantized rows, code for code, against the CPU backend's.
	kp := cw.fp8.colsPad
	codes := make([]byte, rows*kp)
	scales := make([]float32, rows)
	if err := errors.Join(b.dev.CopyFromDevice(codes, b.fp8.codes), b.dev.CopyFromDevice(cuda.Bytes(scales), b.fp8.scales)); err != nil {
		t.Fatal(err)
	}
	xq, sx := make([]float32, rows*k), make([]float32, rows)
	quantizeRows(xq, sx, x, rows, k, static)
	checkCodePadding(t, codes, rows, k, kp)
	for r := range rows {
		if !sameFloat(scales[r], sx[r]) {
			t.Fatalf("row %d: scale %v, the CPU's %v", r, scales[r], sx[r])
		}
		for i := range k {
			c := codes[r*kp+i]
			if v := dtype.E4M3ToF32(c); !sameFloat(v, xq[r*k+i]) {
				t.Fatalf("row %d column %d: x %v quantized to %v (code %#x), the CPU's %v", r, i, x[r*k+i], v, c, xq[r*k+i])
			}
		}
	}

	if f := b.facts(); f.fp8ReadsX16(path, rows) {
		checkX16(t, b, codes, rows, kp)
	}

	ref, bound := fp8Product(x, rows, k, w)
	for r := range rows {
		for o := range n {
			g, want := float64(got[r*n+o]), ref[r][o]
			if math.IsNaN(want) {
				if !math.IsNaN(g) {
					t.Fatalf("row %d output %d: %v, want NaN (a NaN in the row)", r, o, g)
				}
				continue
			}
			tol := bound[r][o] * 0x1p-14
			if path == pathFP8Lt || path == pathFP8Gemm || b.fp8.mma[0] != nil { // e4m3 tensor-core partial sums
				tol = bound[r][o] * cuda.LtE4M3Tolerance
			}
			if bias != nil {
				want += float64(bias[o])
				tol += math.Abs(float64(bias[o])) * 0x1p-23
			}
			if !(math.Abs(g-want) <= tol) {
				t.Fatalf("row %d output %d: %v, want %v (tolerance %.3g)", r, o, g, want, tol)
			}
		}
	}
}

// checkX16 checks the f16 values the quantizing kernel wrote beside the codes of rows rows of kp (the FP8
// kernel's input at up to 8 rows, fp8ReadsX16): each the value of its code, exactly (NaN for NaN).
func checkX16(t *testing.T, b *cudaBackend, codes []byte, rows, kp int) {
	t.Helper()
	raw := make([]byte, 2*rows*kp)
	if err := b.dev.CopyFromDevice(raw, b.fp8.x16); err != nil {
		t.Fatal(err)
	}
	for i, c := range codes[:rows*kp] {
		h := float16.Frombits(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8).Float32()
		if !sameFloat(h, dtype.E4M3ToF32(c)) {
			t.Fatalf("row %d column %d: f16 value %v, code %#x is %v", i/kp, i%kp, h, c, dtype.E4M3ToF32(c))
		}
	}
}

// fp8TestConfig is a small LLaMA the CUDA backend runs (heads of 64) whose Linear layers have ragged
// sizes for the FP8 product's padded layout (k = 160 and 208, n = 208 and 416).
var fp8TestConfig = map[string]any{
	"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama",
	"vocab_size": 300, "hidden_size": 160, "intermediate_size": 208, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 4096,
	"rms_norm_eps": 1e-5, "rope_theta": 10000.0,
}

// TestCUDAFP8MatchesCPU loads FP8 models on the CPU backend (the reference arithmetic) and on the GPU:
// a bfloat16 checkpoint with Options.Quantization fp8, and compressed-tensors checkpoints (per channel
// with per-token activations; per tensor with static input scales), in the compute dtypes float32 and
// bfloat16, with the input quantization fused into the norms and SwiGLU and as kernels of their own
// (FP8NoFuse), and runs the same steps on both (fp8MatchCPU): logits within 1e-1 relative (the L2 norm of
// the difference over the CPU's). The two runs may not quantize every activation alike, in either dtype:
// in bfloat16 the GPU rounds the attention's output (and, unfused, every product's input) to bfloat16
// first, which moves about one element in 30 to the neighbouring e4m3 code; in float32 a sum in another
// order (the norm's, attention's, cuBLASLt's partial sums in prefill) lands an element on the other side of
// an e4m3 midpoint now and then. One moved code changes the products it feeds by about 2^-4/√k of their
// size, far more than float32 rounding, and that moves a few codes in a hundred of the next quantization:
// from the first moved code on, the float32 runs differ as the bfloat16 ones do, and no tolerance between
// float32 rounding and theirs holds. A real fault is far larger: a scale missing or misapplied, or an
// operand transposed, changes the logits by about their own size (relative error near 1 or above).
func TestCUDAFP8MatchesCPU(t *testing.T) {
	dev := gpuDevice(t)
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string)
		opts  Options
	}{
		{"quantization fp8", func(t *testing.T, dir string) { weightstest.WriteLlamaBF16(t, dir, fp8TestConfig, 17) },
			Options{Quantization: QuantizationFP8}},
		{"compressed-tensors dynamic", func(t *testing.T, dir string) {
			weightstest.WriteFP8(t, dir, fp8TestConfig, 18, weightstest.FP8Dynamic, weightstest.FP8Scales{})
		}, Options{}},
		{"compressed-tensors static", func(t *testing.T, dir string) {
			weightstest.WriteFP8(t, dir, fp8TestConfig, 19, weightstest.FP8Static, weightstest.FP8Scales{Input: 0.012, K: 1, V: 1})
		}, Options{}},
	} {
		dir := t.TempDir()
		tc.write(t, dir)
		for _, dt := range []struct {
			dtype  weights.DType
			noFuse bool
		}{{weights.DTypeF32, false}, {weights.DTypeF32, true}, {weights.DTypeBF16, false}, {weights.DTypeBF16, true}} {
			t.Run(fmt.Sprintf("%s/%v/nofuse=%v", tc.name, dt.dtype, dt.noFuse), func(t *testing.T) {
				f := openFolder(t, dir)
				opts := tc.opts
				opts.NumBlocks, opts.BlockSize = 256, 16
				cpu, err := LoadOn(f, opts, NewCPUBackend)
				if err != nil {
					t.Fatal(err)
				}
				defer cpu.Close()
				var backend *cudaBackend
				gpu, err := LoadOn(f, opts, func(s Shape) (Backend, error) {
					b, err := newCUDABackend(s, cudaConfig{dtype: dt.dtype, dev: dev})
					backend = b
					return b, err
				})
				if err != nil {
					t.Fatal(err)
				}
				defer gpu.Close()
				backend.tune.FP8NoFuse = dt.noFuse
				fp8MatchCPU(t, cpu, gpu, f.Config.VocabSize, fp8Tol)
				st := backend.Stats()
				t.Logf("steps eager %d, captured %d, replayed %d", st.Eager, st.Captured, st.Replayed)
				if st.CaptureFailed != nil || st.Captured < 3 || st.Replayed == 0 {
					t.Errorf("captured %d graphs (want 3 buckets), replayed %d, capture error %v", st.Captured, st.Replayed, st.CaptureFailed)
				}
			})
		}
	}
}

// TestCUDAFP8ScaleFoldIdentical: a prefill step's logits, every row of two prompts, are the same to the
// bit whether the FP8 products on cuBLASLt leave their scaling to the ops after them (the RoPE kernel,
// the quantizing norms and SwiGLU: opPlan.fp8Unscaled) or run the scaling pass (FP8NoScaleFold): the
// ops apply the scales exactly as the pass does.
func TestCUDAFP8ScaleFoldIdentical(t *testing.T) {
	dev := gpuDevice(t)
	dir := t.TempDir()
	weightstest.WriteLlamaBF16(t, dir, fp8TestConfig, 17)
	for _, dt := range []weights.DType{weights.DTypeF32, weights.DTypeBF16} {
		t.Run(dt.String(), func(t *testing.T) {
			f := openFolder(t, dir)
			gpu, backend := loadFP8Unscaled(t, dev, dir, dt)
			rng := newRand(8)
			a, b := randomTokens(rng, 300, f.Config.VocabSize), randomTokens(rng, 40, f.Config.VocabSize)
			run := func(noFold bool) [][]float32 {
				// The pass scales float32 sums: gate/up's stay float32 with the fold too (FP8NoOut16).
				backend.tune.FP8NoScaleFold, backend.tune.FP8NoOut16 = noFold, true
				return prefillLogits(t, gpu, a, b)
			}
			before := backend.Stats().UnscaledFP8
			folded := run(false)
			// Every layer's Q/K/V, O and gate/up, and every down product but the last.
			if got, want := backend.Stats().UnscaledFP8-before, 4*f.Config.NumHiddenLayers-1; got != want {
				t.Fatalf("%d products left their scales to the op after them, want %d", got, want)
			}
			passed := run(true)
			for r := range folded {
				for i := range folded[r] {
					if math.Float32bits(folded[r][i]) != math.Float32bits(passed[r][i]) {
						t.Fatalf("row %d logit %d: %v with the scales folded, %v with the pass", r, i, folded[r][i], passed[r][i])
					}
				}
			}
		})
	}
}

// loadFP8Unscaled loads the checkpoint in dir with --quantization fp8 on the GPU in compute dtype dt,
// its cuBLASLt products left unscaled for the ops after them: a cuBLASLt that scales by outer vectors
// itself leaves nothing to fold, so the backend asks for its unscaled sums, the path of the libraries
// that refuse them. The model is closed when the test ends.
func loadFP8Unscaled(t *testing.T, dev *cuda.Device, dir string, dt weights.DType) (*Model, *cudaBackend) {
	t.Helper()
	var backend *cudaBackend
	gpu, err := LoadOn(openFolder(t, dir), Options{Quantization: QuantizationFP8, NumBlocks: 256, BlockSize: 16}, func(s Shape) (Backend, error) {
		b, err := newCUDABackend(s, cudaConfig{dtype: dt, dev: dev})
		backend = b
		return b, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpu.Close() })
	if backend.fp8.lt == nil {
		t.Fatal("no cuBLASLt: no unscaled product")
	}
	backend.fp8.ltScaled = false
	return gpu, backend
}

// prefillLogits runs one step of m that prefills a (sequence 0) and b (sequence 1) on fresh pages and
// returns every row's logits.
func prefillLogits(t *testing.T, m *Model, a, b []int32) [][]float32 {
	t.Helper()
	s := newModelPager(m, newRand(3)).step(chunk{0, a}, chunk{1, b})
	s.LogitRows = s.LogitRows[:0]
	for row := range len(s.Tokens) {
		s.LogitRows = append(s.LogitRows, int32(row))
	}
	logits, err := m.Forward(s)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// TestCUDAFP8Out16: with bfloat16 compute every layer's gate/up product on cuBLASLt writes its unscaled
// sums in bfloat16 for the quantizing SwiGLU (opPlan.fp8Out16; none in float32 compute), and a prefill's
// logits stay within fp8Tol of the same steps with float32 sums (FP8NoOut16) and of the CPU's: the
// rounding of each sum to bfloat16 moves some SwiGLU codes one e4m3 step, as 16-bit compute does.
func TestCUDAFP8Out16(t *testing.T) {
	dev := gpuDevice(t)
	dir := t.TempDir()
	weightstest.WriteLlamaBF16(t, dir, fp8TestConfig, 17)
	cpu, err := LoadOn(openFolder(t, dir), Options{Quantization: QuantizationFP8, NumBlocks: 256, BlockSize: 16}, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	cfg := cpu.Config()
	rng := newRand(8)
	a, b := randomTokens(rng, 300, cfg.VocabSize), randomTokens(rng, 40, cfg.VocabSize)
	want := prefillLogits(t, cpu, a, b)
	for _, dt := range []weights.DType{weights.DTypeF32, weights.DTypeBF16} {
		t.Run(dt.String(), func(t *testing.T) {
			gpu, backend := loadFP8Unscaled(t, dev, dir, dt)
			before := backend.Stats().Out16FP8
			out16 := prefillLogits(t, gpu, a, b)
			n := backend.Stats().Out16FP8 - before
			if wantN := map[bool]int{true: cfg.NumHiddenLayers}[dt == weights.DTypeBF16]; n != wantN {
				t.Fatalf("%d products wrote bfloat16 sums, want %d", n, wantN)
			}
			backend.tune.FP8NoOut16 = true
			out32 := prefillLogits(t, gpu, a, b)
			for r := range want {
				if e := relErr(out16[r], out32[r]); !(e <= fp8Tol) {
					t.Errorf("row %d: bfloat16 sums against float32 ones: relative error %.3g > %g", r, e, fp8Tol)
				}
				if e := relErr(out16[r], want[r]); !(e <= fp8Tol) {
					t.Errorf("row %d: against the CPU: relative error %.3g > %g", r, e, fp8Tol)
				}
			}
		})
	}
}

// fp8Tol bounds the relative error of an FP8 model's logits on the GPU against the CPU's: moved codes
// cascade (docs/fp8.md).
const fp8Tol = 1e-1

// fp8MatchCPU runs the same steps on cpu and gpu and compares every logits row (relative error at most
// tol): prefill chunks of 1-300 tokens beside decode tokens, then decode steps at batches 1, 3 (bucket 4)
// and 12 (bucket 16), each several times (graphs captured, then replayed).
func fp8MatchCPU(t *testing.T, cpu, gpu *Model, vocab int, tol float64) {
	t.Helper()
	gpu.backend.(*cudaBackend).tune.MixedDecodeMin = 1 // the mixed steps below have twelve decodes
	rng := newRand(21)
	pc, pg := newModelPager(cpu, newRand(3)), newModelPager(gpu, newRand(3))
	plan := [][]chunk{
		{{0, randomTokens(rng, 37, vocab)}, {1, randomTokens(rng, 1, vocab)}},
		{{2, randomTokens(rng, 300, vocab)}, {0, nil}, {1, nil}},
	}
	for range 4 {
		plan = append(plan, []chunk{{2, nil}})
	}
	for range 4 {
		plan = append(plan, []chunk{{0, nil}, {2, nil}, {1, nil}})
	}
	var more, all []chunk
	for seq := 3; seq < 12; seq++ {
		more = append(more, chunk{seq, randomTokens(rng, 2+seq, vocab)})
	}
	for seq := range 12 {
		all = append(all, chunk{seq, nil})
	}
	plan = append(plan, more)
	for range 3 {
		plan = append(plan, append([]chunk(nil), all...))
	}
	// Mixed steps, decodes first (on the decode kernels where the backend has them), beside a new
	// prompt's two chunks.
	prompt := randomTokens(rng, 90, vocab)
	plan = append(plan, append(append([]chunk(nil), all...), chunk{12, prompt[:50]}),
		append(append([]chunk(nil), all...), chunk{12, prompt[50:]}))
	matchSteps(t, cpu, gpu, pc, pg, plan, rng, vocab, tol)
}

// BenchmarkCUDAFP8MatMul times Llama-3-8B's FP8 products: at 1-64 rows the weight-streaming kernel alone
// (matmul-us, and GB/s of weight bytes with its share of the device-to-device copy bandwidth, measured at
// the start as gollm bench measures it: %copy-bw) and with the input's quantization (step-us: the two
// launches the step runs), beside the bfloat16 product of the same shape as the step plans it (bf16-us:
// the skinny kernel at 1-8 rows, cuBLAS above); where the e4m3 mma kernel runs (Hopper), the f16 kernel
// the other GPUs run (f16kernel-step-us); from 9 rows cuBLASLt's path (lt-step-us: quantization, GEMM,
// scaling pass); at one row the kernel on the same weights every time (l2hot-step-us: from L2, where
// they fit, which bounds what reading them sooner could gain); at 1024 rows (prefill) cuBLASLt's path
// (lt-us, TFLOP/s) and its parts (ltgemm-us, scale-us), the FP8 kernel, and bf16 cuBLAS, with bf16/fp8
// the speed-up. Weights rotate among copies of at least 256 MB (L2 is 50 MB).
//
//	go test -tags cuda -run XXX -bench CUDAFP8MatMul -benchtime 1x ./model
func BenchmarkCUDAFP8MatMul(bb *testing.B) {
	b := newGemvBackend(bb, weights.DTypeBF16)
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(5, 7))
	const prefill = 1024
	for _, sh := range gemvBenchShapes {
		if !strings.HasPrefix(sh.name, "8b-") || sh.name == "8b-lmhead" {
			continue
		}
		bytes := int64(sh.n) * int64(sh.k)
		fw := &FP8Weight{Name: sh.name, Rows: sh.n, Cols: sh.k, Codes: make([]byte, bytes), Scales: make([]float32, sh.n)}
		for i := range fw.Codes {
			fw.Codes[i] = byte(rng.IntN(256)) & 0xbf // finite, moderate
		}
		for i := range fw.Scales {
			fw.Scales[i] = 0.01
		}
		ws := make([]*cudaWeight, int(max(2, (256<<20+bytes-1)/bytes)))
		for i := range ws {
			w, err := b.UploadFP8(fw)
			if err != nil {
				bb.Fatal(err)
			}
			ws[i] = w.Data.(*cudaWeight)
		}
		bws, _ := rotatingWeights(bb, b, sh.n, sh.k, rng)
		x := newDeviceTensor(bb, b, prefill, sh.k)
		xs := make([]float32, prefill*sh.k)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		if err := b.dev.CopyToDevice(x.ptr, round16(weights.DTypeBF16, xs)); err != nil {
			bb.Fatal(err)
		}
		y := newDeviceTensor(bb, b, prefill, sh.n)
		if err := b.ensureFP8Workspace(prefill, ws[0].fp8.colsPad); err != nil {
			bb.Fatal(err)
		}
		f := b.facts()
		for _, m := range []int{1, 8, 16, 64, prefill} {
			bb.Run(fmt.Sprintf("%s-%dx%d/m=%d", sh.name, sh.n, sh.k, m), func(bb *testing.B) {
				const reps = 50
				op := &stepOp{kind: opMatMul, out: sh.n, in: sh.k, fp8: true}
				run := func(path matmulPath) func(i int) error {
					return func(i int) error {
						return b.runFP8(op, &opArgs{d: y, x: x, w: ws[i%len(ws)]}, &opPlan{rows: m, mm: matmulPlan{path: path}})
					}
				}
				var stepUS, bf16US, ltUS, cvtUS, gemmUS, scaleUS, hotUS, wgmmaUS float64
				var err error
				for bb.Loop() {
					if stepUS, err = deviceMicros(b, reps, run(pathFP8)); err != nil {
						bb.Fatal(err)
					}
					if m == 1 { // the same weights every time: read from L2 where they fit (50 MB on the H100 and H200)
						if hotUS, err = deviceMicros(b, reps, func(int) error { return run(pathFP8)(0) }); err != nil {
							bb.Fatal(err)
						}
					}
					bf16 := func(i int) error {
						return b.blas.GemmEx(cuda.Trans, cuda.NoTrans, sh.n, m, sh.k, 1, bws[i%len(bws)].ptr, b.dtype, sh.k, x.ptr,
							b.dtype, sh.k, 0, y.ptr, cuda.Float32, sh.n)
					}
					if f.gemvServes(m, sh.k) {
						bf16 = func(i int) error { return b.launchGemv(y, x, bws[i%len(bws)], sh.n, sh.k, m, &gemvEpilogue{}) }
					}
					if bf16US, err = deviceMicros(b, reps, bf16); err != nil {
						bb.Fatal(err)
					}
					if m > fp8KernelMaxRows && b.fp8.lt != nil {
						if ltUS, err = deviceMicros(b, reps, run(pathFP8Lt)); err != nil {
							bb.Fatal(err)
						}
					}
					if m > fp8KernelMaxRows && m <= gemvMaxTokens && b.fp8.gemm[0] != nil { // the skinny GEMM's e4m3 kernel
						if wgmmaUS, err = deviceMicros(b, reps, run(pathFP8Gemm)); err != nil {
							bb.Fatal(err)
						}
					}
					if mma := b.fp8.mma; mma[0] != nil && m < prefill { // the f16 kernel the other GPUs run
						b.fp8.mma = [4]*cuda.Function{}
						cvtUS, err = deviceMicros(b, reps, run(pathFP8))
						b.fp8.mma = mma
						if err != nil {
							bb.Fatal(err)
						}
					}
					if m == prefill && b.fp8.lt != nil { // its parts: the GEMM, then the scaling pass
						f := ws[0].fp8
						if gemmUS, err = deviceMicros(b, reps, func(i int) error {
							return b.fp8.lt.MatmulE4M3(sh.n, m, f.colsPad, ws[i%len(ws)].ptr, f.colsPad, b.fp8.codes, f.colsPad, y.ptr, sh.n, b.stream)
						}); err != nil {
							bb.Fatal(err)
						}
						if scaleUS, err = deviceMicros(b, reps, func(int) error {
							return b.launchScaleE4M3(fp8ScaleParams{Y: y.ptr, SX: b.fp8.scales, SW: f.scales, M: int32(m), N: int32(sh.n)})
						}); err != nil {
							bb.Fatal(err)
						}
					}
				}
				// The product alone: the quantization of the same rows timed by itself and taken off.
				quantUS, err := deviceMicros(b, reps, func(int) error {
					q := fp8QuantizeParams{Codes: b.fp8.codes, Scales: b.fp8.scales, X: x.ptr, MinScale: fp8MinScale,
						K: int32(sh.k), KP: int32(ws[0].fp8.colsPad)}
					return cuda.Launch(b.fp8.quantize, cuda.Dim3{X: m}, cuda.Dim3{X: rowThreads(sh.k)}, 0, b.stream, &q)
				})
				if err != nil {
					bb.Fatal(err)
				}
				mmUS := stepUS - quantUS
				bb.ReportMetric(stepUS, "step-us")
				bb.ReportMetric(quantUS, "quant-us")
				bb.ReportMetric(mmUS, "matmul-us")
				bb.ReportMetric(float64(bytes)/(mmUS*1e-6)/1e9, "GB/s")
				bb.ReportMetric(100*float64(bytes)/(mmUS*1e-6)/bw, "%copy-bw")
				bb.ReportMetric(bf16US, "bf16-us")
				if cvtUS > 0 {
					bb.ReportMetric(cvtUS, "f16kernel-step-us")
				}
				if hotUS > 0 {
					bb.ReportMetric(hotUS, "l2hot-step-us")
				}
				if ltUS > 0 && m < prefill {
					bb.ReportMetric(ltUS, "lt-step-us")
				}
				if wgmmaUS > 0 {
					bb.ReportMetric(wgmmaUS, "gemm-step-us")
					bb.ReportMetric(100*float64(bytes)/((wgmmaUS-quantUS)*1e-6)/bw, "gemm-%copy-bw")
				}
				if m == prefill {
					flops := 2 * float64(m) * float64(sh.n) * float64(sh.k)
					bb.ReportMetric(flops/(stepUS*1e-6)/1e12, "kernel-TFLOP/s")
					if ltUS > 0 {
						bb.ReportMetric(ltUS, "lt-us")
						bb.ReportMetric(flops/(ltUS*1e-6)/1e12, "lt-TFLOP/s")
						bb.ReportMetric(bf16US/ltUS, "bf16/fp8")
						bb.ReportMetric(gemmUS, "ltgemm-us")
						bb.ReportMetric(scaleUS, "scale-us")
					}
				} else {
					bb.ReportMetric(bf16US/stepUS, "bf16/fp8")
				}
			})
		}
	}
}

// TestCUDAE4M3Quotient: the quantizing kernels' division by a row scale (E4M3Quotient: the reciprocal
// once a row, each quotient corrected by its residual) gives __fdiv_rn's e4m3 code for every value (−0's
// 0x80 too) and, over a code's range (2^-11 to 448 in magnitude), its quotient to the bit: 2^22 pairs of values across float32's exponents (zeros,
// subnormals, ±Inf and NaN among them) and scales from min_scale up, and static scales near 1.
func TestCUDAE4M3Quotient(t *testing.T) {
	b := newGemvBackend(t, weights.DTypeF32)
	fn, err := b.mod.Function("E4M3QuotientCheck")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 22
	rng := rand.New(rand.NewPCG(21, 22))
	xs, ss := make([]float32, n), make([]float32, n)
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, 448, -448, 464, 1e-30}
	for i := range xs {
		switch {
		case i < len(special):
			xs[i] = special[i]
		case i%3 == 0: // any bit pattern: every exponent, subnormals, NaNs
			xs[i] = math.Float32frombits(rng.Uint32())
		default: // what a row holds: up to 448 scales of the row's scale
			xs[i] = float32((2*rng.Float64() - 1) * math.Pow(2, 20*rng.Float64()-10))
		}
		switch i % 4 {
		case 0:
			ss[i] = fp8MinScale
		case 1:
			ss[i] = float32(0.5 + rng.Float64()) // a static input scale
		default:
			ss[i] = fp8MinScale * float32(math.Pow(2, 40*rng.Float64()))
		}
		if i%3 != 0 && i >= len(special) { // x within ±448·s, as a row's values are
			xs[i] *= ss[i] / 2
		}
	}
	x, s := newDeviceTensor(t, b, 1, n), newDeviceTensor(t, b, 1, n)
	bad := newDeviceTensor(t, b, 1, 2)
	if err := errors.Join(b.dev.CopyToDevice(x.ptr, cuda.Bytes(xs)), b.dev.CopyToDevice(s.ptr, cuda.Bytes(ss)),
		b.dev.CopyToDevice(bad.ptr, make([]byte, 8))); err != nil {
		t.Fatal(err)
	}
	p := struct {
		X, S, Bad cuda.DevicePtr
		N         int32
	}{x.ptr, s.ptr, bad.ptr, n}
	if err := cuda.Launch(fn, cuda.Dim3{X: n / 256}, cuda.Dim3{X: 256}, 0, b.stream, &p); err != nil {
		t.Fatal(err)
	}
	got := syncAndRead(t, b, bad.ptr, 2)
	if c, q := math.Float32bits(got[0]), math.Float32bits(got[1]); c != 0 || q != 0 {
		t.Errorf("of %d quotients, %d codes and %d quotients of 2^-11 to 448 differ from __fdiv_rn's", n, c, q)
	}
}

// TestCUDAFP8FusedInputs checks the producers that write an FP8 product's input quantized (NormE4M3,
// SwiGLUE4M3 in float32) against the CPU's definition computed from their float64 values: the residual
// updated exactly (a float32 add), each row's scale within 1e-6 of the reference's (exact when static),
// and its codes the reference's but for elements whose value lies within float32 rounding of an e4m3
// midpoint (at most one code apart, fewer than 1%), in every form the width allows (the loop kernels,
// the register shape fp8RowShape picks, the staged kernels); a row with a NaN gets NaN (every code and a dynamic
// scale); a row of zeros the floor scale. With scaled, the float input (the norm's addend, gate and up) is
// an FP8 product's unscaled sums and the op applies that product's scales first (opPlan.fp8ScaleFrom):
// the reference scales them as ScaleE4M3 does, acc · (sx · sw) in float32, so the residual stays exact.
// SwiGLU's in16 cases run SwiGLUE4M3_bf16_in16 (a bfloat16 backend: opPlan.fp8In16) over gate and up in
// bfloat16, the reference computed from the same bfloat16 values.
func TestCUDAFP8FusedInputs(t *testing.T) {
	dev := gpuDevice(t)
	b32, err := newCUDABackend(gemvShapeForTest(), cudaConfig{dtype: weights.DTypeF32, dev: dev})
	if err != nil {
		t.Fatal(err)
	}
	defer b32.Close()
	defer func() { b32.args = nil }()
	b16, err := newCUDABackend(gemvShapeForTest(), cudaConfig{dtype: weights.DTypeBF16, dev: dev})
	if err != nil {
		t.Fatal(err)
	}
	defer b16.Close()
	defer func() { b16.args = nil }()
	if err := b16.loadFP8(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, kc := range []struct {
		kind opKind
		in16 bool
	}{{opNorm, false}, {opSwiGLU, false}, {opSwiGLU, true}} {
		kind, in16 := kc.kind, kc.in16
		b := b32
		if in16 {
			b = b16
		}
		// round16 is what the device reads of a float input: itself, or its bfloat16 rounding with in16.
		round16 := func(x float32) float32 {
			if !in16 {
				return x
			}
			return dtype.BF16ToF32(dtype.F32ToBF16(x))
		}
		for _, cols := range []int{160, 162, 2048, 4096, 8192, 14336, 18944} { // every fp8RowShape; 162: no staged or register form
			forms := []int{fp8FormLoop}
			if shape, ok := fp8RowShape(cols); ok {
				forms = append(forms, shape)
			}
			if cols%4 == 0 {
				forms = append(forms, fp8FormStaged)
			}
			for _, tc := range []struct {
				static float32
				scaled bool
			}{{0, false}, {0.02, false}, {0, true}, {0.02, true}} {
				for _, form := range forms {
					static := tc.static
					name := fmt.Sprintf("%v/cols%d/form%d/static=%v/scaled=%v", kind, cols, form, static, tc.scaled)
					if in16 {
						name = "in16/" + name
					}
					t.Run(name, func(t *testing.T) {
						const rows = 6
						w, err := b.UploadFP8(randomFP8(rng, 16, cols, static))
						if err != nil {
							t.Fatal(err)
						}
						cw := w.Data.(*cudaWeight)
						// The product before: its weight's scales, one an output column (the norm's addend,
						// or gate and up), and its input's, one a row.
						scaledCols := cols
						if kind == opSwiGLU {
							scaledCols = 2 * cols
						}
						prev := randomFP8(rng, scaledCols, 64, 0)
						pw, err := b.UploadFP8(prev)
						if err != nil {
							t.Fatal(err)
						}
						if err := b.ensureFP8Workspace(rows, cw.fp8.colsPad); err != nil {
							t.Fatal(err)
						}
						b.args = []opArgs{{w: cw}, {w: pw.Data.(*cudaWeight)}}
						plan := &opPlan{rows: rows, fp8Out: 0, fp8X16: true, fp8ScaleFrom: -1, fp8In16: in16}
						in := fp8TestInput(rng, rows, 2*cols, 1) // the residual and the addend; gate and up
						for i := range in {
							in[i] = round16(in[i])
						}
						// dev is what the device reads: the unscaled sums where scaled, whose scaled values are in.
						dev := in
						if tc.scaled {
							plan.fp8ScaleFrom = 1
							sx := make([]float32, rows)
							for r := range sx {
								sx[r] = float32(0.025 + 0.05*rng.Float64())
							}
							if err := b.dev.CopyToDevice(b.fp8.scales, cuda.Bytes(sx)); err != nil {
								t.Fatal(err)
							}
							dev = append([]float32(nil), in...)
							scale := func(i, col, r int) {
								dev[i] = round16(float32(in[i] * 1000))
								in[i] = float32(dev[i] * float32(sx[r]*prev.Scales[col]))
							}
							for r := range rows {
								for j := range cols {
									if kind == opNorm { // the addend; the residual stays as it is
										scale((2*r+1)*cols+j, j, r)
									} else { // gate and up
										scale(2*r*cols+j, j, r)
										scale(2*r*cols+cols+j, cols+j, r)
									}
								}
							}
						}
						want := make([]float32, rows*cols)
						op, a := &stepOp{kind: kind, in: cols, out: cols}, &opArgs{eps: 1e-5}
						var res *cudaTensor
						var newRes []float32
						if kind == opNorm {
							r, add := make([]float32, rows*cols), make([]float32, rows*cols)
							for i := range rows {
								copy(r[i*cols:], in[2*i*cols:(2*i+1)*cols])
								copy(add[i*cols:], in[(2*i+1)*cols:(2*i+2)*cols])
							}
							gain := make([]float32, cols)
							for i := range gain {
								gain[i] = float32(1 + 0.2*rng.NormFloat64())
							}
							gw, err := b.Upload(&weights.Tensor{Name: "g", DType: weights.DTypeF32, Shape: []int{cols}, Data: cuda.Bytes(gain)})
							if err != nil {
								t.Fatal(err)
							}
							res, a.a, a.w = newDeviceTensor(t, b, rows, cols), newDeviceTensor(t, b, rows, cols), gw.Data.(*cudaWeight)
							a.r = res
							devAdd := add
							if tc.scaled {
								devAdd = make([]float32, rows*cols)
								for i := range rows {
									copy(devAdd[i*cols:], dev[(2*i+1)*cols:(2*i+2)*cols])
								}
							}
							if err := errors.Join(b.dev.CopyToDevice(res.ptr, cuda.Bytes(r)), b.dev.CopyToDevice(a.a.ptr, cuda.Bytes(devAdd))); err != nil {
								t.Fatal(err)
							}
							newRes = make([]float32, rows*cols)
							for i := range rows {
								x := newRes[i*cols : (i+1)*cols]
								var ss float64
								for j := range x {
									x[j] = r[i*cols+j] + add[i*cols+j]
									ss += float64(x[j]) * float64(x[j])
								}
								inv := 1 / math.Sqrt(ss/float64(cols)+1e-5)
								for j := range x {
									want[i*cols+j] = float32(float64(gain[j]) * (float64(x[j]) * inv))
								}
							}
						} else {
							gu := newDeviceTensor(t, b, rows, 2*cols)
							raw := cuda.Bytes(dev)
							if in16 {
								raw = make([]byte, 2*len(dev))
								dtype.EncodeBF16(raw, dev)
							}
							if err := b.dev.CopyToDevice(gu.ptr, raw); err != nil {
								t.Fatal(err)
							}
							a.x = gu
							for i := range rows {
								for j := range cols {
									g, u := float64(in[2*i*cols+j]), float64(in[(2*i+1)*cols+j])
									want[i*cols+j] = float32(g / (1 + math.Exp(-g)) * u)
								}
							}
						}
						if err := b.launchFusedE4M3(op, a, plan, form); err != nil {
							t.Fatal(err)
						}
						if err := b.stream.Synchronize(); err != nil {
							t.Fatal(err)
						}
						kp := cw.fp8.colsPad
						codes, scales := make([]byte, rows*kp), make([]float32, rows)
						if err := errors.Join(b.dev.CopyFromDevice(codes, b.fp8.codes), b.dev.CopyFromDevice(cuda.Bytes(scales), b.fp8.scales)); err != nil {
							t.Fatal(err)
						}
						checkX16(t, b, codes, rows, kp)
						if newRes != nil {
							got := syncAndRead(t, b, res.ptr, rows*cols)
							for i := range got {
								if !sameFloat(got[i], newRes[i]) {
									t.Fatalf("residual %d: %v, want %v", i, got[i], newRes[i])
								}
							}
						}
						xq, sx := make([]float32, rows*cols), make([]float32, rows)
						quantizeRows(xq, sx, want, rows, cols, static)
						checkCodePadding(t, codes, rows, cols, kp)
						for r := range rows {
							if math.IsNaN(float64(sx[r])) != math.IsNaN(float64(scales[r])) ||
								!(math.Abs(float64(scales[r]-sx[r])) <= 1e-6*float64(sx[r])) && !math.IsNaN(float64(sx[r])) {
								t.Fatalf("row %d: scale %v, want %v", r, scales[r], sx[r])
							}
							off := 0
							for i := range cols {
								c := codes[r*kp+i]
								wc := dtype.F32ToE4M3Sat(want[r*cols+i] / sx[r])
								if sameFloat(dtype.E4M3ToF32(c), dtype.E4M3ToF32(wc)) || c&0x7f == 0 && wc&0x7f == 0 {
									continue
								}
								off++
								if d := int(c&0x7f) - int(wc&0x7f); c&0x80 != wc&0x80 && c&0x7f != 0 && wc&0x7f != 0 || d < -1 || d > 1 {
									t.Fatalf("row %d column %d: code %#x, want %#x (value %v, scale %v)", r, i, c, wc, want[r*cols+i], sx[r])
								}
							}
							if off > cols/100 {
								t.Errorf("row %d: %d of %d codes one step off", r, off, cols)
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkCUDAFP8GemmShapes sweeps the skinny GEMM's e4m3 kernel (pathFP8Gemm) over launch shapes
// (warpgroups a block, k split, ring slots) for Llama-3-8B's FP8 products at 16, 32 and 64 rows, input
// already quantized: the product's µs and share of the copy bandwidth per shape, the planned shape's,
// and cuBLASLt's GEMM with its scaling pass beside them (docs/bench/fp8-h200.md).
func BenchmarkCUDAFP8GemmShapes(bb *testing.B) {
	b := newGemvBackend(bb, weights.DTypeBF16)
	if err := b.loadFP8(); err != nil {
		bb.Fatal(err)
	}
	if b.fp8.gemm[0] == nil {
		bb.Skip("no e4m3 GEMM (Hopper only)")
	}
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(5, 8))
	for _, sh := range gemvBenchShapes {
		if !strings.HasPrefix(sh.name, "8b-") || sh.name == "8b-lmhead" {
			continue
		}
		bytes := int64(sh.n) * int64(sh.k)
		fw := &FP8Weight{Name: sh.name, Rows: sh.n, Cols: sh.k, Codes: make([]byte, bytes), Scales: make([]float32, sh.n)}
		for i := range fw.Codes {
			fw.Codes[i] = byte(rng.IntN(256)) & 0xbf
		}
		for i := range fw.Scales {
			fw.Scales[i] = 0.01
		}
		ws := make([]*cudaWeight, int(max(2, (256<<20+bytes-1)/bytes)))
		for i := range ws {
			w, err := b.UploadFP8(fw)
			if err != nil {
				bb.Fatal(err)
			}
			ws[i] = w.Data.(*cudaWeight)
		}
		const rows = 64
		y := newDeviceTensor(bb, b, rows, sh.n)
		if err := b.ensureFP8Workspace(rows, ws[0].fp8.colsPad); err != nil {
			bb.Fatal(err)
		}
		op := &stepOp{kind: opMatMul, out: sh.n, in: sh.k, fp8: true}
		for _, m := range []int{16, 32, rows} {
			run := func(path matmulPath) func(i int) error {
				return func(i int) error {
					return b.runFP8(op, &opArgs{d: y, x: y, w: ws[i%len(ws)]}, &opPlan{rows: m, mm: matmulPlan{path: path}, fp8Quantized: true})
				}
			}
			measure := func(bb *testing.B, path matmulPath) float64 {
				us, err := deviceMicros(b, 50, run(path))
				if err != nil {
					bb.Fatal(err)
				}
				bb.ReportMetric(us, "us")
				bb.ReportMetric(100*float64(bytes)/(us*1e-6)/bw, "%copy-bw")
				return us
			}
			var ltUS float64
			bb.Run(fmt.Sprintf("%s/m=%d/cublaslt", sh.name, m), func(bb *testing.B) {
				for bb.Loop() {
					ltUS = measure(bb, pathFP8Lt)
				}
			})
			f := b.facts()
			planned, stages := f.fp8GemmPlan(sh.n, ws[0].fp8.colsPad)
			bb.Run(fmt.Sprintf("%s/m=%d/planned-wg%d-ks%d-st%d", sh.name, m, planned.wg, planned.ks, stages), func(bb *testing.B) {
				for bb.Loop() {
					us := measure(bb, pathFP8Gemm)
					bb.ReportMetric(ltUS/us, "lt/gemm")
				}
			})
			for _, wg := range []int{1, 2, 4} {
				for _, ks := range []int{1, 2, 4, 8} {
					for _, stages := range []int{2, 3, 4, 8} {
						bb.Run(fmt.Sprintf("%s/m=%d/wg%d-ks%d-st%d", sh.name, m, wg, ks, stages), func(bb *testing.B) {
							b.tune.GemmWarps, b.tune.GemmKS, b.tune.GemmStages = wg, ks, stages
							defer func() { b.tune.GemmWarps, b.tune.GemmKS, b.tune.GemmStages = 0, 0, 0 }()
							for bb.Loop() {
								measure(bb, pathFP8Gemm)
							}
						})
					}
				}
			}
		}
	}
}

// TestCUDAFP8BlockCheckpoint runs a block-wise FP8 checkpoint (weightstest's FP8Block) on the GPU: its
// layers are dequantized at load and upload as float tensors, so in float32 and in bfloat16 it gives the
// logits of the float checkpoint of its dequantized weights on the same GPU, bit for bit.
func TestCUDAFP8BlockCheckpoint(t *testing.T) {
	dev := gpuDevice(t)
	fpDir, refDir := t.TempDir(), t.TempDir()
	weightstest.WriteFP8(t, fpDir, fp8TestConfig, 43, weightstest.FP8Block, weightstest.FP8Scales{})
	weightstest.WriteFP8Dequantized(t, refDir, fp8TestConfig, 43, weightstest.FP8Block)
	rng := newRand(13)
	prompts := [][]int32{randomTokens(rng, 40, 300), randomTokens(rng, 3, 300)}
	for _, dt := range []weights.DType{weights.DTypeF32, weights.DTypeBF16} {
		t.Run(fmt.Sprint(dt), func(t *testing.T) {
			run := func(dir string) [][][]float32 {
				m, err := LoadOn(openFolder(t, dir), Options{NumBlocks: 64, BlockSize: 16}, func(s Shape) (Backend, error) {
					return newCUDABackend(s, cudaConfig{dtype: dt, dev: dev})
				})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				logits, _ := runPrompts(t, m, prompts, 5)
				return logits
			}
			sameLogitBits(t, run(fpDir), run(refDir), "from the block-wise checkpoint", "from its dequantized weights")
		})
	}
}

// BenchmarkCUDAFP8Fused times the quantizing producers of FP8 products' inputs (the norm that adds an
// FP8 product's unscaled output, the SwiGLU over gate/up's unscaled sums, both applying the product's
// scales as in the step) at Llama-3-8B's widths (4096, 14336: a register shape against the staged form)
// and the intermediate widths no register shape holds (Qwen2.5-7B's 18944, Llama-3-70B's 28672: the loop
// kernels against the staged form), and the SwiGLU over bfloat16 sums (in16/…, the prefill's: cuBLASLt
// writes gate/up's sums so) at 14336, from one row (decode) to 1024 (prefill): µs a call, the share of
// the copy bandwidth its bytes take (float32 reads and writes, bfloat16 sums, one byte a code), and the
// other form's time over the staged one's (docs/bench/fp8-h200.md). Each call reads its input from memory or L2 as it
// stands; in a step the product before has just written it.
func BenchmarkCUDAFP8Fused(bb *testing.B) {
	b32 := newGemvBackend(bb, weights.DTypeF32)
	b16 := newGemvBackend(bb, weights.DTypeBF16)
	for _, b := range []*cudaBackend{b32, b16} {
		if err := b.loadFP8(); err != nil {
			bb.Fatal(err)
		}
		defer func() { b.args = nil }()
	}
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(3, 4))
	const maxRows = 1024
	for _, kc := range []struct {
		kind opKind
		cols int
		in16 bool // the SwiGLU over bfloat16 sums (opPlan.fp8In16), on a bfloat16 backend
	}{{opNorm, 4096, false}, {opSwiGLU, 14336, false}, {opSwiGLU, 14336, true}, {opSwiGLU, 18944, false}, {opSwiGLU, 28672, false}} {
		b := b32
		if kc.in16 {
			b = b16
		}
		in := kc.cols
		if kc.kind == opSwiGLU {
			in = 2 * kc.cols
		}
		next, err := b.UploadFP8(randomFP8(rng, 16, kc.cols, 0))
		if err != nil {
			bb.Fatal(err)
		}
		prev, err := b.UploadFP8(randomFP8(rng, in, 64, 0))
		if err != nil {
			bb.Fatal(err)
		}
		nw := next.Data.(*cudaWeight)
		if err := b.ensureFP8Workspace(maxRows, nw.fp8.colsPad); err != nil {
			bb.Fatal(err)
		}
		b.args = []opArgs{{w: nw}, {w: prev.Data.(*cudaWeight)}}
		x := newDeviceTensor(bb, b, maxRows, in)
		gain, err := b.Upload(&weights.Tensor{Name: "g", DType: weights.DTypeF32, Shape: []int{kc.cols}, Data: cuda.Bytes(make([]float32, kc.cols))})
		if err != nil {
			bb.Fatal(err)
		}
		host := fp8TestInput(rng, maxRows, in, -1)
		raw := cuda.Bytes(host)
		if kc.in16 {
			raw = make([]byte, 2*len(host))
			dtype.EncodeBF16(raw, host)
		}
		if err := b.dev.CopyToDevice(x.ptr, raw); err != nil {
			bb.Fatal(err)
		}
		sx := make([]float32, maxRows)
		for i := range sx {
			sx[i] = 0.01
		}
		op, a := &stepOp{kind: kc.kind, in: kc.cols, out: kc.cols}, &opArgs{eps: 1e-5}
		bytes := 9 * kc.cols // SwiGLU: gate and up read, a code written
		if kc.in16 {
			bytes = 5 * kc.cols
		}
		if kc.kind == opNorm {
			res := newDeviceTensor(bb, b, maxRows, kc.cols)
			if err := b.dev.CopyToDevice(res.ptr, cuda.Bytes(host[:maxRows*kc.cols])); err != nil {
				bb.Fatal(err)
			}
			a.r, a.a, a.w = res, x, gain.Data.(*cudaWeight)
			bytes = 13 * kc.cols // the residual read and written, the addend read, a code written
		} else {
			a.x = x
		}
		for _, rows := range []int{1, 64, 128, 256, 1024} {
			other, otherName := fp8FormLoop, "loop"
			if shape, ok := fp8RowShape(kc.cols); ok {
				other, otherName = shape, fmt.Sprintf("r%dx%d", fp8RowShapes[shape].threads, fp8RowShapes[shape].groups)
			}
			var otherUS float64
			for _, form := range []int{other, fp8FormStaged} {
				name := fmt.Sprintf("%v/cols=%d/rows=%d/%s", kc.kind, kc.cols, rows, otherName)
				if form == fp8FormStaged {
					name = fmt.Sprintf("%v/cols=%d/rows=%d/staged", kc.kind, kc.cols, rows)
				}
				if kc.in16 {
					name = "in16/" + name
				}
				bb.Run(name, func(bb *testing.B) {
					plan := &opPlan{rows: rows, fp8Out: 0, fp8ScaleFrom: 1, fp8In16: kc.in16}
					for bb.Loop() {
						// The scales each call overwrites stand in for the product's before it.
						if err := b.dev.CopyToDevice(b.fp8.scales, cuda.Bytes(sx)); err != nil {
							bb.Fatal(err)
						}
						us, err := deviceMicros(b, 50, func(int) error { return b.launchFusedE4M3(op, a, plan, form) })
						if err != nil {
							bb.Fatal(err)
						}
						bb.ReportMetric(us, "us")
						bb.ReportMetric(100*float64(rows*bytes)/(us*1e-6)/bw, "%copy-bw")
						if form == fp8FormStaged {
							bb.ReportMetric(otherUS/us, "other/staged")
						} else {
							otherUS = us
						}
					}
				})
			}
		}
	}
}

// fp8Operands uploads w and, with withBias, a random bias, and writes rows random input rows of k values
// (a NaN in row 1 where there are several) in dtype dt to the device, sizing the FP8 workspace for them.
// x holds the values the GPU reads (rounded to dt).
func fp8Operands(t *testing.T, b *cudaBackend, dt weights.DType, rng *rand.Rand, w *FP8Weight, rows, k int,
	withBias bool) (cw *cudaWeight, bias []float32, bw *cudaWeight, x []float32, xt *cudaTensor) {
	t.Helper()
	wt, err := b.UploadFP8(w)
	if err != nil {
		t.Fatal(err)
	}
	cw = wt.Data.(*cudaWeight)
	if withBias {
		bias = make([]float32, w.Rows)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
		bt, err := b.Upload(&weights.Tensor{Name: "b", DType: weights.DTypeF32, Shape: []int{w.Rows}, Data: cuda.Bytes(bias)})
		if err != nil {
			t.Fatal(err)
		}
		bw = bt.Data.(*cudaWeight)
	}
	nanRow := -1
	if rows > 1 {
		nanRow = 1
	}
	x = fp8TestInput(rng, rows, k, nanRow)
	xt = newDeviceTensor(t, b, rows, k)
	raw := cuda.Bytes(x)
	if dt != weights.DTypeF32 {
		raw = round16(dt, x) // x now holds the values the GPU reads
	}
	if err := b.dev.CopyToDevice(xt.ptr, raw); err != nil {
		t.Fatal(err)
	}
	if err := b.ensureFP8Workspace(rows, cw.fp8.colsPad); err != nil {
		t.Fatal(err)
	}
	return cw, bias, bw, x, xt
}
