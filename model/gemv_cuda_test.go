//go:build cuda

package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/weights"
)

// gemvShapeForTest is the shape of the backend the skinny-product tests run on: heads of 64 (8 query, 2
// KV), so that the RoPE epilogue has pairs 32 rows apart.
func gemvShapeForTest() Shape {
	inv := make([]float32, 32)
	for i := range inv {
		inv[i] = float32(math.Pow(10000, -float64(2*i)/64))
	}
	return Shape{NumLayers: 1, HiddenSize: 256, NumHeads: 8, NumKVHeads: 2, HeadDim: 64, RopeInvFreq: inv,
		RopeAttentionScaling: 1, NumBlocks: 16, BlockSize: 16}
}

func newGemvBackend(t testing.TB, dt weights.DType) *cudaBackend {
	t.Helper()
	b, err := newCUDABackend(gemvShapeForTest(), cudaConfig{dtype: dt, dev: gpuDevice(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// round16 rounds v to dt in place and returns its bytes in dt.
func round16(dt weights.DType, v []float32) []byte {
	raw := make([]byte, 2*len(v))
	if dt == weights.DTypeBF16 {
		dtype.EncodeBF16(raw, v)
		dtype.DecodeBF16(v, raw)
	} else {
		dtype.EncodeF16(raw, v)
		dtype.DecodeF16(v, raw)
	}
	return raw
}

// gemvOperands uploads a random weight [n][k] and activations [64][k] (only the first m rows matter),
// both rounded to dt, and returns them with their exact values.
func gemvOperands(t testing.TB, b *cudaBackend, dt weights.DType, n, k int, rng *rand.Rand) (*cudaWeight, []float32,
	*cudaTensor, []float32) {
	t.Helper()
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.05)
	}
	wt, err := b.Upload(&weights.Tensor{Name: "w", DType: dt, Shape: []int{n, k}, Data: round16(dt, w)})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, gemvMaxTokens*k)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	xt := newDeviceTensor(t, b, gemvMaxTokens, k)
	if err := b.dev.CopyToDevice(xt.ptr, round16(dt, x)); err != nil {
		t.Fatal(err)
	}
	return wt.Data.(*cudaWeight), w, xt, x
}

func newDeviceTensor(t testing.TB, b *cudaBackend, rows, cols int) *cudaTensor {
	t.Helper()
	tt, err := b.NewTensor(rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return tensorOf(tt)
}

// poison fills n 32-bit words at p with NaN (float32, and two bfloat16 or float16 NaNs) and waits.
func poison(t testing.TB, b *cudaBackend, p cuda.DevicePtr, n int) {
	t.Helper()
	if err := b.dev.Fill32(p, 0x7fc07fc0, int64(n), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

func syncAndRead(t testing.TB, b *cudaBackend, p cuda.DevicePtr, n int) []float32 {
	t.Helper()
	if err := b.stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	if err := b.dev.CopyFromDevice(cuda.Bytes(out), p); err != nil {
		t.Fatal(err)
	}
	return out
}

func read16(t testing.TB, b *cudaBackend, dt weights.DType, p cuda.DevicePtr, n int) []float32 {
	t.Helper()
	if err := b.stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 2*n)
	if err := b.dev.CopyFromDevice(raw, p); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	if dt == weights.DTypeBF16 {
		dtype.DecodeBF16(out, raw)
	} else {
		dtype.DecodeF16(out, raw)
	}
	return out
}

// referenceProduct is y[r][o] = Σ x[r][i]·w[o][i] in float64, and Σ |x[r][i]·w[o][i]| (the scale of its
// rounding error), the output rows spread over the CPUs (the large shapes take billions of multiply-adds).
func referenceProduct(w, x []float32, n, k, m int) (y, scale []float64) {
	y, scale = make([]float64, m*n), make([]float64, m*n)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		wg.Go(func() {
			for o := lo; o < hi; o++ {
				wo := w[o*k : (o+1)*k]
				for r := range m {
					xr := x[r*k : (r+1)*k]
					var s, a float64
					for i, xv := range xr {
						p := float64(xv) * float64(wo[i])
						s += p
						a += math.Abs(p)
					}
					y[r*n+o], scale[r*n+o] = s, a
				}
			}
		})
	}
	wg.Wait()
	return y, scale
}

// checkProduct compares the first m rows of y [64][n] with the reference (float32 accumulation: error
// under 1e-4 of Σ|x·w|, NaN never) and requires rows m… to hold the poison still.
func checkProduct(t *testing.T, y []float32, ref, scale []float64, n, m int) {
	t.Helper()
	bad := 0
	for r := range gemvMaxTokens {
		for o := range n {
			got := y[r*n+o]
			if r >= m {
				if !math.IsNaN(float64(got)) && bad < 5 {
					t.Errorf("row %d ≥ m = %d, column %d written: %g", r, m, o, got)
					bad++
				}
				continue
			}
			want := ref[r*n+o]
			if d := math.Abs(float64(got) - want); !(d <= 1e-4*scale[r*n+o]+1e-30) && bad < 5 {
				t.Errorf("y[%d][%d] = %g, want %g (scale %g)", r, o, got, want, scale[r*n+o])
				bad++
			}
		}
	}
}

// TestCUDAGemv checks the skinny product against a float64 product of the same rounded operands, for
// bfloat16 and float16, at token counts 1…64 (every kernel variant, partial token tiles), weight heights
// that are and are not multiples of 16, launch shapes that split k over 1…16 warps (3: uneven) and group
// 1…8 row tiles a block (with blocks past the last tile), and the three loops of the one-tile kernel.
func TestCUDAGemv(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemvBackend(t, dt)
		rng := rand.New(rand.NewPCG(1, uint64(dt)))
		for _, sh := range []struct{ n, k int }{{16, 64}, {48, 128}, {509, 64}, {1000, 384}, {3072, 2048}, {2048, 8192}} {
			w, wv, x, xv := gemvOperands(t, b, dt, sh.n, sh.k, rng)
			y := newDeviceTensor(t, b, gemvMaxTokens, sh.n)
			ms := []int{1, 2, 3, 7, 8, 9, 16, 17, 31, 32, 33, 63, 64}
			if sh.n*sh.k > 1<<20 {
				ms = []int{1, 8, 33, 64}
			}
			ref, scale := referenceProduct(wv, xv, sh.n, sh.k, gemvMaxTokens)
			tunings := []gemvTuning{defaultGemvTuning, {RB: 1, KS: 1}, {RB: 4, KS: 4}, {RB: 1, KS: 16}, {RB: 8, KS: 1},
				{RB: 3, KS: 2}, {Pipe: 1}, {Pipe: 2}, {RB: 2, KS: 4, Pipe: 1}, {RB: 1, KS: 3, Pipe: 2}}
			for _, m := range ms {
				for _, tu := range tunings {
					t.Run(fmt.Sprintf("%v/%dx%d/m%d/rb%d_ks%d_p%d", dt, sh.n, sh.k, m, tu.RB, tu.KS, tu.Pipe), func(t *testing.T) {
						tu.MaxTokens = gemvMaxTokens
						b.tune = tu
						defer func() { b.tune = defaultGemvTuning }()
						poison(t, b, y.ptr, gemvMaxTokens*sh.n)
						if err := b.launchGemv(y, x, w, sh.n, sh.k, m, &gemvEpilogue{}); err != nil {
							t.Fatal(err)
						}
						got := syncAndRead(t, b, y.ptr, gemvMaxTokens*sh.n)
						// Only the first m rows of the reference count.
						checkProduct(t, got, ref, scale, sh.n, m)
					})
				}
			}
		}
	}
}

// TestCUDAGemvSwiGLU checks the SwiGLU epilogue: both halves of the product stored, and act = silu(gate)
// · up within one rounding to the dtype.
func TestCUDAGemvSwiGLU(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemvBackend(t, dt)
		rng := rand.New(rand.NewPCG(2, uint64(dt)))
		for _, inter := range []int{64, 384} {
			n, k := 2*inter, 256
			w, wv, x, xv := gemvOperands(t, b, dt, n, k, rng)
			y := newDeviceTensor(t, b, gemvMaxTokens, n)
			act := newDeviceTensor(t, b, gemvMaxTokens, inter)
			ref, scale := referenceProduct(wv, xv, n, k, gemvMaxTokens)
			for _, m := range []int{1, 5, 8, 16, 40, 64} {
				t.Run(fmt.Sprintf("%v/I%d/m%d", dt, inter, m), func(t *testing.T) {
					poison(t, b, y.ptr, gemvMaxTokens*n)
					poison(t, b, act.ptr, gemvMaxTokens*inter/2)
					if err := b.launchGemv(y, x, w, n, k, m, &gemvEpilogue{mode: gemvSwiGLU, act: act}); err != nil {
						t.Fatal(err)
					}
					checkProduct(t, syncAndRead(t, b, y.ptr, gemvMaxTokens*n), ref, scale, n, m)
					got := read16(t, b, dt, act.ptr, m*inter)
					ulp := 1.0 / 128
					if dt == weights.DTypeF16 {
						ulp = 1.0 / 1024
					}
					for r := range m {
						for i := range inter {
							g, u := ref[r*n+i], ref[r*n+inter+i]
							want := g / (1 + math.Exp(-g)) * u
							if d := math.Abs(float64(got[r*inter+i]) - want); !(d <= ulp*math.Abs(want)+1e-4) {
								t.Fatalf("act[%d][%d] = %g, want %g", r, i, got[r*inter+i], want)
							}
						}
					}
				})
			}
		}
	}
}

// TestCUDAGemvRoPE checks the RoPE epilogue against a float64 rotation of the reference product: q and k
// rotated by each token's position (HF's rotate-half), q stored in q_out, k and v at the token's slot of
// the caches, nothing stored for slot −1, and the product's rows rotated in place.
func TestCUDAGemvRoPE(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemvBackend(t, dt)
		sh := b.shape
		d, half := sh.HeadDim, sh.HeadDim/2
		n, k := sh.QKVCols(), sh.HiddenSize
		rng := rand.New(rand.NewPCG(3, uint64(dt)))
		w, wv, x, xv := gemvOperands(t, b, dt, n, k, rng)
		y := newDeviceTensor(t, b, gemvMaxTokens, n)
		ref, _ := referenceProduct(wv, xv, n, k, gemvMaxTokens)
		kvRow := sh.NumKVHeads * d
		slotsTotal := sh.NumBlocks * sh.BlockSize
		for _, m := range []int{1, 3, 8, 16, 64} {
			t.Run(fmt.Sprintf("%v/m%d", dt, m), func(t *testing.T) {
				// m single-token sequences at random positions; the last one's slot is −1 (a graph's padding row).
				s := &Step{QueryStart: []int32{0}}
				perm := rng.Perm(slotsTotal)
				for r := range m {
					pos := int32(rng.IntN(4000))
					s.Tokens = append(s.Tokens, 1)
					s.Positions = append(s.Positions, pos)
					s.SlotMapping = append(s.SlotMapping, int32(perm[r]))
					s.QueryStart = append(s.QueryStart, int32(r+1))
					s.ContextLens = append(s.ContextLens, pos+1)
					s.BlockTables = append(s.BlockTables, nil)
				}
				if m > 1 {
					s.SlotMapping[m-1] = -1
				}
				b.host = b.host[:0]
				b.st = cudaStep{s: s, offPos: 0, offSlots: m}
				b.host = append(append(b.host, s.Positions...), s.SlotMapping...)
				if err := b.ensureSlot(&b.slots[b.slot]); err != nil {
					t.Fatal(err)
				}
				if err := b.dev.Do(func() error { return b.upload(&b.slots[b.slot]) }); err != nil {
					t.Fatal(err)
				}
				poison(t, b, y.ptr, gemvMaxTokens*n)
				poison(t, b, y.qRot, gemvMaxTokens*sh.NumHeads*d/2)
				poison(t, b, b.kCache[0], slotsTotal*kvRow/2)
				poison(t, b, b.vCache[0], slotsTotal*kvRow/2)
				if err := b.launchGemv(y, x, w, n, k, m, &gemvEpilogue{mode: gemvRoPE, layer: 0}); err != nil {
					t.Fatal(err)
				}
				gotY := syncAndRead(t, b, y.ptr, m*n)
				gotQ := read16(t, b, dt, y.qRot, m*sh.NumHeads*d)
				gotK := read16(t, b, dt, b.kCache[0], slotsTotal*kvRow)
				gotV := read16(t, b, dt, b.vCache[0], slotsTotal*kvRow)
				ulp := 1.0 / 128
				if dt == weights.DTypeF16 {
					ulp = 1.0 / 1024
				}
				near := func(what string, got float32, want, tol float64) {
					t.Helper()
					if dd := math.Abs(float64(got) - want); !(dd <= tol) {
						t.Fatalf("%s = %g, want %g", what, got, want)
					}
				}
				for r := range m {
					row := make([]float64, n)
					copy(row, ref[r*n:(r+1)*n])
					for h := range sh.NumHeads + sh.NumKVHeads {
						for i := range half {
							angle := float32(sh.RopeInvFreq[i]) * float32(s.Positions[r])
							c, sn := math.Cos(float64(angle)), math.Sin(float64(angle))
							a, bb := row[h*d+i], row[h*d+i+half]
							row[h*d+i], row[h*d+i+half] = a*c-bb*sn, bb*c+a*sn
						}
					}
					for j := range n {
						near(fmt.Sprintf("qkv[%d][%d]", r, j), gotY[r*n+j], row[j], 1e-3)
					}
					for j := range sh.NumHeads * d {
						near(fmt.Sprintf("q[%d][%d]", r, j), gotQ[r*sh.NumHeads*d+j], row[j], ulp*math.Abs(row[j])+1e-3)
					}
					slot := int(s.SlotMapping[r])
					if slot < 0 {
						continue
					}
					for j := range kvRow {
						kw, vw := row[sh.NumHeads*d+j], row[(sh.NumHeads+sh.NumKVHeads)*d+j]
						near(fmt.Sprintf("k[slot %d][%d]", slot, j), gotK[slot*kvRow+j], kw, ulp*math.Abs(kw)+1e-3)
						near(fmt.Sprintf("v[slot %d][%d]", slot, j), gotV[slot*kvRow+j], vw, ulp*math.Abs(vw)+1e-3)
					}
				}
				// Slots no token owns (the padding row's included) keep the poison.
				owned := map[int]bool{}
				for _, sl := range s.SlotMapping {
					owned[int(sl)] = true
				}
				for slot := range slotsTotal {
					if !owned[slot] && !math.IsNaN(float64(gotK[slot*kvRow])) {
						t.Fatalf("k cache slot %d written", slot)
					}
				}
			})
		}
	}
}

// TestCUDAGemvArgmax checks the fused argmax (product epilogue, then ArgmaxPartials) against the host's
// pick (pickRowCPU) of the logits the same kernel wrote: random rows, and rows built to tie exactly (two
// identical weight rows in different tiles, exact sums: the first wins) with a −∞ row that must never
// win, over a vocabulary that is not a multiple of 16; and the same with a NaN row, whose logits make
// every pick NonFinitePick.
func TestCUDAGemvArgmax(t *testing.T) {
	for _, dt := range []weights.DType{weights.DTypeBF16, weights.DTypeF16} {
		b := newGemvBackend(t, dt)
		rng := rand.New(rand.NewPCG(4, uint64(dt)))
		const n, k = 1000, 128
		for _, mode := range []string{"random", "tie", "nan"} {
			tie := mode == "tie"
			w, wv, x, xv := gemvOperands(t, b, dt, n, k, rng)
			if mode != "random" {
				// Rows 37 and 700 all ones (ties), row 900 −∞ (or NaN); x positive multiples of 1/8, so
				// the sums of rows 37 and 700 are exact in any order and far above the random rows'.
				bad := float32(math.Inf(-1))
				if mode == "nan" {
					bad = float32(math.NaN())
				}
				for i := range k {
					wv[37*k+i], wv[700*k+i], wv[900*k+i] = 1, 1, bad
				}
				for i := range xv {
					xv[i] = float32(1+rng.IntN(15)) / 8
				}
				raw := round16(dt, wv)
				if err := b.dev.CopyToDevice(w.ptr, raw); err != nil {
					t.Fatal(err)
				}
				if err := b.dev.CopyToDevice(x.ptr, round16(dt, xv)); err != nil {
					t.Fatal(err)
				}
			}
			y := newDeviceTensor(t, b, gemvMaxTokens, n)
			if err := b.ensureArgmaxPartials(gemvMaxTokens * ((n + 15) / 16)); err != nil {
				t.Fatal(err)
			}
			if err := b.ensureIDs(gemvMaxTokens); err != nil {
				t.Fatal(err)
			}
			for _, m := range []int{1, 3, 8, 64} {
				t.Run(fmt.Sprintf("%v/%s/m%d", dt, mode, m), func(t *testing.T) {
					poison(t, b, y.ptr, gemvMaxTokens*n)
					if err := b.launchGemv(y, x, w, n, k, m, &gemvEpilogue{mode: gemvArgmax}); err != nil {
						t.Fatal(err)
					}
					logits := syncAndRead(t, b, y.ptr, m*n)
					checkArgmaxPartials(t, b, m, (n+15)/16, logits, n, tie)
				})
			}
		}
	}
}

// checkArgmaxPartials finishes the argmax partials a fused product left (tiles of them a row) with
// ArgmaxPartials for m rows and checks the ids against the host's greedy pick of logits [m][n]
// (pickRowCPU: NonFinitePick for a row holding NaN or +Inf); with tie, rows 37 and 700 (and others after
// 37) tie at the top and 37 must win.
func checkArgmaxPartials(t *testing.T, b *cudaBackend, m, tiles int, logits []float32, n int, tie bool) {
	t.Helper()
	p := argmaxPartialsParams{Out: b.ids, Values: b.argValues, Indices: b.argIndices, Tiles: int32(tiles)}
	if err := cuda.Launch(b.fn.argmaxPartials, cuda.Dim3{X: m}, cuda.Dim3{X: 1024}, 0, b.stream, &p); err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, m)
	if err := b.stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := b.dev.CopyFromDevice(cuda.Bytes(ids), b.ids); err != nil {
		t.Fatal(err)
	}
	for r := range m {
		row := logits[r*n : (r+1)*n]
		want := pickRowCPU(row, sampleRow{})
		if tie && want != 37 {
			t.Fatalf("row %d: the tie should make 37 the argmax, the host says %d", r, want)
		}
		if ids[r] != want {
			t.Errorf("row %d: fused argmax %d, want %d", r, ids[r], want)
		}
	}
}

// TestCUDAGemvNormFold checks an RMSNorm folded into the skinny products around it (bfloat16): the
// product before it adds its output into the residual r, writes r·w (rounded) and its per-tile sums of
// squares; the product after it, plain or with SwiGLU, scales by each token's 1/rms. Against float64:
// the new residual (1e-4 of Σ|x·w|), r·w (one rounding), the second product of the operands it read
// (1e-4 of its scale), and the unfolded definition, rmsnorm(r)·w rounded then multiplied (2e-2 of each
// row's norm: the two ways round the activations at different points). Token counts 1, 3, 8; launch
// shapes that split k over 1, 2 and the default warps, with several row tiles a block; each of the three
// loops (gemvTuning.Pipe) of both sides' kernels.
func TestCUDAGemvNormFold(t *testing.T) {
	const dt = weights.DTypeBF16
	b := newGemvBackend(t, dt)
	rng := rand.New(rand.NewPCG(5, 1))
	hidden, k1 := b.shape.HiddenSize, 384
	const eps = 1e-5
	w1, w1v, x1, x1v := gemvOperands(t, b, dt, hidden, k1, rng)
	gain := make([]float32, hidden)
	for i := range gain {
		gain[i] = float32(0.5 + rng.Float64())
	}
	gw, err := b.Upload(&weights.Tensor{Name: "gain", DType: weights.DTypeF32, Shape: []int{hidden}, Data: cuda.Bytes(gain)})
	if err != nil {
		t.Fatal(err)
	}
	res0 := make([]float32, gemvMaxTokens*hidden)
	for i := range res0 {
		res0[i] = float32(rng.NormFloat64() * 3)
	}
	res := newDeviceTensor(t, b, gemvMaxTokens, hidden)
	normed := newDeviceTensor(t, b, gemvMaxTokens, hidden)
	// Fold 0 of 2: its sums go to slot 0 (zeros before), its producer clears slot 1.
	n := &normFold{slot: 0, next: 1, dst: normed, w: gw.Data.(*cudaWeight), eps: eps, cols: hidden}
	p1, p1Scale := referenceProduct(w1v, x1v, hidden, k1, gemvMaxTokens)
	for _, tc := range []struct {
		n2     int
		swiglu bool
	}{{320, false}, {2 * 192, true}} {
		w2, w2v, _, _ := gemvOperands(t, b, dt, tc.n2, hidden, rng)
		y2 := newDeviceTensor(t, b, gemvMaxTokens, tc.n2)
		act := newDeviceTensor(t, b, gemvMaxTokens, tc.n2/2)
		for _, m := range []int{1, 3, 8} {
			for _, tu := range []gemvTuning{defaultGemvTuning, {RB: 1, KS: 1}, {RB: 3, KS: 2}, {Pipe: 1}, {Pipe: 2, RB: 2, KS: 2}} {
				t.Run(fmt.Sprintf("n%d_swiglu=%v/m%d/rb%d_ks%d_pipe%d", tc.n2, tc.swiglu, m, tu.RB, tu.KS, tu.Pipe), func(t *testing.T) {
					tu.MaxTokens = defaultGemvTuning.MaxTokens
					b.tune = tu
					defer func() { b.tune = defaultGemvTuning }()
					if err := b.dev.CopyToDevice(res.ptr, cuda.Bytes(res0)); err != nil {
						t.Fatal(err)
					}
					poison(t, b, normed.ptr, gemvMaxTokens*hidden/2)
					poison(t, b, y2.ptr, gemvMaxTokens*tc.n2)
					if err := b.dev.Fill32(b.normSlot(0), 0, 2*normMaxTokens, nil); err != nil {
						t.Fatal(err)
					}
					poison(t, b, b.normSlot(1), 2*normMaxTokens)
					if err := b.launchGemv(res, x1, w1, hidden, k1, m, &gemvEpilogue{accumulate: true, normOut: n}); err != nil {
						t.Fatal(err)
					}
					e2 := gemvEpilogue{normIn: n}
					if tc.swiglu {
						e2.mode, e2.act = gemvSwiGLU, act
					}
					if err := b.launchGemv(y2, normed, w2, tc.n2, hidden, m, &e2); err != nil {
						t.Fatal(err)
					}
					r := syncAndRead(t, b, res.ptr, gemvMaxTokens*hidden)
					next := make([]uint64, normMaxTokens)
					if err := b.dev.CopyFromDevice(cuda.Bytes(next), b.normSlot(1)); err != nil {
						t.Fatal(err)
					}
					for i, v := range next[:m] {
						if v != 0 {
							t.Errorf("the next fold's sum %d not cleared: %#x", i, v)
						}
					}
					xn := read16(t, b, dt, normed.ptr, m*hidden)
					y := syncAndRead(t, b, y2.ptr, gemvMaxTokens*tc.n2)
					for row := range m {
						var ss float64
						for i := range hidden {
							j := row*hidden + i
							want := float64(res0[j]) + p1[j]
							if d := math.Abs(float64(r[j]) - want); !(d <= 1e-4*p1Scale[j]+1e-6) {
								t.Fatalf("residual[%d][%d] = %g, want %g", row, i, r[j], want)
							}
							if d := math.Abs(float64(xn[j]) - float64(r[j])*float64(gain[i])); !(d <= math.Abs(float64(r[j]*gain[i]))/128) {
								t.Fatalf("r·w [%d][%d] = %g, want %g", row, i, xn[j], r[j]*gain[i])
							}
							ss += float64(r[j]) * float64(r[j])
						}
						inv := 1 / math.Sqrt(ss/float64(hidden)+eps)
						// What the kernel computed: its own rounded r·w times w2, scaled.
						got, scale := referenceProduct(w2v, xn[row*hidden:(row+1)*hidden], tc.n2, hidden, 1)
						// The norm as the model defines it: rmsnorm(r)·w rounded to bf16, then the product.
						def := make([]float32, hidden)
						for i := range def {
							def[i] = float32(float64(r[row*hidden+i]) * inv * float64(gain[i]))
						}
						round16(dt, def)
						want, _ := referenceProduct(w2v, def, tc.n2, hidden, 1)
						var num, den float64
						for o := range tc.n2 {
							v := float64(y[row*tc.n2+o])
							if d := math.Abs(v - got[o]*inv); !(d <= 1e-4*scale[o]*inv+1e-6) {
								t.Fatalf("y[%d][%d] = %g, want %g", row, o, v, got[o]*inv)
							}
							num += (v - want[o]) * (v - want[o])
							den += want[o] * want[o]
						}
						if e := math.Sqrt(num / den); !(e < 2e-2) {
							t.Errorf("row %d: relative error %.3g against the unfolded norm", row, e)
						}
					}
					for i := m * tc.n2; i < gemvMaxTokens*tc.n2; i++ {
						if !math.IsNaN(float64(y[i])) {
							t.Fatalf("y row %d ≥ m written", i/tc.n2)
						}
					}
				})
			}
		}
	}
}

// gemvBenchShapes are the weight matrices of a decode step of Llama-3.2-1B and Llama-3-8B, and
// Qwen2.5-7B's gate/up and down products (out × in).
var gemvBenchShapes = []struct {
	name string
	n, k int
}{
	{"1b-qkv", 3072, 2048}, {"1b-o", 2048, 2048}, {"1b-gateup", 16384, 2048}, {"1b-down", 2048, 8192},
	{"1b-lmhead", 128256, 2048},
	{"8b-qkv", 6144, 4096}, {"8b-o", 4096, 4096}, {"8b-gateup", 28672, 4096}, {"8b-down", 4096, 14336},
	{"8b-lmhead", 128256, 4096},
	{"q7b-gateup", 37888, 3584}, {"q7b-down", 3584, 18944}, // Qwen2.5-7B's: a long k, blocks past one wave
}

// deviceMicros returns the device time of one call of launch (µs), the mean of reps calls queued behind a
// spin kernel from the context's owner goroutine (so that the host's launch cost stays out of it), the
// best of three such runs.
func deviceMicros(b *cudaBackend, reps int, launch func(i int) error) (float64, error) {
	start, err := b.dev.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := b.dev.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	best := math.Inf(1)
	for range 3 {
		spin := struct{ NS uint64 }{uint64(reps) * 15_000}
		if err := cuda.Launch(b.gemv.spin, cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, b.stream, &spin); err != nil {
			return 0, err
		}
		if err := start.Record(b.stream); err != nil {
			return 0, err
		}
		// Queued from the owner goroutine of the context: no hop per launch, so the host stays ahead.
		err := b.dev.Do(func() error {
			for i := range reps {
				if err := launch(i); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		if err := end.Record(b.stream); err != nil {
			return 0, err
		}
		if err := end.Synchronize(); err != nil {
			return 0, err
		}
		ms, err := start.Elapsed(end)
		if err != nil {
			return 0, err
		}
		best = math.Min(best, ms*1e3/float64(reps))
	}
	return best, nil
}

// rotatingWeights uploads copies of one random bf16 [n][k] weight (of modest exponents) totalling at least
// 256 MB (L2 is 50 MB), for benchmarks that rotate through them so that every launch reads its weights
// from memory; it returns them and one copy's bytes.
func rotatingWeights(bb *testing.B, b *cudaBackend, n, k int, rng *rand.Rand) ([]*cudaWeight, int64) {
	bytes := int64(n) * int64(k) * 2
	ws := make([]*cudaWeight, int(max(2, (256<<20+bytes-1)/bytes)))
	raw := make([]byte, bytes)
	for i := range raw {
		raw[i] = byte(rng.IntN(256)) & 0xbf
	}
	for i := range ws {
		w, err := b.Upload(&weights.Tensor{Name: "w", DType: weights.DTypeBF16, Shape: []int{n, k}, Data: raw})
		if err != nil {
			bb.Fatal(err)
		}
		ws[i] = w.Data.(*cudaWeight)
	}
	return ws, bytes
}

// cublasMicros is deviceMicros of cuBLAS GemmEx computing y[m][n] = x · wᵀ (float32 out), rotating
// through ws.
func cublasMicros(b *cudaBackend, reps int, ws []*cudaWeight, x, y *cudaTensor, n, k, m int) (float64, error) {
	return deviceMicros(b, reps, func(i int) error {
		return b.blas.GemmEx(cuda.Trans, cuda.NoTrans, n, m, k, 1, ws[i%len(ws)].ptr, b.dtype, k, x.ptr, b.dtype, k, 0,
			y.ptr, cuda.Float32, n)
	})
}

// BenchmarkCUDAGemv times the decode products of Llama-3.2-1B and Llama-3-8B (bf16) at 1 to 64 token
// rows: cuBLAS GemmEx, the skinny kernel as planned, and the best launch shape of a sweep over rb × ks.
// Weights rotate among copies totalling ≥ 256 MB (L2 is 50 MB). %BW is weight bytes / time / the copy
// bandwidth (copyBandwidth: measured).
//
//	go test -tags cuda -run XXX -bench CUDAGemv -benchtime 1x ./model
func BenchmarkCUDAGemv(bb *testing.B) {
	b := newGemvBackend(bb, weights.DTypeBF16)
	bw := copyBandwidth(bb)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sh := range gemvBenchShapes {
		ws, bytes := rotatingWeights(bb, b, sh.n, sh.k, rng)
		copies := len(ws)
		x := newDeviceTensor(bb, b, gemvMaxTokens, sh.k)
		y := newDeviceTensor(bb, b, gemvMaxTokens, sh.n)
		for _, m := range []int{1, 8, 16, 64} {
			bb.Run(fmt.Sprintf("%s-%dx%d/m=%d", sh.name, sh.n, sh.k, m), func(bb *testing.B) {
				reps := 100
				pct := func(us float64) float64 { return 100 * float64(bytes) / (us * 1e-6) / bw }
				var cublasUS, gemvUS float64
				var err error
				for bb.Loop() {
					cublasUS, err = cublasMicros(b, reps, ws, x, y, sh.n, sh.k, m)
					if err != nil {
						bb.Fatal(err)
					}
					b.tune = gemvTuning{MaxTokens: gemvMaxTokens} // as planned, without PDL (as the sweep)
					gemvUS, err = deviceMicros(b, reps, func(i int) error {
						return b.launchGemv(y, x, ws[i%copies], sh.n, sh.k, m, &gemvEpilogue{})
					})
					b.tune = defaultGemvTuning
					if err != nil {
						bb.Fatal(err)
					}
				}
				type point struct {
					rb, ks int
					us     float64
				}
				var sweep []point
				maxWarps := b.gemv.maxWarps[gemvTileIndex(m)]
				for _, rb := range []int{1, 2, 4, 8} {
					for _, ks := range []int{1, 2, 4, 8, 16} {
						if rb*ks > maxWarps || ks > sh.k/64 {
							continue
						}
						b.tune = gemvTuning{MaxTokens: gemvMaxTokens, RB: rb, KS: ks}
						us, err := deviceMicros(b, reps, func(i int) error {
							return b.launchGemv(y, x, ws[i%copies], sh.n, sh.k, m, &gemvEpilogue{})
						})
						b.tune = defaultGemvTuning
						if err != nil {
							bb.Fatal(err)
						}
						sweep = append(sweep, point{rb, ks, us})
					}
				}
				sort.Slice(sweep, func(i, j int) bool { return sweep[i].us < sweep[j].us })
				plan := planGemv((sh.n+15)/16, sh.k/64, b.dev.Info().NumSMs, maxWarps, defaultGemvTuning)
				bb.ReportMetric(cublasUS, "cublas-us")
				bb.ReportMetric(pct(cublasUS), "cublas-%BW")
				bb.ReportMetric(gemvUS, "gemv-us")
				bb.ReportMetric(pct(gemvUS), "gemv-%BW")
				bb.ReportMetric(float64(plan.rb*100+plan.ks), "plan-rb*100+ks")
				bb.ReportMetric(sweep[0].us, "best-us")
				bb.ReportMetric(pct(sweep[0].us), "best-%BW")
				bb.ReportMetric(float64(sweep[0].rb*100+sweep[0].ks), "best-rb*100+ks")
				top := ""
				for i := range min(4, len(sweep)) {
					top += fmt.Sprintf(" rb%d/ks%d %.1fµs", sweep[i].rb, sweep[i].ks, sweep[i].us)
				}
				plans := ""
				for rule := range 3 {
					pl := planGemv((sh.n+15)/16, sh.k/64, b.dev.Info().NumSMs, maxWarps, gemvTuning{Plan: rule})
					for _, pt := range sweep {
						if pt.rb == pl.rb && pt.ks == pl.ks {
							plans += fmt.Sprintf(" plan%d rb%d/ks%d %.1fµs (%.0f%%)", rule, pl.rb, pl.ks, pt.us, pct(pt.us))
						}
					}
				}
				bb.Logf("%s m=%d: cublas %.1fµs (%.0f%%), gemv %.1fµs (%.0f%%);%s; best:%s", sh.name, m,
					cublasUS, pct(cublasUS), gemvUS, pct(gemvUS), plans, top)
			})
		}
	}
}
