package engine

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// greedyEpsilon is the temperature below which sampling is greedy (vLLM's _SAMPLING_EPS).
const greedyEpsilon = 1e-5

// SamplingParams says how one request picks each next token. The zero value is greedy decoding with
// no filters and no penalties; every "disabled" value below is also what the zero value holds, so a
// caller fills only the fields it needs (engine.DefaultSampling gives the model folder's defaults).
//
// The order of operations is vLLM's: the logit bias (and min_tokens' mask) on the raw logits, then
// penalties, then temperature, then min-p, then top-k, then top-p over what top-k kept, then a draw
// from the renormalised rest.
type SamplingParams struct {
	// Temperature divides the logits; below 1e-5 (including 0) the choice is greedy (argmax, the
	// lowest token id on ties). Must be >= 0.
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability sums to at least TopP.
	// 0 or 1 disables it; otherwise it must lie in (0, 1].
	TopP float64
	// TopK keeps the K most likely tokens (ties broken by the lower token id). 0 or -1 disables it.
	TopK int
	// MinP drops tokens whose probability is below MinP times the most likely token's. 0 disables
	// it; must lie in [0, 1].
	MinP float64
	// RepetitionPenalty (HF style) divides positive logits and multiplies negative ones of every
	// token that occurs in the prompt or the output so far. 0 or 1 disables it; must be > 0.
	RepetitionPenalty float64
	// PresencePenalty is subtracted once from the logit of every token already in the output
	// (OpenAI semantics, prompt not counted). Must lie in [-2, 2].
	PresencePenalty float64
	// FrequencyPenalty is subtracted from a token's logit once per occurrence in the output so far.
	// Must lie in [-2, 2].
	FrequencyPenalty float64
	// LogitBias is added to the logits of its tokens before anything else (OpenAI's logit_bias,
	// which clients send in [-100, 100]: -100 bans a token, 100 all but forces it). Logprobs stay
	// those of the raw logits. Token ids must lie in the vocabulary, biases must be finite.
	LogitBias map[int32]float32
	// Seed, when set, makes the request's draws reproducible: the same seed, prompt and parameters
	// give the same tokens whatever else shares the batch. When nil the engine picks a random seed.
	Seed *uint64
}

// greedy reports whether these parameters never draw a random number.
func (p SamplingParams) greedy() bool { return p.Temperature < greedyEpsilon }

// Validate checks the ranges documented on SamplingParams; every number must be finite. Engine.Add
// calls it; callers may call it first to refuse bad parameters before loading a model.
func (p SamplingParams) Validate() error {
	for _, f := range []struct {
		name  string
		value float64
	}{{"temperature", p.Temperature}, {"top_p", p.TopP}, {"min_p", p.MinP}, {"repetition_penalty", p.RepetitionPenalty},
		{"presence_penalty", p.PresencePenalty}, {"frequency_penalty", p.FrequencyPenalty}} {
		if math.IsInf(f.value, 0) {
			return fmt.Errorf("%s %v must be a finite number", f.name, f.value)
		}
	}
	switch {
	case math.IsNaN(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("temperature %v must be >= 0", p.Temperature)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v must lie in (0, 1]", p.TopP)
	case p.TopK < -1:
		return fmt.Errorf("top_k %d must be -1, 0 (disabled) or positive", p.TopK)
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("min_p %v must lie in [0, 1]", p.MinP)
	case math.IsNaN(p.RepetitionPenalty) || p.RepetitionPenalty < 0:
		return fmt.Errorf("repetition_penalty %v must be > 0", p.RepetitionPenalty)
	case math.IsNaN(p.PresencePenalty) || p.PresencePenalty < -2 || p.PresencePenalty > 2:
		return fmt.Errorf("presence_penalty %v must lie in [-2, 2]", p.PresencePenalty)
	case math.IsNaN(p.FrequencyPenalty) || p.FrequencyPenalty < -2 || p.FrequencyPenalty > 2:
		return fmt.Errorf("frequency_penalty %v must lie in [-2, 2]", p.FrequencyPenalty)
	}
	for id, b := range p.LogitBias {
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return fmt.Errorf("logit_bias of token %d is %v, not a finite number", id, b)
		}
	}
	return nil
}

// TokenLogprob is one token and its log-probability under the model's raw distribution (log-softmax
// of the logits before penalties, temperature and filters, as vLLM reports by default).
type TokenLogprob struct {
	ID      int32   // the token
	Logprob float32 // its natural-log probability, <= 0
	// Text is the token's text in its context, as vLLM's decoded tokens: for the chosen token what it
	// added to the output's text (empty when it only began a character that a later token completes,
	// which then carries the whole character, or when it is in a run of byte tokens that a later token
	// ends (ByteRunTokenizer), which then carries the run's text; empty for an EOS or stop token), so
	// that the chosen tokens' texts spell the output; for an alternative the text it would have added
	// after the same tokens (an incomplete character shows as U+FFFD).
	Text string
}

// Logprobs describes one sampled token: its own log-probability and, when asked, the most likely
// alternatives at that position (best first; the chosen token may be among them).
type Logprobs struct {
	TokenLogprob
	// Rank is the chosen token's 1-based rank in the raw distribution (1 = most likely).
	Rank int
	// Top holds the TopLogprobs most likely tokens, best first, ties by lower id.
	Top []TokenLogprob
}

// sampler is one request's sampling state: its parameters, its own random stream and the token
// counts the penalties need. It belongs to the engine's step goroutine.
type sampler struct {
	params SamplingParams
	rng    *rand.Rand

	// outputCounts counts each token in the output so far (presence and frequency penalties).
	outputCounts map[int32]int
	// seen holds every token of the prompt and the output (repetition penalty).
	seen map[int32]struct{}

	// Scratch reused across steps.
	work  []float32
	cands []candidate
	kept  []candidate
}

// newSampler returns a sampler for one request whose prompt is prompt, drawing from a PCG stream
// seeded by seed.
func newSampler(p SamplingParams, seed uint64, prompt []int32) *sampler {
	s := &sampler{
		params: p,
		// The second PCG word is fixed so that one seed names one stream.
		rng:          rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		outputCounts: map[int32]int{},
	}
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		s.seen = make(map[int32]struct{}, len(prompt))
		for _, t := range prompt {
			s.seen[t] = struct{}{}
		}
	}
	return s
}

// accept records that tok was appended to the output.
func (s *sampler) accept(tok int32) {
	s.outputCounts[tok]++
	if s.seen != nil {
		s.seen[tok] = struct{}{}
	}
}

// sample picks the next token from one row of logits. It does not modify logits.
func (s *sampler) sample(logits []float32) int32 {
	work := logits
	if s.hasPenalties() {
		work = append(s.work[:0], logits...)
		s.work = work
		s.applyPenalties(work)
	}
	if s.params.greedy() {
		return model.Argmax(work)
	}
	kept, total := s.filter(work)
	u := s.rng.Float64() * total
	for _, c := range kept {
		u -= c.w
		if u < 0 {
			return c.id
		}
	}
	return kept[len(kept)-1].id // rounding left u just above zero: the last kept token
}

// hasPenalties reports whether any penalty changes the logits.
func (s *sampler) hasPenalties() bool {
	return s.seen != nil || s.params.FrequencyPenalty != 0 || s.params.PresencePenalty != 0
}

// filter applies temperature, min-p, top-k and top-p to penalised logits and returns the tokens
// left with their unnormalised probabilities and the sum of those. The slice is in vocabulary order
// when no top-k or top-p applies, best first otherwise; it is scratch owned by s, and never empty.
// It does not modify work.
func (s *sampler) filter(work []float32) ([]candidate, float64) {
	p := s.params
	maxLogit := float32(math.Inf(-1))
	for _, l := range work {
		if l > maxLogit {
			maxLogit = l
		}
	}
	if math.IsInf(float64(maxLogit), 0) {
		// All -Inf (or NaN), or some +Inf: no finite distribution, so the argmax it is.
		s.kept = append(s.kept[:0], candidate{id: model.Argmax(work), w: 1})
		return s.kept, 1
	}
	invT := 1 / p.Temperature
	// Weights are relative to the best token, w = exp((l-max)/T), so w_max = 1 and the min-p rule
	// p_i < minP·p_max becomes w_i < minP.
	minW := p.MinP
	weight := func(l float32) float64 {
		w := math.Exp((float64(l) - float64(maxLogit)) * invT)
		if w < minW || math.IsNaN(w) {
			return 0
		}
		return w
	}
	topK := max(p.TopK, 0)
	topP := p.TopP
	if topP <= 0 {
		topP = 1
	}

	if topK > 0 {
		// Top-k first: the k best logits are the k best weights. Top-p then applies to the
		// distribution renormalised over them.
		kept := s.cutZero(s.topN(work, topK), weight)
		total := 0.0
		for _, c := range kept {
			total += c.w
		}
		if topP < 1 {
			kept, total = cutTopP(kept, topP*total)
		}
		s.kept = kept
		return kept, total
	}

	// Every weight, in vocabulary order.
	all := s.cands[:0]
	total := 0.0
	for i, l := range work {
		if w := weight(l); w > 0 {
			all = append(all, candidate{id: int32(i), w: w})
			total += w
		}
	}
	s.cands = all
	if topP >= 1 {
		return all, total
	}
	// Top-p: the best n tokens, n growing fourfold until they hold the mass asked for.
	for n := 64; ; n *= 4 {
		best := s.cutZero(s.topN(work, min(n, len(work))), weight)
		kept, cum := cutTopP(best, topP*total)
		if cum >= topP*total || len(best) == len(all) || n >= len(work) {
			s.kept = kept
			return kept, cum
		}
	}
}

// cutZero sets each candidate's weight from its logit and drops the best-first tail whose weight is
// zero (below min-p).
func (s *sampler) cutZero(best []candidate, weight func(float32) float64) []candidate {
	for i := range best {
		best[i].w = weight(float32(best[i].w))
		if best[i].w == 0 {
			return best[:i]
		}
	}
	return best
}

// cutTopP keeps the best-first prefix of kept whose mass before each kept token is below target,
// and returns it with its mass.
func cutTopP(kept []candidate, target float64) ([]candidate, float64) {
	cum := 0.0
	for i, c := range kept {
		if cum >= target {
			return kept[:i], cum
		}
		cum += c.w
	}
	return kept, cum
}

// topN returns the n largest logits, best first (lower id first on ties), as candidates whose w
// holds the logit. One pass with a size-n min-heap: O(V log n), and O(V) when most tokens lose
// against the heap's root at once. The result is scratch owned by s.
func (s *sampler) topN(logits []float32, n int) []candidate {
	h := s.kept[:0]
	for i, l := range logits {
		if l != l { // NaN
			continue
		}
		c := candidate{id: int32(i), w: float64(l)}
		if len(h) < n {
			h = append(h, c)
			siftUp(h, len(h)-1)
		} else if better(c, h[0]) {
			h[0] = c
			siftDown(h, 0)
		}
	}
	// Pop the weakest to the back: h ends up best first.
	for end := len(h) - 1; end > 0; end-- {
		h[0], h[end] = h[end], h[0]
		siftDown(h[:end], 0)
	}
	s.kept = h
	return h
}

// better orders candidates: larger w first, lower id first on ties.
func better(a, b candidate) bool {
	if a.w != b.w {
		return a.w > b.w
	}
	return a.id < b.id
}

// siftUp and siftDown maintain a min-heap under better (the weakest candidate at the root).
func siftUp(h []candidate, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !better(h[parent], h[i]) {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func siftDown(h []candidate, i int) {
	for {
		weakest, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && better(h[weakest], h[l]) {
			weakest = l
		}
		if r < len(h) && better(h[weakest], h[r]) {
			weakest = r
		}
		if weakest == i {
			return
		}
		h[i], h[weakest] = h[weakest], h[i]
		i = weakest
	}
}

// applyPenalties applies the repetition, frequency and presence penalties in place (vLLM order).
func (s *sampler) applyPenalties(work []float32) {
	p := s.params
	if rp := float32(p.RepetitionPenalty); s.seen != nil {
		for t := range s.seen {
			if int(t) >= len(work) || t < 0 {
				continue
			}
			if work[t] > 0 {
				work[t] /= rp
			} else {
				work[t] *= rp
			}
		}
	}
	if p.FrequencyPenalty == 0 && p.PresencePenalty == 0 {
		return
	}
	for t, n := range s.outputCounts {
		if int(t) >= len(work) || t < 0 {
			continue
		}
		work[t] -= float32(p.FrequencyPenalty)*float32(n) + float32(p.PresencePenalty)
	}
}

// candidate is a token and its unnormalised probability.
type candidate struct {
	id int32
	w  float64
}

// computeLogprobs returns the raw log-probability of chosen, its rank and the top n alternatives
// (n may be 0) from one row of logits.
func computeLogprobs(logits []float32, chosen int32, n int) Logprobs {
	maxLogit := math.Inf(-1)
	for _, l := range logits {
		maxLogit = math.Max(maxLogit, float64(l))
	}
	sum := 0.0
	for _, l := range logits {
		sum += math.Exp(float64(l) - maxLogit)
	}
	logZ := maxLogit + math.Log(sum)
	lp := func(id int32) float32 { return float32(float64(logits[id]) - logZ) }

	chosenLogit := logits[chosen]
	rank := 1
	for i, l := range logits {
		if l > chosenLogit || (l == chosenLogit && int32(i) < chosen) {
			rank++
		}
	}
	out := Logprobs{TokenLogprob: TokenLogprob{ID: chosen, Logprob: lp(chosen)}, Rank: rank}
	if n <= 0 {
		return out
	}
	n = min(n, len(logits))
	s := sampler{}
	top := s.topN(logits, n)
	out.Top = make([]TokenLogprob, len(top))
	for i, c := range top {
		out.Top[i] = TokenLogprob{ID: c.id, Logprob: lp(c.id)}
	}
	return out
}

// DefaultSampling returns the sampling defaults of a model folder's generation_config.json, as vLLM
// applies them: temperature, top_p, top_k, min_p and repetition_penalty where the file sets them, and
// temperature 1 otherwise (the OpenAI default). Like vLLM it ignores do_sample. g may be nil.
func DefaultSampling(g *weights.GenerationConfig) SamplingParams {
	p := SamplingParams{Temperature: 1}
	if g == nil {
		return p
	}
	if g.Temperature != nil {
		p.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		p.TopP = *g.TopP
	}
	if g.TopK != nil {
		p.TopK = *g.TopK
	}
	if g.MinP != nil {
		p.MinP = *g.MinP
	}
	if g.RepetitionPenalty != nil {
		p.RepetitionPenalty = *g.RepetitionPenalty
	}
	return p
}
