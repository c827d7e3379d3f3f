//go:build cuda

package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
)

// randomMask allows each of cols tokens with probability density, and always token keep.
func randomMask(rng *rand.Rand, cols int, density float64, keep int) []uint64 {
	mask := make([]uint64, maskWords(cols))
	for id := range cols {
		if id == keep || rng.Float64() < density {
			mask[id/64] |= 1 << (id % 64)
		}
	}
	return mask
}

// TestCUDAMaskedPickMatchesTwin picks on the device from random rows of a Llama-3-sized vocabulary under
// random masks (one token allowed, a few, half, all but one; some rows unmasked) and parameters (greedy
// and sampled), and compares each pick with the CPU twin: the pick of the unmasked algorithm over the
// row after MaskLogits. Greedy picks must be equal; draws equal except where float rounding of the mass
// sums decides (as TestCUDASampleMatchesTwin). A row with NaN where its mask leaves the token out is
// still NonFinitePick, as on the host. Every pick lies in its mask.
func TestCUDAMaskedPickMatchesTwin(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	const cols, rowsPerRound = 128256, 64
	rng := rand.New(rand.NewPCG(31, 32))
	var equal, near, rowsSeen int
	for round := range 4 {
		rows := make([][]float32, rowsPerRound)
		params := make([]SampleParams, rowsPerRound)
		for r := range rows {
			rows[r] = randomLogits(rng, cols, []float64{0.5, 2, 5}[rng.IntN(3)], false)
			p := randomSampleParams(rng, cols)
			if r%3 == 0 {
				p.Temperature = 0 // greedy
			}
			keep := rng.IntN(cols)
			switch r % 6 {
			case 0:
				p.Mask = randomMask(rng, cols, 0, keep) // one token
			case 1:
				p.Mask = randomMask(rng, cols, 0.001, keep)
			case 2:
				p.Mask = randomMask(rng, cols, 0.5, keep)
			case 3:
				p.Mask = randomMask(rng, cols, 1, keep)
				best := int(Argmax(rows[r]))
				p.Mask[best/64] &^= 1 << (best % 64) // all but the best
			case 4: // unmasked
			case 5:
				p.Mask = randomMask(rng, cols, 0.01, keep)
				for id := range cols { // NaN where the mask leaves the token out
					if p.Mask[id/64]&(1<<(id%64)) == 0 {
						rows[r][id] = float32(math.NaN())
						break
					}
				}
			}
			params[r] = p
		}
		ids, _ := sampleOnDevice(t, b, dev, rows, params)
		for r, x := range rows {
			p := params[r]
			rowsSeen++
			masked := slices.Clone(x)
			if p.Mask != nil {
				MaskLogits(masked, p.Mask)
			}
			q := p
			q.Mask = nil
			want := SampleLogits(masked, q)
			if r%6 == 5 {
				if ids[r] != NonFinitePick || want != NonFinitePick {
					t.Errorf("round %d row %d: a NaN the mask leaves out: device %d, twin %d, want NonFinitePick", round, r, ids[r], want)
				}
				continue
			}
			if p.Mask != nil && (ids[r] < 0 || p.Mask[ids[r]/64]&(1<<(ids[r]%64)) == 0) {
				t.Errorf("round %d row %d: picked %d outside its mask", round, r, ids[r])
			}
			if ids[r] == want {
				equal++
				continue
			}
			lo, hi, ok := cdfInterval(masked, q, ids[r])
			u := float64(sampleUniform(p.Seed, p.Step))
			if q.Temperature < sampleGreedyEpsilon || !ok || u < lo-1e-4 || u > hi+1e-4 {
				t.Errorf("round %d row %d %+v: device picked %d (kept %v, CDF [%.6f, %.6f]), twin %d, u %.6f", round, r, q, ids[r], ok, lo, hi, want, u)
			}
			near++
		}
	}
	t.Logf("%d rows of %d logits: %d picks equal to the twin's, %d differ at float near-ties", rowsSeen, cols, equal, near)
	if near > rowsSeen/50 {
		t.Errorf("%d of %d picks differ from the twin", near, rowsSeen)
	}
}

// BenchmarkCUDAMaskedPick times the pick of rows of a Llama-3-sized vocabulary with every row masked
// (half the vocabulary allowed) against the same pick unmasked: greedy and sampled, at 1 and 64 rows.
// The difference is the masks' upload and MaskRows.
func BenchmarkCUDAMaskedPick(bm *testing.B) {
	m, b, dev := sampleTestBackend(bm)
	defer m.Close()
	const cols = 128256
	rng := rand.New(rand.NewPCG(5, 6))
	for _, nrows := range []int{1, 64} {
		rows := make([][]float32, nrows)
		for r := range rows {
			rows[r] = randomLogits(rng, cols, 3, false)
		}
		logits, err := b.NewTensor(nrows, cols)
		if err != nil {
			bm.Fatal(err)
		}
		flat := slices.Concat(rows...)
		masks := make([][]uint64, nrows)
		for r := range masks {
			masks[r] = randomMask(rng, cols, 0.5, 0)
		}
		ids := make([]int32, nrows)
		st := newPager(8, 16, newRand(1)).step(chunk{0, []int32{1}})
		for _, temp := range []float64{0, 0.8} {
			for _, withMask := range []bool{false, true} {
				name := "greedy"
				if temp > 0 {
					name = "temperature"
				}
				if withMask {
					name += "+mask"
				}
				params := make([]SampleParams, nrows)
				for i := range params {
					params[i] = SampleParams{Temperature: temp, Seed: uint64(i)}
					if withMask {
						params[i].Mask = masks[i]
					}
				}
				bm.Run(name+"/rows="+strconv.Itoa(nrows), func(bm *testing.B) {
					for i := 0; bm.Loop(); i++ {
						bm.StopTimer()
						// The mask writes the logits in place: restore them (untimed).
						if err := dev.CopyToDevice(tensorOf(logits).ptr, cuda.Bytes(flat)); err != nil {
							bm.Fatal(err)
						}
						bm.StartTimer()
						for j := range params {
							params[j].Step = uint64(i)
						}
						if err := b.BeginStep(st); err != nil {
							bm.Fatal(err)
						}
						if err := b.SampleToHost(ids, logits, params); err != nil {
							bm.Fatal(err)
						}
					}
				})
			}
		}
	}
}
