//go:build cuda

package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
)

// sampleTestBackend returns a float32 CUDA backend of a tiny model, for writing logits rows directly.
func sampleTestBackend(t testing.TB) (*Model, *cudaBackend, *cuda.Device) {
	dev := gpuDevice(t)
	cfg := cudaReferenceConfig(64)
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	m, err := load(cfg, r.get, Options{NumBlocks: 8, BlockSize: 16}, func(s Shape) (Backend, error) {
		return newCUDABackend(s, cudaConfig{dtype: weights.DTypeF32, dev: dev})
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, m.backend.(*cudaBackend), dev
}

// sampleOnDevice writes rows into a logits tensor and runs SampleToHost over them; it returns the picks
// and the kernel's kept-set sizes.
func sampleOnDevice(t testing.TB, b *cudaBackend, dev *cuda.Device, rows [][]float32, params []SampleParams) ([]int32, []int32) {
	t.Helper()
	cols := len(rows[0])
	logits, err := b.NewTensor(len(rows), cols)
	if err != nil {
		t.Fatal(err)
	}
	flat := slices.Concat(rows...)
	if err := dev.CopyToDevice(tensorOf(logits).ptr, cuda.Bytes(flat)); err != nil {
		t.Fatal(err)
	}
	if b.sampleKept == 0 {
		if b.sampleKept, err = dev.Alloc(4 * 1024); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = dev.Free(b.sampleKept); b.sampleKept = 0 })
	}
	poison := make([]int32, len(rows))
	for i := range poison {
		poison[i] = -7
	}
	if err := dev.CopyToDevice(b.sampleKept, cuda.Bytes(poison)); err != nil {
		t.Fatal(err)
	}
	p := newPager(8, 16, newRand(1))
	if err := b.BeginStep(p.step(chunk{0, []int32{1}})); err != nil {
		t.Fatal(err)
	}
	ids := slices.Clone(poison)
	if err := b.SampleToHost(ids, logits, params); err != nil {
		t.Fatal(err)
	}
	kept := make([]int32, len(rows))
	if err := dev.CopyFromDevice(cuda.Bytes(kept), b.sampleKept); err != nil {
		t.Fatal(err)
	}
	return ids, kept
}

// cdfInterval returns where token tok's slice of the kept mass lies in [0, 1] (vocabulary order), in
// float64, from the CPU twin's kept set; ok is false when tok is not kept.
func cdfInterval(x []float32, p SampleParams, tok int32) (lo, hi float64, ok bool) {
	r := prepareSample(p)
	st := sampleState{x: x, r: r, max: float32(math.Inf(-1))}
	for _, v := range x {
		if v > st.max {
			st.max = v
		}
	}
	total := 0.0
	c := st.cut()
	st.kept(c, func(i int, w float32) {
		if int32(i) == tok {
			lo, hi, ok = total, total+float64(w), true
		}
		total += float64(w)
	})
	return lo / total, hi / total, ok
}

// topPNearTie reports whether the twin's top-p boundary under p lies within rel of a token's edge: a
// kept-set size there may differ by float rounding of the mass sums.
func topPNearTie(x []float32, p SampleParams, rel float64) bool {
	if !(p.TopP > 0 && p.TopP < 1) {
		return false
	}
	q := p
	q.TopP = 0
	ids := KeptTokens(x, q)
	mx := slices.Max(x)
	w := make([]float64, len(ids))
	total := 0.0
	for i, id := range ids {
		w[i] = math.Exp((float64(x[id]) - float64(mx)) / p.Temperature)
		total += w[i]
	}
	sort.Float64s(w)
	slices.Reverse(w)
	target, cum := p.TopP*total, 0.0
	for _, v := range w {
		if math.Abs(cum-target) <= rel*total {
			return true
		}
		cum += v
	}
	return false
}

// TestCUDASampleMatchesTwin draws on the device from random rows of a Llama-3-sized vocabulary under
// random parameters and compares each pick and kept-set size with the CPU twin: they must agree except
// where float rounding of the mass sums decides (the uniform within 1e-4 of the pick's CDF slice, or a
// top-p boundary within 1e-4 of a token's edge).
func TestCUDASampleMatchesTwin(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	const cols, rowsPerRound = 128256, 64
	rng := rand.New(rand.NewPCG(11, 12))
	var picks, pickNear, keptNear, rowsSeen int
	for round := range 4 {
		rows := make([][]float32, rowsPerRound)
		params := make([]SampleParams, rowsPerRound)
		for r := range rows {
			spread := []float64{0.5, 2, 5}[rng.IntN(3)]
			rows[r] = randomLogits(rng, cols, spread, r%4 == 3)
			if r%16 == 5 { // a few NaN and -Inf that must never be drawn
				for range 50 {
					rows[r][rng.IntN(cols)] = float32(math.NaN())
					rows[r][rng.IntN(cols)] = float32(math.Inf(-1))
				}
			}
			p := randomSampleParams(rng, cols)
			p.TopK = []int{0, 0, 1, 20, 50, 1000, 40000, cols}[rng.IntN(8)]
			if round == 3 {
				p.Temperature = []float64{0.3, 1}[r%2] // every filter mix sampled, none greedy
			}
			params[r] = p
		}
		ids, kept := sampleOnDevice(t, b, dev, rows, params)
		for r, x := range rows {
			p := params[r]
			rowsSeen++
			want := SampleLogits(x, p)
			wantKept := len(KeptTokens(x, p))
			if int(kept[r]) != wantKept {
				if !topPNearTie(x, p, 1e-4) {
					t.Errorf("round %d row %d %+v: kernel kept %d tokens, twin %d", round, r, p, kept[r], wantKept)
				}
				keptNear++
			}
			if ids[r] == want {
				picks++
				continue
			}
			lo, hi, ok := cdfInterval(x, p, ids[r])
			u := float64(sampleUniform(p.Seed, p.Step))
			if p.Temperature < sampleGreedyEpsilon || !ok || u < lo-1e-4 || u > hi+1e-4 {
				t.Errorf("round %d row %d %+v: kernel drew %d (kept %v, CDF [%.6f, %.6f]), twin %d, u %.6f", round, r, p, ids[r], ok, lo, hi, want, u)
			}
			pickNear++
		}
	}
	t.Logf("%d rows of %d logits: %d picks equal to the twin's, %d differ at float near-ties; %d kept-set sizes differ at top-p near-ties", rowsSeen, cols, picks, pickNear, keptNear)
	if pickNear > rowsSeen/50 {
		t.Errorf("%d of %d picks differ from the twin", pickNear, rowsSeen)
	}
}

// TestCUDASampleTies checks the tie rules on hand-made rows: top-k and top-p cut through equal values
// keep the lowest indices, as the host sampler.
func TestCUDASampleTies(t *testing.T) {
	m, b, dev := sampleTestBackend(t)
	defer m.Close()
	const cols = 5000
	rows := make([][]float32, 4)
	for r := range rows {
		rows[r] = make([]float32, cols)
		for i := range rows[r] {
			rows[r][i] = -20 - float32(i%7)
		}
		for _, i := range []int{4000, 17, 2500, 999, 3001} {
			rows[r][i] = 3 // five equal best tokens
		}
	}
	params := []SampleParams{
		{Temperature: 1, TopK: 2, Seed: 1},                     // keeps 17 and 999
		{Temperature: 1, TopK: 3, Seed: 2, Step: 5},            // 17, 999, 2500
		{Temperature: 1, TopP: 0.5, Seed: 3},                   // mass before the 3rd tie reaches half: 17, 999, 2500
		{Temperature: 1, TopK: 4, TopP: 0.3, Seed: 4, Step: 9}, // 2 of the 4: 17, 999
	}
	wantKept := []int32{2, 3, 3, 2}
	ids, kept := sampleOnDevice(t, b, dev, rows, params)
	for r := range rows {
		twin := KeptTokens(rows[r], params[r])
		if int32(len(twin)) != wantKept[r] || kept[r] != wantKept[r] {
			t.Errorf("row %d: kernel kept %d, twin %v, want %d", r, kept[r], twin, wantKept[r])
		}
		if !slices.Contains(twin, ids[r]) || ids[r] != SampleLogits(rows[r], params[r]) {
			t.Errorf("row %d: kernel drew %d, twin %d from %v", r, ids[r], SampleLogits(rows[r], params[r]), twin)
		}
	}
}

// BenchmarkCUDASampleToHost times SampleToHost (an empty step, then the sampling kernel and the ids'
// copy) over rows of a Llama-3-sized vocabulary, next to ArgmaxToHost and CopyToHost of the same rows.
func BenchmarkCUDASampleToHost(bm *testing.B) {
	m, b, dev := sampleTestBackend(bm)
	defer m.Close()
	const cols = 128256
	rng := rand.New(rand.NewPCG(3, 4))
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
		ids := make([]int32, nrows)
		st := newPager(8, 16, newRand(1)).step(chunk{0, []int32{1}}) // replayed: the same token, the same slot
		for _, kind := range []struct {
			name string
			p    SampleParams
		}{
			{"temperature", SampleParams{Temperature: 0.8}},
			{"top_k=50", SampleParams{Temperature: 0.8, TopK: 50}},
			{"top_p=0.9", SampleParams{Temperature: 0.8, TopP: 0.9}},
			{"top_k=50,top_p=0.9,min_p=0.05", SampleParams{Temperature: 0.8, TopK: 50, TopP: 0.9, MinP: 0.05}},
		} {
			params := make([]SampleParams, nrows)
			for i := range params {
				params[i] = kind.p
				params[i].Seed = uint64(i)
			}
			bm.Run(kind.name+"/rows="+strconv.Itoa(nrows), func(bm *testing.B) {
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
		bm.Run("argmax/rows="+strconv.Itoa(nrows), func(bm *testing.B) {
			for bm.Loop() {
				if err := b.BeginStep(st); err != nil {
					bm.Fatal(err)
				}
				if err := b.ArgmaxToHost(ids, logits); err != nil {
					bm.Fatal(err)
				}
			}
		})
		host := make([][]float32, nrows)
		for r := range host {
			host[r] = make([]float32, cols)
		}
		bm.Run("logits-to-host/rows="+strconv.Itoa(nrows), func(bm *testing.B) {
			for bm.Loop() {
				if err := b.BeginStep(st); err != nil {
					bm.Fatal(err)
				}
				if err := b.CopyToHost(host, logits); err != nil {
					bm.Fatal(err)
				}
			}
		})
	}
}
