package model

import (
	"math"
)

// SampleParams says how ForwardSample picks the next token of one logits row: temperature, then min-p,
// top-k and top-p (vLLM's order, as the engine's host sampler), then one draw. Penalties and logprobs
// are not here: a caller that needs them takes the logits (Forward) and samples on the host.
type SampleParams struct {
	// Temperature divides the logits; below 1e-5 (0 included) the pick is greedy: the argmax, the lowest
	// index on ties.
	Temperature float64
	// TopK keeps the K most likely tokens (the lower index first on ties); 0 or negative disables it.
	TopK int
	// TopP keeps the smallest best-first set whose probability reaches TopP of what min-p and top-k
	// kept; outside (0, 1) it is disabled.
	TopP float64
	// MinP drops tokens less likely than MinP times the most likely one; 0 disables it.
	MinP float64
	// Seed and Step name the draw: the uniform is a counter-based hash of (Seed, Step), so a request that
	// passes its seed and the index of the output token being drawn gets the same token whatever else
	// shares the batch, on every backend (up to float rounding of the logits and sums).
	Seed, Step uint64
	// Mask, when not nil, is the set of tokens the row may pick (structured output): bit id%64 of
	// Mask[id/64] for token id, at least (VocabSize+63)/64 words. The others' logits are −∞ before the
	// filters and the draw (MaskLogits); nil allows every token.
	Mask []uint64
}

// ForwardSample runs one step like Forward and returns, for each entry of s.LogitRows, the token drawn
// under params[i] (one per logits row): Start with params, waited for. A PickBackend draws where the
// logits are; others copy them to the host and run the same algorithm there (sampleRowCPU). The draw's
// uniform comes from (Seed, Step) alone; it is not the engine's host PCG stream.
func (m *Model) ForwardSample(s *Step, params []SampleParams) ([]int32, error) {
	if params == nil {
		params = []SampleParams{}
	}
	p, err := m.Start(s, params)
	if err != nil {
		return nil, err
	}
	return p.Wait()
}

// sampleGreedyEpsilon is the temperature below which sampling is greedy (vLLM's _SAMPLING_EPS).
const sampleGreedyEpsilon = 1e-5

// sampleFloorMin is the lowest eligibility floor: expf of anything above it is a normal float, so every
// eligible token has a positive weight in float32.
const sampleFloorMin = -87

// sampleRow is one row's sampling arguments as the kernel reads them (SampleRowArgs in
// kernels/sample.cu, field for field).
type sampleRow struct {
	InvT  float32 // 1/temperature; 0 = greedy
	Floor float32 // a token is eligible when (x − max)·InvT ≥ Floor
	TopK  int32   // 0 = off
	TopP  float32 // off unless in (0, 1)
	U     float32 // the draw's uniform in [0, 1)
	// Mask is 1 + the index of the row's bitset among the step's masks on the device (the CUDA
	// backend's stageMasks), 0 when the row has none. The CPU twin masks the row itself (MaskLogits).
	Mask int32
}

// prepareSample turns parameters into the row arguments both the kernel and sampleRowCPU use.
func prepareSample(p SampleParams) sampleRow {
	if !(p.Temperature >= sampleGreedyEpsilon) {
		return sampleRow{}
	}
	r := sampleRow{InvT: float32(1 / p.Temperature), Floor: sampleFloorMin, U: sampleUniform(p.Seed, p.Step)}
	if p.MinP > 0 {
		r.Floor = float32(max(math.Log(min(p.MinP, 1)), sampleFloorMin))
	}
	if p.TopK > 0 {
		r.TopK = int32(min(p.TopK, math.MaxInt32))
	}
	if p.TopP > 0 && p.TopP < 1 {
		r.TopP = float32(p.TopP)
	}
	return r
}

// sampleUniform is the draw's uniform for (seed, step): a counter-based hash (two rounds of the
// SplitMix64 finaliser), its top 24 bits as a float32 in [0, 1).
func sampleUniform(seed, step uint64) float32 {
	h := splitMix64(seed ^ splitMix64(step+0x632be59bd9b4e019))
	return float32(h>>40) * (1.0 / (1 << 24))
}

func splitMix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// sampleKey maps a float to an unsigned key of the same order (NaN is never asked).
func sampleKey(f float32) uint32 {
	b := math.Float32bits(f)
	if b&0x80000000 != 0 {
		return ^b
	}
	return b | 0x80000000
}

// sampleUnkey inverts sampleKey.
func sampleUnkey(k uint32) float32 {
	if k&0x80000000 != 0 {
		return math.Float32frombits(k & 0x7fffffff)
	}
	return math.Float32frombits(^k)
}

// sampleCut describes the kept tokens of a row: every eligible token whose key is above Key, and the
// first Need (lowest indices) of those whose key equals it. Every filter keeps a best-first prefix of
// the row (value descending, index ascending), so one cut describes them all.
type sampleCut struct {
	Key  uint32
	Need int
}

// sampleState is a row being sampled: its maximum and arguments.
type sampleState struct {
	x   []float32
	r   sampleRow
	max float32
}

func (st *sampleState) eligible(v float32) bool {
	return v == v && (v-st.max)*st.r.InvT >= st.r.Floor
}

func (st *sampleState) weight(v float32) float32 {
	return float32(math.Exp(float64((v - st.max) * st.r.InvT)))
}

// count returns the eligible tokens whose key is above k (or equal to it, when orEqual).
func (st *sampleState) count(k uint32, orEqual bool) int {
	n := 0
	for _, v := range st.x {
		if st.eligible(v) {
			if kv := sampleKey(v); kv > k || (orEqual && kv == k) {
				n++
			}
		}
	}
	return n
}

// massAbove returns the summed weight of the eligible tokens with key above k, and how many have key k.
func (st *sampleState) massAbove(k uint32) (float64, int) {
	m, eq := 0.0, 0
	for _, v := range st.x {
		if !st.eligible(v) {
			continue
		}
		if kv := sampleKey(v); kv > k {
			m += float64(st.weight(v))
		} else if kv == k {
			eq++
		}
	}
	return m, eq
}

// cut runs the filters of SampleRows (kernels/sample.cu) step for step: top-k by bisection over the
// keys, then top-p by bisection over the mass. It needs st.max finite and st.r not greedy.
func (st *sampleState) cut() sampleCut {
	c := sampleCut{Key: 0, Need: math.MaxInt32}
	maxKey := sampleKey(st.max)
	if k := int(st.r.TopK); k > 0 && k < st.count(0, true) {
		lo, hi := uint32(0), maxKey // the largest key K with count(key >= K) >= k
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if st.count(mid, true) >= k {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		c = sampleCut{Key: lo, Need: k - st.count(lo, false)}
	}
	if p := st.r.TopP; p > 0 && p < 1 {
		above, eq := st.massAbove(c.Key)
		kept := above
		if n := min(eq, c.Need); n > 0 { // (key 0 names no float: its "weight" is NaN, and no token has it)
			kept += float64(n) * float64(st.weight(sampleUnkey(c.Key)))
		}
		target := float64(p) * kept
		lo, hi := c.Key, maxKey // the smallest key v with mass(key > v) < target
		for lo < hi {
			mid := lo + (hi-lo)/2
			if m, _ := st.massAbove(mid); m < target {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		m, ties := st.massAbove(lo)
		if lo == c.Key {
			ties = min(ties, c.Need)
		}
		w := float64(st.weight(sampleUnkey(lo)))
		room := math.Ceil((target - m) / w)
		need := ties
		if room < float64(ties) {
			need = int(room)
		}
		c = sampleCut{Key: lo, Need: max(1, need)}
	}
	return c
}

// kept calls f for each kept token of the row in vocabulary order with its weight.
func (st *sampleState) kept(c sampleCut, f func(i int, w float32)) {
	cutW := st.weight(sampleUnkey(c.Key))
	tie := 0
	for i, v := range st.x {
		if !st.eligible(v) {
			continue
		}
		switch k := sampleKey(v); {
		case k > c.Key:
			f(i, st.weight(v))
		case k == c.Key:
			if tie < c.Need {
				f(i, cutW)
			}
			tie++
		}
	}
}

// NonFinitePick is the pick of a logits row that holds NaN or +Inf (Start, ForwardGreedy,
// ForwardSample, PickBackend, SampleLogits): such a row names no token, and the caller must end the
// sequence rather than feed it one (its model's numbers have overflowed or its weights are broken).
// −Inf is not such a value: it marks a token ruled out (a mask), and the row's other tokens still
// compete.
const NonFinitePick int32 = -1

// Pickable reports whether a logits row can be picked from: it holds no NaN and no +Inf.
func Pickable(x []float32) bool {
	for _, v := range x {
		if !(v < float32(math.Inf(1))) {
			return false
		}
	}
	return true
}

// pickRowCPU is the CPU twin of the device's pick of one row (the argmax kernels when r is greedy, else
// SampleRows): NonFinitePick for a row holding NaN or +Inf.
func pickRowCPU(x []float32, r sampleRow) int32 {
	if !Pickable(x) {
		return NonFinitePick
	}
	return sampleRowCPU(x, r)
}

// sampleRowCPU is the CPU twin of the SampleRows kernel on a Pickable row: the same filters by the same
// bisections, and the same inverse-CDF draw over the kept tokens in vocabulary order with the row's
// uniform.
func sampleRowCPU(x []float32, r sampleRow) int32 {
	st := sampleState{x: x, r: r, max: float32(math.Inf(-1))}
	for _, v := range x {
		if v > st.max {
			st.max = v
		}
	}
	if r.InvT == 0 || math.IsInf(float64(st.max), 0) {
		return Argmax(x)
	}
	c := st.cut()
	total := 0.0
	st.kept(c, func(_ int, w float32) { total += float64(w) })
	t := float64(r.U) * total
	cum, choice, done := 0.0, int32(-1), false
	st.kept(c, func(i int, w float32) {
		if done {
			return
		}
		choice = int32(i)
		cum += float64(w)
		done = cum > t
	})
	return choice
}

// keptSet returns the tokens pickRowCPU may draw from x under r, in vocabulary order (tests): none for a
// row that is not Pickable.
func keptSet(x []float32, r sampleRow) []int32 {
	if !Pickable(x) {
		return nil
	}
	st := sampleState{x: x, r: r, max: float32(math.Inf(-1))}
	for _, v := range x {
		if v > st.max {
			st.max = v
		}
	}
	if r.InvT == 0 || math.IsInf(float64(st.max), 0) {
		return []int32{Argmax(x)}
	}
	var out []int32
	st.kept(st.cut(), func(i int, _ float32) { out = append(out, int32(i)) })
	return out
}

// Argmax returns the index of the largest entry, the lowest on ties; NaN never wins (0 when nothing
// is above −Inf). It is the greedy pick everywhere on the host (ForwardGreedy's fallback, the engine's
// sampler), with the same rule as the CUDA argmax kernel on a Pickable row (the kernel, and
// ForwardGreedy, give NonFinitePick for the others).
func Argmax(x []float32) int32 {
	best, bestV := 0, float32(math.Inf(-1))
	for i, v := range x {
		if v > bestV {
			best, bestV = i, v
		}
	}
	return int32(best)
}

// SampleLogits draws one token from a row of logits under p on the host: the CPU twin of the CUDA
// backend's sampling kernel, and what ForwardSample does on backends without one. A row holding NaN or
// +Inf gives NonFinitePick.
func SampleLogits(logits []float32, p SampleParams) int32 {
	return pickRowCPU(logits, prepareSample(p))
}

// KeptTokens returns, in vocabulary order, the tokens a draw under p may pick from logits: those left
// by temperature, min-p, top-k and top-p (one token, the argmax, when p is greedy; none when the row is
// not Pickable).
func KeptTokens(logits []float32, p SampleParams) []int32 {
	return keptSet(logits, prepareSample(p))
}
