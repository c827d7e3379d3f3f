//go:build cuda

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
)

// gemmTestShapes are the decode products of Llama-3.2-1B and Llama-3-8B (out × in) and small shapes whose
// heights are not multiples of a block's rows (nor of 16; 1001 not of 4, so that a token's output rows
// are not 16-byte aligned) and whose k splits unevenly.
var gemmTestShapes = []struct {
	name string
	n, k int
}{
	{"odd-40", 40, 256}, {"odd-1000", 1000, 384}, {"odd-1001", 1001, 384}, {"odd-300", 300, 1280}, {"odd-2000", 2000, 2944},
	{"1b-qkv", 3072, 2048}, {"1b-o", 2048, 2048}, {"1b-gateup", 16384, 2048}, {"1b-down", 2048, 8192},
	{"8b-qkv", 6144, 4096}, {"8b-o", 4096, 4096}, {"8b-gateup", 28672, 4096}, {"8b-down", 4096, 14336},
}

// newGemmBackend is newGemvBackend on a device that has the skinny GEMM (compute capability 9.0).
func newGemmBackend(t testing.TB, dt weights.DType) *cudaBackend {
	t.Helper()
	b := newGemvBackend(t, dt)
	if b.gemm == nil {
		t.Fatalf("no skinny GEMM kernels (compute capability %d.%d)", b.dev.Info().Major, b.dev.Info().Minor)
	}
	return b
}

// gemmBase is what the output holds before an accumulating product (float32 bits of 0.25).
const gemmBase = 0x3e800000

// TestCUDAGemm checks the skinny GEMM against a float64 product of the same rounded operands (error under
// 1e-4 of Σ|x·w| per element, as the skinny product's test), for bfloat16 and float16, at 9…64 token rows
// (every kernel variant, partial token tiles), writing (output poisoned with NaN) and accumulating (output
// filled with 0.25, which the product must add to), with the planned launch and forced shapes: k whole
// and split over clusters of 2-8 blocks (3 and 7: uneven ranges), blocks of 2-8 consumer warps (with
// rows past n in the last block), the weights' L2 policy on and off. Rows past m must keep what they
// held. Each case runs twice (the ring's barriers start over every launch).
func TestCUDAGemm(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemmBackend(t, dt)
		rng := rand.New(rand.NewPCG(11, uint64(dt)))
		for _, sh := range gemmTestShapes {
			w, wv, x, xv := gemvOperands(t, b, dt, sh.n, sh.k, rng)
			y := newDeviceTensor(t, b, gemvMaxTokens, sh.n)
			ref, scale := referenceProduct(wv, xv, sh.n, sh.k, gemvMaxTokens)
			small := sh.n*sh.k < 1<<22
			ms := []int{9, 17, 33, 64}
			shapes := []gemmShape{{}, {4, 1}, {3, 3}}
			if small {
				ms = []int{9, 16, 17, 24, 32, 33, 48, 57, 63, 64}
				shapes = append(shapes, gemmShape{4, 8}, gemmShape{1, 7}, gemmShape{2, 2}, gemmShape{1, 4}, gemmShape{2, 1})
			}
			for _, m := range ms {
				for _, gs := range shapes {
					for _, acc := range []bool{false, true} {
						if gs.ks > sh.k/gemmChunk {
							continue
						}
						flags := 0
						if m%2 == 1 {
							flags = 8 // evict_first on the weights
						}
						t.Run(fmt.Sprintf("%v/%s-%dx%d/m%d/wg%d_ks%d/acc=%v", dt, sh.name, sh.n, sh.k, m, gs.wg, gs.ks, acc),
							func(t *testing.T) {
								b.tune.Gemm, b.tune.GemmWarps, b.tune.GemmKS, b.tune.GemmFlags = true, gs.wg, gs.ks, flags
								if m%4 == 1 {
									b.tune.GemmStages = 2 // the ring wraps often
								}
								defer func() { b.tune = defaultGemvTuning }()
								for range 2 {
									fill := uint32(0x7fc07fc0)
									if acc {
										fill = gemmBase
									}
									if err := b.dev.Fill32(y.ptr, fill, int64(gemvMaxTokens*sh.n), nil); err != nil {
										t.Fatal(err)
									}
									if err := b.dev.Synchronize(); err != nil {
										t.Fatal(err)
									}
									if err := b.launchGemm(y, x, w, sh.n, sh.k, m, acc, nil, false); err != nil {
										t.Fatal(err)
									}
									got := syncAndRead(t, b, y.ptr, gemvMaxTokens*sh.n)
									checkGemm(t, got, ref, scale, sh.n, m, acc)
								}
							})
					}
				}
			}
		}
	}
}

// TestCUDAGemmArgmax checks the GEMM's argmax epilogue (a greedy step's LM head of 9-64 rows: each
// token's largest logit of each block's rows, finished by ArgmaxPartials, the logits not written) against
// the host's pick (pickRowCPU) of the logits the same GEMM writes without it: random rows; rows whose
// logits tie (rows 37, 40 — one block — and 700, another, all ones: the first must win) beside a −∞ row
// (900, never wins), and the same with a NaN row (every pick NonFinitePick);
// every logit negative (the last block's rows past n, zeros in the tile, must not win); n not a multiple
// of a block's rows; planned and forced launch shapes of 1-4 warpgroups.
func TestCUDAGemmArgmax(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemmBackend(t, dt)
		rng := rand.New(rand.NewPCG(12, uint64(dt)))
		const n, k = 1001, 256
		if err := b.ensureArgmaxPartials(gemvMaxTokens * ((n + 15) / 16)); err != nil {
			t.Fatal(err)
		}
		if err := b.ensureIDs(gemvMaxTokens); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"random", "tie", "nan", "negative"} {
			tie := mode == "tie"
			w, wv, x, xv := gemvOperands(t, b, dt, n, k, rng)
			if mode != "random" { // x positive multiples of 1/8: the tied rows' sums are exact, far above the others'
				for i := range xv {
					xv[i] = float32(1+rng.IntN(15)) / 8
				}
				for i := range wv {
					if mode == "negative" {
						wv[i] = -float32(math.Abs(float64(wv[i]))) - 1.0/64
					}
				}
				if tie || mode == "nan" {
					bad := float32(math.Inf(-1))
					if mode == "nan" {
						bad = float32(math.NaN())
					}
					for i := range k {
						wv[37*k+i], wv[40*k+i], wv[700*k+i], wv[900*k+i] = 1, 1, 1, bad
					}
				}
				if err := b.dev.CopyToDevice(w.ptr, round16(dt, wv)); err != nil {
					t.Fatal(err)
				}
				if err := b.dev.CopyToDevice(x.ptr, round16(dt, xv)); err != nil {
					t.Fatal(err)
				}
			}
			y := newDeviceTensor(t, b, gemvMaxTokens, n)
			for _, m := range []int{9, 16, 33, 64} {
				for _, gs := range []gemmShape{{}, {1, 1}, {3, 1}, {4, 1}} {
					t.Run(fmt.Sprintf("%v/%s/m%d/wg%d", dt, mode, m, gs.wg), func(t *testing.T) {
						b.tune.Gemm, b.tune.GemmWarps, b.tune.GemmKS = true, gs.wg, gs.ks
						defer func() { b.tune = defaultGemvTuning }()
						poison(t, b, y.ptr, gemvMaxTokens*n)
						if err := b.launchGemm(y, x, w, n, k, m, false, nil, false); err != nil {
							t.Fatal(err)
						}
						logits := syncAndRead(t, b, y.ptr, m*n)
						poison(t, b, y.ptr, gemvMaxTokens*n)
						poison(t, b, b.argValues, gemvMaxTokens*((n+15)/16))
						if err := b.launchGemm(y, x, w, n, k, m, false, nil, true); err != nil {
							t.Fatal(err)
						}
						untouched := syncAndRead(t, b, y.ptr, m*n)
						for i, v := range untouched {
							if !math.IsNaN(float64(v)) {
								t.Fatalf("logit %d written (%g): the argmax epilogue must not write y", i, v)
							}
						}
						checkArgmaxPartials(t, b, m, b.gemmArgmaxBlocks(n, k), logits, n, tie)
					})
				}
			}
		}
	}
}

// TestCUDAGemmSwiGLU checks the GEMM's SwiGLU epilogue (the gate/up product of 9-64 rows writing
// act = silu(gate) · up in the dtype, y untouched) against the float64 reference product, within one
// rounding to the dtype, for intermediate sizes that fill the blocks' rows, that do not (200 and 136: the
// last block's groups of 8 gate rows run past the matrix, and the copy engine fills them with zeros), and
// Llama-3-8B's; planned and forced warpgroups 1-4. An intermediate size that is not a multiple of 8
// (204) is refused with an error.
func TestCUDAGemmSwiGLU(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemvBackend(t, dt)
		rng := rand.New(rand.NewPCG(4, uint64(dt)))
		for _, c := range []struct{ inter, k int }{{64, 256}, {200, 256}, {136, 256}, {204, 256}, {384, 1280}, {14336, 4096}} {
			n := 2 * c.inter
			w, wv, x, xv := gemvOperands(t, b, dt, n, c.k, rng)
			y := newDeviceTensor(t, b, gemvMaxTokens, n)
			act := newDeviceTensor(t, b, gemvMaxTokens, c.inter)
			ref, _ := referenceProduct(wv, xv, n, c.k, gemvMaxTokens)
			for _, m := range []int{9, 16, 33, 64} {
				for _, wg := range []int{0, 1, 2, 3, 4} {
					t.Run(fmt.Sprintf("%v/I%d/m%d/wg%d", dt, c.inter, m, wg), func(t *testing.T) {
						b.tune.Gemm, b.tune.GemmWarps, b.tune.GemmKS = true, wg, 1
						defer func() { b.tune = defaultGemvTuning }()
						poison(t, b, y.ptr, gemvMaxTokens*n)
						poison(t, b, act.ptr, gemvMaxTokens*c.inter/2)
						err := b.launchGemm(y, x, w, n, c.k, m, false, act, false)
						if c.inter%8 != 0 {
							if err == nil {
								t.Fatal("intermediate size not a multiple of 8 accepted")
							}
							return
						}
						if err != nil {
							t.Fatal(err)
						}
						for i, v := range syncAndRead(t, b, y.ptr, gemvMaxTokens*n) {
							if !math.IsNaN(float64(v)) {
								t.Fatalf("y[%d] written (%g)", i, v)
							}
						}
						got := read16(t, b, dt, act.ptr, gemvMaxTokens*c.inter)
						ulp := 1.0 / 128
						if dt == weights.DTypeF16 {
							ulp = 1.0 / 1024
						}
						for r := range gemvMaxTokens {
							for i := range c.inter {
								v := float64(got[r*c.inter+i])
								if r >= m {
									if !math.IsNaN(v) {
										t.Fatalf("act[%d][%d] = %g past m = %d", r, i, v, m)
									}
									continue
								}
								g, u := ref[r*n+i], ref[r*n+c.inter+i]
								want := g / (1 + math.Exp(-g)) * u
								if d := math.Abs(v - want); !(d <= ulp*math.Abs(want)+1e-3) {
									t.Fatalf("act[%d][%d] = %g, want %g", r, i, v, want)
								}
							}
						}
					})
				}
			}
		}
	}
}

// checkGemm is checkProduct for a product that may accumulate: with acc the first m rows must hold 0.25
// plus the reference and the others 0.25 still; without, the reference and NaN.
func checkGemm(t *testing.T, y []float32, ref, scale []float64, n, m int, acc bool) {
	t.Helper()
	if !acc {
		checkProduct(t, y, ref, scale, n, m)
		return
	}
	base := float64(math.Float32frombits(gemmBase))
	bad := 0
	for r := range gemvMaxTokens {
		for o := range n {
			got := float64(y[r*n+o])
			want, tol := base, 0.0
			if r < m {
				want, tol = base+ref[r*n+o], 1e-4*scale[r*n+o]+1e-6
			}
			if !(math.Abs(got-want) <= tol) && bad < 5 {
				t.Errorf("y[%d][%d] = %g, want %g (m = %d, tolerance %g)", r, o, got, want, m, tol)
				bad++
			}
		}
	}
}

// TestCUDAGemmServes checks which products MatMul sends to the skinny GEMM: 9…64 rows (above the skinny
// product's MaxTokens) of 16-bit weights with in a multiple of 64, only while it is switched on; and which
// of those it takes (gemmTakes): enough weight bytes, and a gate/up product only with an intermediate size
// that is a multiple of 8.
func TestCUDAGemmServes(t *testing.T) {
	b := newGemvBackend(t, weights.DTypeBF16)
	defer func() { b.tune = defaultGemvTuning }()
	for _, c := range []struct {
		on       bool
		rows, in int
		want     bool
	}{
		{true, 8, 4096, false}, {true, 9, 4096, true}, {true, 64, 4096, true}, {true, 65, 4096, false},
		{true, 32, 4096 + 32, false}, {true, 32, 4096 + 64, true}, {true, 32, 14336, true}, {false, 32, 4096, false},
	} {
		b.tune = defaultGemvTuning
		b.tune.Gemm = c.on
		if f := b.facts(); f.gemmServes(c.rows, c.in) != c.want {
			got := !c.want
			t.Errorf("gemmServes(%d, %d) with Gemm %v = %v, want %v", c.rows, c.in, c.on, got, c.want)
		}
	}
	b.tune = defaultGemvTuning
	for _, c := range []struct {
		out, in int
		swiglu  bool
		want    bool
	}{
		{2 * 14336, 4096, true, true}, {2 * 8192, 2048, true, true}, {2 * 14340, 4096, true, false},
		{2 * 14340, 4096, false, true}, {4096, 4096, false, false},
	} {
		if f := b.facts(); f.gemmTakes(32, c.out, c.in, c.swiglu) != c.want {
			got := !c.want
			t.Errorf("gemmTakes(32, %d, %d, SwiGLU %v) = %v, want %v", c.out, c.in, c.swiglu, got, c.want)
		}
	}
	f32 := newGemvBackend(t, weights.DTypeF32)
	f32.tune.Gemm = true
	if f := f32.facts(); f.gemmServes(32, 4096) {
		t.Error("gemmServes for float32 weights")
	}
}

// BenchmarkCUDAGemm times the decode products of Llama-3.2-1B and Llama-3-8B (bf16) at 16, 32 and 64
// token rows: cuBLAS GemmEx, the skinny GEMM as planned, and the best launch shape of a sweep over
// warps a block × k split. Weights rotate among copies totalling ≥ 256 MB (L2 is 50 MB). %BW is weight
// bytes / time / the copy bandwidth (copyBandwidth: measured).
//
//	go test -tags cuda -run XXX -bench CUDAGemm -benchtime 1x ./model
func BenchmarkCUDAGemm(bb *testing.B) {
	b := newGemmBackend(bb, weights.DTypeBF16)
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(5, 7))
	for _, sh := range gemvBenchShapes {
		ws, bytes := rotatingWeights(bb, b, sh.n, sh.k, rng)
		copies := len(ws)
		x := newDeviceTensor(bb, b, gemvMaxTokens, sh.k)
		y := newDeviceTensor(bb, b, gemvMaxTokens, sh.n)
		for _, m := range []int{16, 32, 64} {
			bb.Run(fmt.Sprintf("%s-%dx%d/m=%d", sh.name, sh.n, sh.k, m), func(bb *testing.B) {
				const reps = 100
				pct := func(us float64) float64 { return 100 * float64(bytes) / (us * 1e-6) / bw }
				gemm := func(warps, ks, stages, flags int) (float64, error) {
					b.tune = defaultGemvTuning
					b.tune.Gemm, b.tune.GemmWarps, b.tune.GemmKS, b.tune.GemmStages, b.tune.GemmFlags = true, warps, ks, stages, flags
					defer func() { b.tune = defaultGemvTuning }()
					return deviceMicros(b, reps, func(i int) error {
						return b.launchGemm(y, x, ws[i%copies], sh.n, sh.k, m, false, nil, false)
					})
				}
				var cublasUS, planUS, evictUS float64
				var err error
				for bb.Loop() {
					cublasUS, err = cublasMicros(b, reps, ws, x, y, sh.n, sh.k, m)
					if err != nil {
						bb.Fatal(err)
					}
					if planUS, err = gemm(0, 0, 0, 0); err != nil {
						bb.Fatal(err)
					}
					if evictUS, err = gemm(0, 0, 0, 8); err != nil {
						bb.Fatal(err)
					}
				}
				type point struct {
					warps, ks, stages int
					us                float64
				}
				var sweep []point
				info := b.dev.Info()
				for warps := 1; warps <= gemmMaxGroups; warps++ {
					for _, ks := range []int{1, 2, 3, 4, 6, 8} {
						if ks > sh.k/gemmChunk || (sh.n+64*warps-1)/(64*warps)*ks > 8*info.NumSMs {
							continue
						}
						for _, stages := range []int{3, 4, 8} {
							us, err := gemm(warps, ks, stages, 0)
							if err != nil {
								bb.Fatal(err)
							}
							sweep = append(sweep, point{warps, ks, stages, us})
						}
					}
				}
				sort.Slice(sweep, func(i, j int) bool { return sweep[i].us < sweep[j].us })
				plan := planGemm(sh.n, sh.k/gemmChunk, info.NumSMs)
				bb.ReportMetric(cublasUS, "cublas-us")
				bb.ReportMetric(pct(cublasUS), "cublas-%BW")
				bb.ReportMetric(planUS, "gemm-us")
				bb.ReportMetric(pct(planUS), "gemm-%BW")
				bb.ReportMetric(evictUS, "gemm-evict-us")
				bb.ReportMetric(sweep[0].us, "best-us")
				bb.ReportMetric(pct(sweep[0].us), "best-%BW")
				top := ""
				for i := range min(5, len(sweep)) {
					top += fmt.Sprintf(" wg%d/ks%d/s%d %.1fµs", sweep[i].warps, sweep[i].ks, sweep[i].stages, sweep[i].us)
				}
				bb.Logf("%s m=%d: cublas %.1fµs (%.0f%%), gemm wg%d/ks%d %.1fµs (%.0f%%), evict_first %.1fµs; best:%s",
					sh.name, m, cublasUS, pct(cublasUS), plan.wg, plan.ks, planUS, pct(planUS), evictUS, top)
			})
		}
	}
}

// BenchmarkCUDAGemmDiag times the GEMM's parts on the Llama-3-8B products at 16 and 64 rows with the
// planned shapes (the gate/up product with its SwiGLU epilogue, as the decode step runs it): whole,
// without writing its output (flag 1024), with only the weight copies (7) with and without the output,
// without the activation copies (1), without the mma (2), without the k-split sum (4), and whole with
// evict_first weights (8). Wrong results but for 0 and 8; the times say where the time goes.
//
//	go test -tags cuda -run XXX -bench CUDAGemmDiag -benchtime 1x -v ./model
func BenchmarkCUDAGemmDiag(bb *testing.B) {
	b := newGemvBackend(bb, weights.DTypeBF16)
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(5, 8))
	for _, sh := range []struct {
		name   string
		n, k   int
		swiglu bool
	}{
		{"8b-qkv", 6144, 4096, false}, {"8b-o", 4096, 4096, false}, {"8b-gateup", 28672, 4096, true},
		{"8b-down", 4096, 14336, false}, {"8b-lmhead", 128256, 4096, false},
	} {
		ws, bytes := rotatingWeights(bb, b, sh.n, sh.k, rng)
		copies := len(ws)
		x := newDeviceTensor(bb, b, gemvMaxTokens, sh.k)
		y := newDeviceTensor(bb, b, gemvMaxTokens, sh.n)
		var act *cudaTensor
		if sh.swiglu {
			act = newDeviceTensor(bb, b, gemvMaxTokens, sh.n/2)
		}
		for _, m := range []int{16, 64} {
			plan := planGemm(sh.n, sh.k/gemmChunk, b.dev.Info().NumSMs)
			line := fmt.Sprintf("%s m=%d wg%d/ks%d swiglu=%v:", sh.name, m, plan.wg, plan.ks, sh.swiglu)
			for _, diag := range []int{0, 1024, 7, 7 | 1024, 1, 2, 4, 0, 8} {
				b.tune = defaultGemvTuning
				b.tune.Gemm, b.tune.GemmFlags = true, diag
				us, err := deviceMicros(b, 100, func(i int) error {
					return b.launchGemm(y, x, ws[i%copies], sh.n, sh.k, m, false, act, false)
				})
				b.tune = defaultGemvTuning
				if err != nil {
					bb.Fatal(err)
				}
				line += fmt.Sprintf(" flags%d %.1fµs (%.0f%%)", diag, us, 100*float64(bytes)/(us*1e-6)/bw)
			}
			bb.Log(line)
		}
	}
}

// BenchmarkCUDAGemmWave asks whether the skinny GEMM is bound by the SMs it occupies or by the memory
// system: plain products of 64 rows, k 4096, blocks of 4 warpgroups (256 rows) and k whole, with 44 … 264
// blocks (a third of the H100's SMs … two waves). Bound by memory, the time grows with the blocks; bound
// per SM, it stays level up to one block an SM. Reports µs and TB/s, for the whole kernel and for its
// weight copies alone (flags 3: wrong results). On the H100 (docs/bench/gemm-h100.md,
// "Where the GEMM's stream stops"): bound by memory from 88 blocks on, at 2.6-2.8 TB/s.
//
//	go test -tags cuda -run XXX -bench CUDAGemmWave -benchtime 1x ./model
func BenchmarkCUDAGemmWave(bb *testing.B) {
	b := newGemmBackend(bb, weights.DTypeBF16)
	rng := rand.New(rand.NewPCG(5, 9))
	const k, m, reps = 4096, 64, 100
	for _, blocks := range []int{44, 88, 112, 132, 150, 264} {
		n := 256 * blocks
		ws, bytes := rotatingWeights(bb, b, n, k, rng)
		x := newDeviceTensor(bb, b, gemvMaxTokens, k)
		y := newDeviceTensor(bb, b, gemvMaxTokens, n)
		for _, flags := range []int{0, 3} {
			bb.Run(fmt.Sprintf("blocks=%d/flags=%d", blocks, flags), func(bb *testing.B) {
				b.tune = defaultGemvTuning
				b.tune.Gemm, b.tune.GemmWarps, b.tune.GemmKS, b.tune.GemmFlags = true, 4, 1, flags
				defer func() { b.tune = defaultGemvTuning }()
				var us float64
				var err error
				for bb.Loop() {
					if us, err = deviceMicros(b, reps, func(i int) error {
						return b.launchGemm(y, x, ws[i%len(ws)], n, k, m, false, nil, false)
					}); err != nil {
						bb.Fatal(err)
					}
				}
				bb.ReportMetric(us, "us")
				bb.ReportMetric(float64(bytes)/us/1e6, "TB/s")
			})
		}
	}
}

// BenchmarkCUDAGemmSplit times the small decode products (Q/K/V, O, down) of Llama-3.2-1B and Llama-3-8B
// (bf16) at 16, 32 and 64 token rows on cuBLAS: GemmEx, and the same product with its k split into S
// partial products of one strided-batched call (S float outputs; summing them is left to the consumer,
// so it is not timed here). Weights rotate among copies totalling ≥ 256 MB. gap = split ÷ GemmEx.
//
//	go test -tags cuda -run XXX -bench CUDAGemmSplit -benchtime 1x -v ./model
func BenchmarkCUDAGemmSplit(bb *testing.B) {
	b := newGemvBackend(bb, weights.DTypeBF16)
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(5, 9))
	for _, sh := range gemvBenchShapes {
		if sh.n > 8192 { // gate/up and the LM head run on the skinny GEMM
			continue
		}
		ws, bytes := rotatingWeights(bb, b, sh.n, sh.k, rng)
		x := newDeviceTensor(bb, b, gemvMaxTokens, sh.k)
		y := newDeviceTensor(bb, b, 8*gemvMaxTokens, sh.n)
		for _, m := range []int{16, 32, 64} {
			bb.Run(fmt.Sprintf("%s-%dx%d/m=%d", sh.name, sh.n, sh.k, m), func(bb *testing.B) {
				const reps = 100
				pct := func(us float64) float64 { return 100 * float64(bytes) / (us * 1e-6) / bw }
				var cublasUS float64
				var err error
				line := ""
				for bb.Loop() {
					if cublasUS, err = cublasMicros(b, reps, ws, x, y, sh.n, sh.k, m); err != nil {
						bb.Fatal(err)
					}
					line = fmt.Sprintf("%s m=%d: GemmEx %.1fµs (%.0f%%)", sh.name, m, cublasUS, pct(cublasUS))
					for _, s := range []int{2, 3, 4, 6, 7, 8} {
						if sh.k%(s*64) != 0 {
							continue
						}
						ks := sh.k / s
						us, err := deviceMicros(b, reps, func(i int) error {
							return b.blas.GemmStridedBatchedEx(cuda.Trans, cuda.NoTrans, sh.n, m, ks, 1,
								ws[i%len(ws)].ptr, b.dtype, sh.k, int64(ks), x.ptr, b.dtype, sh.k, int64(ks), 0,
								y.ptr, cuda.Float32, sh.n, int64(m*sh.n), s)
						})
						if err != nil {
							bb.Fatal(err)
						}
						bb.ReportMetric(us, fmt.Sprintf("split%d-us", s))
						line += fmt.Sprintf(", S=%d %.1fµs (%.0f%%, gap %.2f×)", s, us, pct(us), us/cublasUS)
					}
					// The output rows dealt out instead: R products of n/R weight rows each, the same x, each
					// writing its columns of y in place (no sum to do).
					for _, r := range []int{2, 3, 4, 6, 8} {
						if sh.n%(r*64) != 0 {
							continue
						}
						nr := sh.n / r
						us, err := deviceMicros(b, reps, func(i int) error {
							return b.blas.GemmStridedBatchedEx(cuda.Trans, cuda.NoTrans, nr, m, sh.k, 1,
								ws[i%len(ws)].ptr, b.dtype, sh.k, int64(nr)*int64(sh.k), x.ptr, b.dtype, sh.k, 0, 0,
								y.ptr, cuda.Float32, sh.n, int64(nr), r)
						})
						if err != nil {
							bb.Fatal(err)
						}
						bb.ReportMetric(us, fmt.Sprintf("rows%d-us", r))
						line += fmt.Sprintf(", R=%d %.1fµs (gap %.2f×)", r, us, us/cublasUS)
					}
				}
				bb.ReportMetric(cublasUS, "cublas-us")
				bb.Log(line)
			})
		}
	}
}
