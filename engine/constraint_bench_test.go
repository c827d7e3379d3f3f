package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

// benchSchema is an array of objects that cannot end within the benchmark's tokens (minItems),
// so that every request runs to max_tokens under the constraint.
const benchSchema = `{"type":"array","minItems":1000,"items":{"type":"object","properties":{"name":{"type":"string"},
	"qty":{"type":"integer","minimum":0},"ok":{"type":"boolean"}},"required":["name","qty","ok"],"additionalProperties":false}}`

// BenchmarkConstrainedStep measures the CPU decode step of the built-in model (4096-token
// vocabulary) at batch 1 and 64, sampled at temperature 1: without a constraint ("none": the model
// picks), without one but drawing on the host ("host": a zero logit bias), with a JSON Schema
// constraint on every request ("constraint": the masks enter the model's pick, computed while the
// model runs, pipelined), and with the constraint drawn on the host ("constraint-host": the zero
// logit bias as well, the path a request with logprobs takes). Reports the decode step (step-ms, the
// median interval between two tokens) and its phases; see benchConstrainedSteps.
func BenchmarkConstrainedStep(b *testing.B) {
	dir, err := defaultmodel.Dir()
	if err != nil {
		b.Fatal(err)
	}
	f, err := weights.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(f, model.Options{NumBlocks: 2048, BlockSize: 16})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	vocab, err := constraint.NewVocabulary(tok, m.Config().VocabSize)
	if err != nil {
		b.Fatal(err)
	}
	g, err := constraint.Compile(constraint.Spec{Kind: constraint.JSONSchema, Text: benchSchema}, vocab, constraint.Options{})
	if err != nil {
		b.Fatal(err)
	}
	prompt := tok.Encode("// A list of items as JSON:\n", true)
	for _, batch := range []int{1, 64} {
		for _, mode := range []string{"none", "host", "constraint", "constraint-host"} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, mode), func(b *testing.B) {
				benchConstrainedSteps(b, m, tok, g, prompt, batch, 32, mode)
			})
		}
	}
}

// benchConstrainedSteps runs batch requests of tokens tokens each (temperature 1, EOS ignored) on m per
// iteration, in mode (see BenchmarkConstrainedStep), and reports:
//
//   - step-ms: the decode step, the median interval between two tokens of the running batch: from the
//     end of a step (its picks read by the engine) to the end of the next, for every step that decodes
//     the whole batch (tokens − 1 a request: all but the first token, which the prefill gives). The
//     batch is admitted at once (an opener request holds the engine's first step while the batch is
//     queued), so that every request decodes in every such step.
//   - ms/step: an iteration's wall time over its engine steps (prefill, request setup and the first
//     token's mask included), the metric of the earlier tables.
//   - the step's phases, medians over the same steps, timed around the model's calls (stepTimer; the
//     engine's own path is not instrumented): wait-ms, the engine blocked until the step's picks are
//     on the host (the device's share beyond the host's work); host-ms, the step less that wait (the
//     engine's work in the step: applying the previous picks, the masks, queuing); begin-ms, in Begin or
//     Start (or Forward, whose logits come to the host); commit-ms, in Pick.Commit (staging and
//     uploading the masks, queuing the pick); masks-ms, from the picks of the step before read to this
//     step's Commit (applying those picks and computing the masks: host work that must fit under the
//     step's forward, which the device runs meanwhile).
func benchConstrainedSteps(b *testing.B, m maskedModel, tok Tokenizer, g *constraint.Grammar, prompt []int32, batch, tokens int, mode string) {
	timer := &stepTimer{inner: m}
	e := startEngine(b, timer, tok, Config{MaxNumSeqs: batch})
	var steps int64
	var elapsed time.Duration
	var ph stepPhases
	for i := range b.N {
		// The opener's step holds the engine while the batch is queued (the intake holds 64).
		entered, release := timer.hold()
		opener, err := e.Add(context.Background(), Request{PromptIDs: prompt, MaxTokens: 1, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		<-entered
		before := e.Stats().Steps
		start := time.Now()
		var wg sync.WaitGroup
		for k := range batch {
			seed := uint64(i*batch + k)
			req := Request{PromptIDs: prompt, MaxTokens: tokens, IgnoreEOS: true,
				Sampling: SamplingParams{Temperature: 1, Seed: &seed}}
			if mode == "constraint" || mode == "constraint-host" {
				req.Constraint = g.NewMatcher()
			}
			if mode == "host" || mode == "constraint-host" {
				// A bias of zero changes nothing but the path: the draw happens on the host.
				req.Sampling.LogitBias = map[int32]float32{0: 0}
			}
			s, err := e.Add(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() {
				if r := collect(b, s); r.err != nil || len(r.ids) != tokens {
					b.Errorf("%d tokens, %v", len(r.ids), r.err)
				}
			})
		}
		release()
		if r := collect(b, opener); r.err != nil {
			b.Fatal(r.err)
		}
		wg.Wait()
		elapsed += time.Since(start)
		steps += e.Stats().Steps - before
		if n := ph.add(timer.take(), batch); n != tokens-1 {
			b.Logf("iteration %d: %d steps decoded the whole batch, want %d", i, n, tokens-1)
		}
	}
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(steps), "ms/step")
	ph.report(b)
}

// maskedModel is a Model whose picks take masks (*model.Model).
type maskedModel interface {
	Model
	MaskModel
}

// stepTimer is the benchmark's model: it passes every call to inner and records, per step, the time
// the engine spent in the model's calls and when the step's picks (or logits) reached it. It can hold
// the next step at a gate (hold).
type stepTimer struct {
	inner maskedModel

	mu      sync.Mutex
	steps   []*stepTime
	gate    chan struct{}
	entered chan struct{}
}

// stepTime is one step as the engine ran it.
type stepTime struct {
	rows      int  // logits rows
	decode    bool // one token per sequence
	begin     time.Duration
	committed time.Time // when Commit was called (zero: none)
	commit    time.Duration
	wait      time.Duration
	end       time.Time // picks or logits read
}

func (t *stepTimer) Config() *weights.Config { return t.inner.Config() }
func (t *stepTimer) BlockSize() int          { return t.inner.BlockSize() }
func (t *stepTimer) NumBlocks() int          { return t.inner.NumBlocks() }

// hold makes the next step wait at a gate: entered is closed when it gets there, and release opens it.
func (t *stepTimer) hold() (entered <-chan struct{}, release func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gate, in := make(chan struct{}), make(chan struct{})
	t.gate, t.entered = gate, in
	return in, func() { close(gate) }
}

// open waits at the gate if one is set and starts s's record.
func (t *stepTimer) open(s *model.Step) *stepTime {
	t.mu.Lock()
	gate, entered := t.gate, t.entered
	t.gate, t.entered = nil, nil
	t.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	return &stepTime{rows: len(s.LogitRows), decode: len(s.Tokens) == len(s.ContextLens)}
}

// close stores rec, its picks read at end.
func (t *stepTimer) close(rec *stepTime, end time.Time) {
	rec.end = end
	t.mu.Lock()
	t.steps = append(t.steps, rec)
	t.mu.Unlock()
}

// take returns the steps recorded since the last take, in the order their picks were read.
func (t *stepTimer) take() []*stepTime {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.steps
	t.steps = nil
	return out
}

func (t *stepTimer) Forward(s *model.Step) ([][]float32, error) {
	rec := t.open(s)
	start := time.Now()
	out, err := t.inner.Forward(s)
	end := time.Now()
	rec.begin = end.Sub(start)
	t.close(rec, end)
	return out, err
}

func (t *stepTimer) Start(s *model.Step, params []model.SampleParams) (*model.Pick, error) {
	rec := t.open(s)
	start := time.Now()
	p, err := t.inner.Start(s, params)
	rec.begin = time.Since(start)
	if err != nil {
		return nil, err
	}
	return t.wrap(rec, p), nil
}

func (t *stepTimer) Begin(s *model.Step) (*model.Pick, error) {
	rec := t.open(s)
	start := time.Now()
	p, err := t.inner.Begin(s)
	rec.begin = time.Since(start)
	if err != nil {
		return nil, err
	}
	return t.wrap(rec, p), nil
}

// wrap times p's Commit and Wait into rec, and closes rec when the picks are read.
func (t *stepTimer) wrap(rec *stepTime, p *model.Pick) *model.Pick {
	return model.WrapPick(p, model.PickHooks{
		Commit: func(commit func() error) error {
			rec.committed = time.Now()
			err := commit()
			rec.commit = time.Since(rec.committed)
			return err
		},
		Wait: func(wait func() ([]int32, error)) ([]int32, error) {
			start := time.Now()
			ids, err := wait()
			end := time.Now()
			rec.wait = end.Sub(start)
			t.close(rec, end)
			return ids, err
		},
	})
}

// stepPhases pools the decode steps of a benchmark's iterations.
type stepPhases struct {
	step, wait, host, begin, commit, masks []time.Duration
}

// add pools the steps of one iteration that decoded all batch sequences, each timed from the end of the
// step before it, and returns how many there were.
func (ph *stepPhases) add(steps []*stepTime, batch int) int {
	n := 0
	for i := 1; i < len(steps); i++ {
		st, prev := steps[i], steps[i-1]
		if !st.decode || st.rows != batch {
			continue
		}
		n++
		d := st.end.Sub(prev.end)
		ph.step = append(ph.step, d)
		ph.wait = append(ph.wait, st.wait)
		ph.host = append(ph.host, d-st.wait)
		ph.begin = append(ph.begin, st.begin)
		if !st.committed.IsZero() {
			ph.commit = append(ph.commit, st.commit)
			ph.masks = append(ph.masks, st.committed.Sub(prev.end))
		}
	}
	return n
}

// report reports the medians (ms); commit-ms and masks-ms only where steps were committed.
func (ph *stepPhases) report(b *testing.B) {
	for _, m := range []struct {
		unit string
		d    []time.Duration
	}{
		{"step-ms", ph.step}, {"wait-ms", ph.wait}, {"host-ms", ph.host}, {"begin-ms", ph.begin},
		{"commit-ms", ph.commit}, {"masks-ms", ph.masks},
	} {
		if len(m.d) > 0 {
			slices.Sort(m.d)
			b.ReportMetric(float64(m.d[len(m.d)/2].Nanoseconds())/1e6, m.unit)
		}
	}
}
