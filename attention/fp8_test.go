package attention

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gollm/gollm/internal/dtype"
)

// fp8Twins returns, for the float32 cache of f, an FP8 cache holding its values quantized with scales
// ks and vs (e4m3(x/scale), saturating) and a float32 cache holding what the FP8 one reads back
// (float32(e4m3) · scale), and a copy of f whose logical K/V are those dequantized values, for the
// dense reference. NaN poison stays NaN in both caches.
func fp8Twins(f *fixture, ks, vs float32) (fp8, deq *Cache, fq *fixture) {
	c := f.cache
	fp8 = NewFP8Cache(c.NumBlocks, c.BlockSize, c.NumKVHeads, c.HeadDim).WithScales(ks, vs)
	deq = NewCache(c.NumBlocks, c.BlockSize, c.NumKVHeads, c.HeadDim)
	for i := range c.K {
		fp8.K8[i] = dtype.F32ToE4M3Sat(c.K[i] / ks)
		fp8.V8[i] = dtype.F32ToE4M3Sat(c.V[i] / vs)
		deq.K[i] = dtype.E4M3ToF32(fp8.K8[i]) * ks
		deq.V[i] = dtype.E4M3ToF32(fp8.V8[i]) * vs
	}
	q := *f
	q.keys, q.values = nil, nil
	for s := range f.keys {
		k, v := make([]float32, len(f.keys[s])), make([]float32, len(f.values[s]))
		for i := range k {
			k[i] = dtype.E4M3ToF32(dtype.F32ToE4M3Sat(f.keys[s][i]/ks)) * ks
			v[i] = dtype.E4M3ToF32(dtype.F32ToE4M3Sat(f.values[s][i]/vs)) * vs
		}
		q.keys, q.values = append(q.keys, k), append(q.values, v)
	}
	return fp8, deq, &q
}

// checkSame fails unless a and b are equal bit for bit (NaN included).
func checkSame(t *testing.T, what string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: element %d: FP8 cache gives %v, the dequantized float32 cache %v", what, i, a[i], b[i])
		}
	}
}

// TestFP8Attention runs every path (prefill chunks, decode grouped and split-k, forced and planned, on
// one worker and many, and sliding windows) over an FP8 cache and checks that it computes exactly what
// the same path computes over a float32 cache holding the dequantized values, and that both match the
// float64 reference over those values. The scales put the keys' and values' magnitudes across e4m3's
// range (subnormals included), and a window poisons and unlists the pages behind it.
func TestFP8Attention(t *testing.T) {
	for _, sh := range []struct{ group, kvHeads, headDim, blockSize int }{{1, 2, 64, 16}, {4, 2, 128, 8}, {8, 1, 64, 32}} {
		for _, window := range []int{0, 1, sh.blockSize + 3} {
			name := fmt.Sprintf("g%d_kv%d_d%d_page%d_window%d", sh.group, sh.kvHeads, sh.headDim, sh.blockSize, window)
			t.Run(name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(sh.group), uint64(window+sh.blockSize)))
				specs := mixedBatch(rng, sh.blockSize)
				if window > 0 {
					specs = windowBatch(window, sh.blockSize)
				}
				f := newFixture(t, rng, sh.group, sh.kvHeads, sh.headDim, sh.blockSize, 0.3, specs)
				if window > 0 {
					f.slide(window)
				}
				// |x| < 1: K scaled by 1/448 uses the whole range, V by 1/64 leaves large codes unused and
				// puts small values among the subnormals.
				fp8, deq, fq := fp8Twins(f, 1.0/448, 1.0/64)
				ref := fq.reference()
				maxSpan := 0
				for _, s := range specs {
					maxSpan = max(maxSpan, s.ctx)
				}
				plans := []*DecodePlan{nil, {Kernel: Grouped, NumPartitions: 1},
					{Kernel: SplitK, PartitionTokens: 2 * sh.blockSize, NumPartitions: ceilDiv(maxSpan, 2*sh.blockSize)}}
				for _, workers := range []int{1, 16} {
					for _, plan := range plans {
						a, b := f.poisonedOutput(), f.poisonedOutput()
						got := attend(a, f.q, f.numHeads, f.scale, fp8, f.batch, workers, plan)
						attend(b, f.q, f.numHeads, f.scale, deq, f.batch, workers, &got)
						what := fmt.Sprintf("%d workers, plan %+v", workers, got)
						checkSame(t, what, a, b)
						checkClose(t, what, a, ref)
					}
				}
				// The public decode entry points, on the decode rows alone.
				if window == 0 {
					var tables [][]int32
					var lens []int32
					var q []float32
					row := f.numHeads * f.headDim
					for s, spec := range specs {
						if spec.qlen == 1 {
							tables, lens = append(tables, f.batch.BlockTables[s]), append(lens, int32(spec.ctx))
							r := int(f.batch.QueryStart[s])
							q = append(q, f.q[r*row:(r+1)*row]...)
						}
					}
					a, b := make([]float32, len(q)), make([]float32, len(q))
					DecodeGrouped(a, q, f.numHeads, f.scale, fp8, tables, lens)
					DecodeGrouped(b, q, f.numHeads, f.scale, deq, tables, lens)
					checkSame(t, "DecodeGrouped", a, b)
					DecodeSplitK(a, q, f.numHeads, f.scale, fp8, tables, lens, sh.blockSize)
					DecodeSplitK(b, q, f.numHeads, f.scale, deq, tables, lens, sh.blockSize)
					checkSame(t, "DecodeSplitK", a, b)
				}
			})
		}
	}
}

// TestFP8AttentionError measures what FP8 K/V cost against the float32 cache on the same inputs (per
// tensor scales from the data's maximum, as a calibrated checkpoint's k_scale and v_scale): the
// relative error of the attention output stays a few percent, the size of e4m3's rounding (2^-4).
func TestFP8AttentionError(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	f := newFixture(t, rng, 4, 2, 128, 16, 1/float32(math.Sqrt(128)), mixedBatch(rng, 16))
	fp8, _, _ := fp8Twins(f, 1.0/448, 1.0/448) // |x| < 1
	out := f.poisonedOutput()
	Attend(out, f.q, f.numHeads, f.scale, fp8, f.batch)
	checkCloseTol(t, "FP8 against the float32 reference", out, f.reference(), 0.05)
}

// TestFP8CacheWrite checks the KV write of an FP8 cache: each element stored as e4m3(x / scale),
// rounded to nearest even and saturated (values beyond 448 × scale become ±448), NaN kept NaN,
// padding slots skipped; and that a view with other scales shares the pages.
func TestFP8CacheWrite(t *testing.T) {
	base := NewFP8Cache(4, 8, 2, 4)
	c := base.WithScales(0.5, 2)
	row := c.NumKVHeads * c.HeadDim
	k := make([]float32, 3*row)
	v := make([]float32, 3*row)
	for i := range k {
		k[i] = float32(i+1) * 0.37
		v[i] = -float32(i+1) * 23
	}
	k[0], v[1] = float32(math.NaN()), 5000
	c.Write(k, v, []int32{17, -1, 3})
	for _, w := range []struct{ token, slot int }{{0, 17}, {2, 3}} {
		for i := range row {
			x := w.token*row + i
			if got, want := base.K8[w.slot*row+i], dtype.F32ToE4M3Sat(k[x]/0.5); got != want {
				t.Errorf("K code at slot %d element %d: %#02x, want %#02x", w.slot, i, got, want)
			}
			if got, want := base.V8[w.slot*row+i], dtype.F32ToE4M3Sat(v[x]/2); got != want {
				t.Errorf("V code at slot %d element %d: %#02x, want %#02x", w.slot, i, got, want)
			}
		}
	}
	if got := base.K8[17*row]; got != 0x7F {
		t.Errorf("NaN stored as %#02x", got)
	}
	if got := dtype.E4M3ToF32(base.V8[17*row+1]) * 2; got != 896 {
		t.Errorf("5000 with scale 2 reads back as %v, want the saturated 448 × 2", got)
	}
	for i := range row {
		if base.K8[1*row+i] != 0 {
			t.Fatal("the padding token was written")
		}
	}
	if base.KScale != 1 || base.VScale != 1 || base.ElementSize() != 1 || !base.FP8() {
		t.Errorf("base cache: scales %v %v, element size %d", base.KScale, base.VScale, base.ElementSize())
	}
	for _, bad := range [][2]float32{{0, 1}, {1, -1}, {float32(math.NaN()), 1}, {1, float32(math.Inf(1))}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("WithScales(%v, %v) did not panic", bad[0], bad[1])
				}
			}()
			base.WithScales(bad[0], bad[1])
		}()
	}
}
