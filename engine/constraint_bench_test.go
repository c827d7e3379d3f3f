package engine

import (
	"context"
	"fmt"
	"path/filepath"
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
// logit bias as well, the path a request with logprobs takes). Reports ms per step.
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
// iteration, in mode (see BenchmarkConstrainedStep), and reports the wall time per engine step.
func benchConstrainedSteps(b *testing.B, m Model, tok Tokenizer, g *constraint.Grammar, prompt []int32, batch, tokens int, mode string) {
	e, err := New(m, tok, Config{MaxNumSeqs: batch, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	var steps int64
	var elapsed time.Duration
	for i := range b.N {
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
		wg.Wait()
		elapsed += time.Since(start)
		steps += e.Stats().Steps - before
	}
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(steps), "ms/step")
}
