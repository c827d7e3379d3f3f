package engine

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/model"
)

// byteSource gives the byteTokenizer's token bytes: ids below 256 are bytes, the rest special.
type byteSource struct{}

func (byteSource) TokenBytes(id int32) ([]byte, bool) {
	if id < 0 || id >= 256 {
		return nil, false
	}
	return []byte{byte(id)}, true
}

// TestConstraint: structured output on the tiny random model at temperature 1. Constrained requests
// (a JSON schema, a choice that ends without EOS, a regex with logprobs) share steps with
// unconstrained ones, whose tokens must not change; every constrained output that stops is valid,
// and logprobs stay those of the raw logits.
func TestConstraint(t *testing.T) {
	dir := writeTinyModel(t, 5)
	m := loadTinyModel(t, dir, 512, 8)
	e := newEngine(t, m, Config{})
	vocab, err := constraint.NewVocabulary(byteSource{}, 300)
	if err != nil {
		t.Fatal(err)
	}
	compile := func(spec constraint.Spec) *constraint.Grammar {
		g, err := constraint.Compile(spec, vocab, constraint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	schema := compile(constraint.Spec{Kind: constraint.JSONSchema, Text: `{"type":"object","properties":{
		"ok":{"type":"boolean"},"n":{"type":"integer","minimum":-5,"maximum":5},"s":{"type":"string","maxLength":4},
		"list":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},"required":["ok","n","s","list"],"additionalProperties":false}`})
	choice := compile(constraint.Spec{Kind: constraint.Choice, Choices: []string{"red", "green", "blue"}})
	regex := compile(constraint.Spec{Kind: constraint.Regex, Text: `[a-f]{3}-\d{2}`})

	prompt := []int32{256, 'j', 's', 'o', 'n'}
	plain := Request{PromptIDs: prompt, MaxTokens: 6, IgnoreEOS: true}
	base := runConcurrent(t, e, []Request{plain})[0]
	for round := range 8 {
		seed := uint64(round)
		sampled := SamplingParams{Temperature: 1, Seed: &seed}
		reqs := []Request{
			plain,
			{PromptIDs: prompt, MaxTokens: 120, Sampling: sampled, Constraint: schema.NewMatcher()},
			{PromptIDs: prompt, MaxTokens: 20, Sampling: sampled, Constraint: choice.NewMatcher(), IgnoreEOS: true},
			{PromptIDs: prompt, MaxTokens: 20, Sampling: sampled, Constraint: regex.NewMatcher(), Logprobs: true, TopLogprobs: 2},
		}
		got := runConcurrent(t, e, reqs)
		if !slices.Equal(got[0].ids, base.ids) {
			t.Errorf("round %d: unconstrained neighbour %v, want %v", round, got[0].ids, base.ids)
		}
		if got[1].reason == FinishStop {
			var v struct {
				OK   *bool    `json:"ok"`
				N    *int     `json:"n"`
				S    *string  `json:"s"`
				List []string `json:"list"`
			}
			if err := json.Unmarshal([]byte(got[1].text), &v); err != nil || v.OK == nil || v.N == nil || *v.N < -5 || *v.N > 5 ||
				v.S == nil || len([]rune(*v.S)) > 4 || len(v.List) > 3 {
				t.Errorf("round %d: schema output %q invalid (%v)", round, got[1].text, err)
			}
		}
		if got[2].reason != FinishStop || !slices.Contains([]string{"red", "green", "blue"}, got[2].text) {
			t.Errorf("round %d: choice output %q (%s)", round, got[2].text, got[2].reason)
		}
		if got[3].reason == FinishStop {
			if len(got[3].text) != 6 || got[3].text[3] != '-' {
				t.Errorf("round %d: regex output %q", round, got[3].text)
			}
		}
		// Raw logprobs: the alternatives include tokens the regex does not allow, and the chosen
		// token's rank counts them too.
		outside := false
		for _, lp := range got[3].logprobs {
			for _, top := range lp.Top {
				if top.ID >= 256 || !slices.Contains([]byte("abcdef0123456789-"), byte(top.ID)) {
					outside = true
				}
			}
		}
		if len(got[3].logprobs) != len(got[3].ids) || !outside {
			t.Errorf("round %d: %d logprobs for %d tokens, none outside the regex: masked, not raw", round, len(got[3].logprobs), len(got[3].ids))
		}
	}
	closeAndCheckPool(t, e)
}

// hostMaskModel hides a model's Begin: its constrained requests draw on the host.
type hostMaskModel struct {
	Model
	pm PickModel
}

func (h hostMaskModel) Start(s *model.Step, params []model.SampleParams) (*model.Pick, error) {
	return h.pm.Start(s, params)
}

// maskCountingModel counts how a MaskModel's steps end: logits to the host (Forward), a pick
// started whole (Start), or begun and committed later (Begin).
type maskCountingModel struct {
	*model.Model
	forward, start, begin atomic.Int64
}

func (m *maskCountingModel) Forward(s *model.Step) ([][]float32, error) {
	m.forward.Add(1)
	return m.Model.Forward(s)
}

func (m *maskCountingModel) Start(s *model.Step, params []model.SampleParams) (*model.Pick, error) {
	m.start.Add(1)
	return m.Model.Start(s, params)
}

func (m *maskCountingModel) Begin(s *model.Step) (*model.Pick, error) {
	m.begin.Add(1)
	return m.Model.Begin(s)
}

// maskedRequests returns a function making the requests of TestConstraintDeviceMatchesHost: six
// constrained requests over the byte vocabulary of the tiny models (a JSON schema and a regex; greedy
// and seeded at temperature 1) and an unconstrained one beside them.
func maskedRequests(t *testing.T) func() []Request {
	t.Helper()
	vocab, err := constraint.NewVocabulary(byteSource{}, 300)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := constraint.Compile(constraint.Spec{Kind: constraint.JSONSchema, Text: `{"type":"object","properties":{
		"id":{"type":"integer","minimum":0,"maximum":999},"tags":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":3}},
		"required":["id","tags"],"additionalProperties":false}`}, vocab, constraint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	regex, err := constraint.Compile(constraint.Spec{Kind: constraint.Regex, Text: `(ab|cd)+[0-9]{2,4}`}, vocab, constraint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{256, 'x', '='}
	return func() []Request {
		var reqs []Request
		for i := range 6 {
			seed := uint64(40 + i)
			sampling := SamplingParams{Temperature: 1, Seed: &seed}
			if i%3 == 0 {
				sampling = SamplingParams{} // greedy
			}
			req := Request{PromptIDs: prompt, MaxTokens: 40, Sampling: sampling}
			switch i % 3 {
			case 0, 1:
				req.Constraint = schema.NewMatcher()
			case 2:
				req.Constraint = regex.NewMatcher()
			}
			reqs = append(reqs, req)
		}
		seed := uint64(9)
		return append(reqs, Request{PromptIDs: prompt, MaxTokens: 12, IgnoreEOS: true, Sampling: SamplingParams{Temperature: 1, Seed: &seed}})
	}
}

// checkMaskedMatchesHost runs maskedRequests on the model load returns (a fresh one each time) with
// the draws on the host (hostMaskModel) and then on the model's masked pick, pipelined and not, and
// wants the same tokens: the model's masked pick and the host sampler apply the same mask
// (model.MaskLogits and its kernel twin) and draw by the same rule. On the model's pick no step may
// bring logits to the host, and pipelined steps are begun before their masks exist.
func checkMaskedMatchesHost(t *testing.T, load func() *model.Model) {
	t.Helper()
	requests := maskedRequests(t)
	hm := load()
	e := newEngine(t, hostMaskModel{hm, hm}, Config{})
	host := runConcurrent(t, e, requests())
	closeAndCheckPool(t, e)
	for i, r := range host[:6] {
		if len(r.ids) == 0 || r.err != nil {
			t.Errorf("host request %d: %d tokens, %v (%s)", i, len(r.ids), r.err, r.reason)
		}
	}
	for _, tc := range []struct {
		name      string
		pipelined bool
	}{{"pipelined", true}, {"not pipelined", false}} {
		t.Run(tc.name, func(t *testing.T) {
			m := &maskCountingModel{Model: load()}
			e := newEngine(t, m, Config{DisablePipelining: !tc.pipelined})
			got := runConcurrent(t, e, requests())
			stats := e.Stats()
			closeAndCheckPool(t, e)
			for i := range host {
				if !slices.Equal(got[i].ids, host[i].ids) || got[i].reason != host[i].reason {
					t.Errorf("request %d: model's pick %v (%s), host %v (%s)", i, got[i].ids, got[i].reason, host[i].ids, host[i].reason)
				}
			}
			if m.forward.Load() != 0 || m.begin.Load() == 0 {
				t.Errorf("%d steps brought logits to the host, %d were begun", m.forward.Load(), m.begin.Load())
			}
			if tc.pipelined && stats.PipelinedSteps == 0 {
				t.Error("no step was pipelined")
			}
		})
	}
}

// TestConstraintDeviceMatchesHost is checkMaskedMatchesHost on the CPU backend.
func TestConstraintDeviceMatchesHost(t *testing.T) {
	dir := writeTinyModel(t, 7)
	checkMaskedMatchesHost(t, func() *model.Model { return loadTinyModel(t, dir, 512, 8) })
}
