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
// random masks (one token allowed, a few, half, all but one, a few in the first and last words; some
// rows unmasked) and parameters (greedy and sampled, with top-k, top-p and min-p), and compares each
// pick and kept-set size with the CPU twin: the pick of the unmasked algorithm over the row after
// MaskLogits. The kernel reads the mask beside the logits and skips what it leaves out, so the kept
// sizes check that every filter's pass skipped the same tokens. Greedy picks must be equal; draws
// equal except where float rounding of the mass sums decides (as TestCUDASampleMatchesTwin). A row with
// NaN or +Inf where its mask leaves the token out is still NonFinitePick, as on the host. Every pick
// lies in its mask.
func TestCUDAMaskedPickMatchesTwin(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	const cols, rowsPerRound = 128256, 64
	rng := rand.New(rand.NewPCG(31, 32))
	var equal, near, keptNear, rowsSeen int
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
			switch r % 8 {
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
			case 6:
				p.Mask = randomMask(rng, cols, 0.3, keep)
				for id := range cols { // +Inf where the mask leaves the token out
					if p.Mask[id/64]&(1<<(id%64)) == 0 {
						rows[r][id] = float32(math.Inf(1))
						break
					}
				}
			case 7:
				p.Mask = make([]uint64, maskWords(cols)) // a few tokens of the first and last words
				p.Mask[0] = rng.Uint64() | 1<<63
				p.Mask[len(p.Mask)-1] = rng.Uint64() | 1<<(uint(cols-1)%64)
			}
			params[r] = p
		}
		ids, kept := sampleOnDevice(t, b, dev, rows, params)
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
			if r%8 == 5 || r%8 == 6 {
				if ids[r] != NonFinitePick || want != NonFinitePick || kept[r] != 0 {
					t.Errorf("round %d row %d: a NaN or +Inf the mask leaves out: device %d (kept %d), twin %d, want NonFinitePick",
						round, r, ids[r], kept[r], want)
				}
				continue
			}
			if wantKept := len(KeptTokens(masked, q)); int(kept[r]) != wantKept {
				if !topPNearTie(masked, q, 1e-4) {
					t.Errorf("round %d row %d %+v: device kept %d tokens, twin %d", round, r, q, kept[r], wantKept)
				}
				keptNear++
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
	t.Logf("%d rows of %d logits: %d picks equal to the twin's, %d differ at float near-ties; %d kept-set sizes differ at top-p near-ties",
		rowsSeen, cols, equal, near, keptNear)
	if near > rowsSeen/50 {
		t.Errorf("%d of %d picks differ from the twin", near, rowsSeen)
	}
}

// TestCUDAMaskedPickTies checks the masked pick on hand-made rows of 5000 logits (a last mask word of 8
// tokens), against stated picks and kept sets and against the CPU twin (MaskLogits, then the unmasked
// pick): equal best values of which the mask leaves some out (the argmax and the top-k and top-p cuts
// through the ties take the lowest allowed indices), a token in the last word alone, allowed tokens
// that are all −∞ (the argmax's rule for a row of −∞: token 0, as on the host), a −∞ among the allowed
// tokens (never drawn), and a NaN or +Inf the mask leaves out (NonFinitePick).
func TestCUDAMaskedPickTies(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	const cols = 5000
	ties := []int{4000, 17, 2500, 999, 3001} // equal best values
	allow := func(ids ...int) []uint64 {
		mask := make([]uint64, maskWords(cols))
		for _, id := range ids {
			mask[id/64] |= 1 << (id % 64)
		}
		return mask
	}
	allBut := func(ids ...int) []uint64 {
		mask := make([]uint64, maskWords(cols))
		for id := range cols {
			if !slices.Contains(ids, id) {
				mask[id/64] |= 1 << (id % 64)
			}
		}
		return mask
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := []struct {
		name   string
		p      SampleParams
		set    map[int]float32 // logits changed from the base row
		want   int32           // -2: a draw, checked against the twin and its kept set
		kept   int32
		inMask bool // the pick must lie in the mask
	}{
		{"greedy ties, the lowest left out", SampleParams{Mask: allBut(17, 2500)}, nil, 999, 1, true},
		{"top-k 2 through ties", SampleParams{Temperature: 1, TopK: 2, Seed: 1, Mask: allBut(17, 2500)}, nil, -2, 2, true},
		{"top-p 0.5 through ties", SampleParams{Temperature: 1, TopP: 0.5, Seed: 2, Mask: allBut(17, 2500)}, nil, -2, 2, true},
		{"ties only, temperature", SampleParams{Temperature: 1, Seed: 3, Step: 4, Mask: allow(2500, 3001, 4000)}, nil, -2, 3, true},
		{"last word alone, greedy", SampleParams{Mask: allow(0, cols-1)}, map[int]float32{cols - 1: 5, 0: -30}, cols - 1, 1, true},
		{"last word, temperature", SampleParams{Temperature: 1, Seed: 5, Mask: allow(cols - 1)}, nil, cols - 1, 1, true},
		{"allowed all -Inf, greedy", SampleParams{Mask: allow(100, 200)},
			map[int]float32{100: float32(math.Inf(-1)), 200: float32(math.Inf(-1))}, 0, 1, false},
		{"allowed all -Inf, temperature", SampleParams{Temperature: 1, Seed: 6, Mask: allow(100, 200)},
			map[int]float32{100: float32(math.Inf(-1)), 200: float32(math.Inf(-1))}, 0, 1, false},
		{"a -Inf among the allowed", SampleParams{Temperature: 1, Seed: 7, Mask: allow(999, 1000, 1001)},
			map[int]float32{1000: float32(math.Inf(-1)), 1001: -21}, -2, 2, true},
		{"+Inf left out, greedy", SampleParams{Mask: allBut(17)}, map[int]float32{17: inf}, NonFinitePick, 0, false},
		{"NaN left out, temperature", SampleParams{Temperature: 1, Seed: 8, Mask: allow(999)}, map[int]float32{2500: nan}, NonFinitePick, 0, false},
		{"unmasked beside them", SampleParams{Temperature: 1, TopK: 2, Seed: 9}, nil, -2, 2, false},
	}
	rows := make([][]float32, len(cases))
	params := make([]SampleParams, len(cases))
	for r, c := range cases {
		rows[r] = make([]float32, cols)
		for i := range rows[r] {
			rows[r][i] = -20 - float32(i%7)
		}
		for _, i := range ties {
			rows[r][i] = 3
		}
		for i, v := range c.set {
			rows[r][i] = v
		}
		params[r] = c.p
	}
	ids, kept := sampleOnDevice(t, b, dev, rows, params)
	for r, c := range cases {
		masked := slices.Clone(rows[r])
		if c.p.Mask != nil {
			MaskLogits(masked, c.p.Mask)
		}
		q := c.p
		q.Mask = nil
		twin, twinKept := SampleLogits(masked, q), KeptTokens(masked, q)
		if ids[r] != twin || (c.want != -2 && ids[r] != c.want) {
			t.Errorf("%s: device picked %d, twin %d, want %d", c.name, ids[r], twin, c.want)
		}
		if kept[r] != c.kept || (c.want != NonFinitePick && int32(len(twinKept)) != c.kept) {
			t.Errorf("%s: device kept %d, twin %v, want %d", c.name, kept[r], twinKept, c.kept)
		}
		if c.want != NonFinitePick && !slices.Contains(twinKept, ids[r]) {
			t.Errorf("%s: device picked %d, not in the twin's kept set %v", c.name, ids[r], twinKept)
		}
		if c.inMask && (ids[r] < 0 || c.p.Mask[ids[r]/64]&(1<<(ids[r]%64)) == 0) {
			t.Errorf("%s: picked %d outside its mask", c.name, ids[r])
		}
	}
}

// BenchmarkCUDAMaskedPick times the pick of rows of a Llama-3-sized vocabulary with every row masked
// against the same pick unmasked: greedy and sampled, at 1 and 64 rows, masks allowing half the
// vocabulary ("+mask") or a few hundred tokens ("+sparse", the share of a JSON grammar's typical step).
// The difference is the masks' staging and upload, and the kernel's reads of them: a dense mask costs
// its bitset's reads, a sparse one saves the reads of the logits it leaves out after the first pass.
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
		if err := dev.CopyToDevice(tensorOf(logits).ptr, cuda.Bytes(slices.Concat(rows...))); err != nil {
			bm.Fatal(err)
		}
		masks := map[string][][]uint64{"+mask": make([][]uint64, nrows), "+sparse": make([][]uint64, nrows)}
		for r := range nrows {
			masks["+mask"][r] = randomMask(rng, cols, 0.5, 0)
			masks["+sparse"][r] = randomMask(rng, cols, 300.0/cols, 0)
		}
		ids := make([]int32, nrows)
		st := newPager(8, 16, newRand(1)).step(chunk{0, []int32{1}})
		for _, temp := range []float64{0, 0.8} {
			for _, kind := range []string{"", "+mask", "+sparse"} {
				name := "greedy"
				if temp > 0 {
					name = "temperature"
				}
				name += kind
				params := make([]SampleParams, nrows)
				for i := range params {
					params[i] = SampleParams{Temperature: temp, Seed: uint64(i)}
					if kind != "" {
						params[i].Mask = masks[kind][i]
					}
				}
				bm.Run(name+"/rows="+strconv.Itoa(nrows), func(bm *testing.B) {
					for i := 0; bm.Loop(); i++ {
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
