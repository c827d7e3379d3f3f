package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// goldenFP8Dir holds tiny random LLaMA checkpoints in bfloat16 and in FP8 (compressed-tensors per channel
// and per tensor with static scales and KV scales, AutoFP8) and PyTorch's answers for them, written by
// scripts/goldens/make_fp8_goldens.py on the GPU machine (see its header for the command).
const goldenFP8Dir = "testdata/golden_fp8"

// goldenFP8 is an FP8 case's golden.json.
type goldenFP8 struct {
	Case                string `json:"case"`
	Base                string `json:"base"`
	TransformersVersion string `json:"transformers_version"`
	NewTokens           int    `json:"new_tokens"`
	Runs                []struct {
		KVCacheDType string `json:"kv_cache_dtype"`
		Prompts      []struct {
			PromptIDs  []int32   `json:"prompt_ids"`
			GreedyIDs  []int32   `json:"greedy_ids"`
			MinMargin  float64   `json:"min_margin"`
			LastLogits []float64 `json:"last_logits"`
		} `json:"prompts"`
		KLMean    float64 `json:"kl_vs_bf16_mean"`
		KLMax     float64 `json:"kl_vs_bf16_max"`
		Top1      float64 `json:"top1_vs_bf16"`
		Positions int     `json:"positions"`
	} `json:"runs"`
}

// fp8GoldenTol is the largest difference allowed between a logit of gollm's FP8 model and PyTorch's. The
// two round every activation to e4m3 alike, so they differ by their float32 sums' order (about 1e-5
// here) and, rarely, by an activation element close enough to an e4m3 rounding midpoint that the two
// implementations round it to neighbouring codes: such an element (one step is 1/16 of it) moves a logit
// by about 1e-3. The tolerance allows several; a layer wired wrongly moves logits by 1e-1 or more
// (TestFP8CheckpointsMatchReference's measurement). The goldens' greedy margins are at least twice it.
const fp8GoldenTol = 1e-2

// fp8GoldenDirs returns the folders of goldenFP8Dir whose golden.json is an FP8 case (with runs) or a
// bfloat16 base, or skips (fails with GOLLM_REQUIRE_TESTDATA=1) when the goldens are not there yet.
func fp8GoldenDirs(t *testing.T) (fp8, bases []string) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(goldenFP8Dir, "*", "golden.json"))
	if len(paths) == 0 {
		msg := "no FP8 goldens under " + goldenFP8Dir + ": run `python3 scripts/goldens/make_fp8_goldens.py OUTDIR` on the GPU machine and copy OUTDIR/* there"
		if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, p := range paths {
		dir := filepath.Dir(p)
		if strings.HasSuffix(dir, "_bf16") {
			bases = append(bases, dir)
		} else {
			fp8 = append(fp8, dir)
		}
	}
	if len(fp8) == 0 || len(bases) == 0 {
		t.Fatalf("%s: %d FP8 cases and %d bfloat16 bases", goldenFP8Dir, len(fp8), len(bases))
	}
	return fp8, bases
}

func readGoldenFP8(t *testing.T, dir string) goldenFP8 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFP8
	if err := json.Unmarshal(raw, &g); err != nil || len(g.Runs) == 0 {
		t.Fatalf("%s: %v (%d runs)", dir, err, len(g.Runs))
	}
	return g
}

// loadGoldenFolder opens dir and loads it on the CPU with opts, room for prompts of up to 340 tokens
// (and their greedy continuations) side by side.
func loadGoldenFolder(t *testing.T, dir string, opts Options) *Model {
	t.Helper()
	f := openFolder(t, dir)
	opts.NumBlocks, opts.BlockSize = 160, 16
	m, err := Load(f, opts)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestGoldenFP8Greedy loads every FP8 checkpoint of the goldens on the CPU (with an FP8 KV cache for the
// runs PyTorch made with one), prefills the four prompts in one step, checks the last positions' logits
// against PyTorch's, then decodes them together greedily and requires PyTorch's tokens exactly.
func TestGoldenFP8Greedy(t *testing.T) {
	dirs, _ := fp8GoldenDirs(t)
	for _, dir := range dirs {
		g := readGoldenFP8(t, dir)
		for _, run := range g.Runs {
			t.Run(g.Case+"_kv_"+run.KVCacheDType, func(t *testing.T) {
				m := loadGoldenFolder(t, dir, Options{KVCacheDType: run.KVCacheDType})
				p := newModelPager(m, newRand(uint64(len(g.Case))))
				chunks := make([]chunk, len(run.Prompts))
				for i, pr := range run.Prompts {
					chunks[i] = chunk{seq: i, tokens: pr.PromptIDs}
				}
				logits, err := m.Forward(p.step(chunks...))
				if err != nil {
					t.Fatal(err)
				}
				var worst float64
				for i, pr := range run.Prompts {
					diff := maxAbsDiff(logits[i], pr.LastLogits)
					worst = max(worst, diff)
					if diff > fp8GoldenTol {
						t.Errorf("prompt of %d tokens: last logits max abs diff %g > %g", len(pr.PromptIDs), diff, fp8GoldenTol)
					}
				}
				t.Logf("%s, KV %s (transformers %s): worst last-logits diff %.3g", g.Case, run.KVCacheDType, g.TransformersVersion, worst)
				got := make([][]int32, len(run.Prompts))
				for step := range g.NewTokens {
					for i := range chunks {
						next := argmax(logits[i])
						got[i] = append(got[i], next)
						chunks[i].tokens = []int32{next}
					}
					if step == g.NewTokens-1 {
						break
					}
					if logits, err = m.Forward(p.step(chunks...)); err != nil {
						t.Fatalf("decode step %d: %v", step, err)
					}
				}
				for i, pr := range run.Prompts {
					if !slices.Equal(got[i], pr.GreedyIDs) {
						t.Errorf("prompt of %d tokens: greedy tokens (margin %.3g)\n got %v\nwant %v", len(pr.PromptIDs), pr.MinMargin, got[i], pr.GreedyIDs)
					}
				}
			})
		}
	}
}

// TestGoldenFP8AgainstBF16 reports, for every FP8 run of the goldens, how far gollm's FP8 model is from
// gollm's bfloat16 model of the same weights over every position of the prompts (a few hundred): the
// mean and largest KL divergence of its next-token distribution and the top-1 agreement; and requires
// them to be what PyTorch measured between its own two models, up to float32 rounding.
func TestGoldenFP8AgainstBF16(t *testing.T) {
	dirs, _ := fp8GoldenDirs(t)
	for _, dir := range dirs {
		g := readGoldenFP8(t, dir)
		base := loadGoldenFolder(t, filepath.Join(goldenFP8Dir, g.Base), Options{})
		for _, run := range g.Runs {
			t.Run(g.Case+"_kv_"+run.KVCacheDType, func(t *testing.T) {
				m := loadGoldenFolder(t, dir, Options{KVCacheDType: run.KVCacheDType})
				var kl []float64
				agree := 0
				for i, pr := range run.Prompts {
					a := allPositionLogits(t, base, pr.PromptIDs, 2*i)
					b := allPositionLogits(t, m, pr.PromptIDs, 2*i+1)
					for pos := range a {
						kl = append(kl, klDivergence(a[pos], b[pos]))
						if argmax(a[pos]) == argmax(b[pos]) {
							agree++
						}
					}
				}
				mean := 0.0
				for _, x := range kl {
					mean += x
				}
				mean /= float64(len(kl))
				top1 := float64(agree) / float64(len(kl))
				t.Logf("%s, KV %s: over %d positions, KL from bf16 mean %.3g max %.3g, top-1 agreement %.3f (PyTorch: %.3g, %.3g, %.3f)",
					g.Case, run.KVCacheDType, len(kl), mean, slices.Max(kl), top1, run.KLMean, run.KLMax, run.Top1)
				if len(kl) != run.Positions {
					t.Errorf("%d positions, PyTorch %d", len(kl), run.Positions)
				}
				if math.Abs(mean-run.KLMean) > 0.05*run.KLMean+1e-5 || math.Abs(top1-run.Top1) > 0.02 {
					t.Errorf("KL %.4g and top-1 %.4f, PyTorch %.4g and %.4f", mean, top1, run.KLMean, run.Top1)
				}
			})
		}
	}
}

// allPositionLogits prefills tokens as sequence seq of a fresh step and returns every position's logits.
func allPositionLogits(t *testing.T, m *Model, tokens []int32, seq int) [][]float32 {
	t.Helper()
	s := newModelPager(m, newRand(uint64(seq))).step(chunk{seq: seq, tokens: tokens})
	s.LogitRows = s.LogitRows[:0]
	for row := range tokens {
		s.LogitRows = append(s.LogitRows, int32(row))
	}
	logits, err := m.Forward(s)
	if err != nil {
		t.Fatal(err)
	}
	return logits
}

// klDivergence is KL(p || q) of the softmax distributions of logits a and b, in float64.
func klDivergence(a, b []float32) float64 {
	logSoftmax := func(x []float32) []float64 {
		mx := float64(slices.Max(x))
		var sum float64
		for _, v := range x {
			sum += math.Exp(float64(v) - mx)
		}
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = float64(v) - mx - math.Log(sum)
		}
		return out
	}
	la, lb := logSoftmax(a), logSoftmax(b)
	var kl float64
	for i := range la {
		kl += math.Exp(la[i]) * (la[i] - lb[i])
	}
	return kl
}

// TestGoldenFP8Quantization loads each bfloat16 base with Options.Quantization fp8 and requires it to
// equal the per-channel FP8 checkpoint PyTorch wrote from the same weights: every FP8 layer's codes and
// scales, and the logits bit for bit.
func TestGoldenFP8Quantization(t *testing.T) {
	_, bases := fp8GoldenDirs(t)
	for _, dir := range bases {
		name := strings.TrimSuffix(filepath.Base(dir), "_bf16")
		t.Run(name, func(t *testing.T) {
			online := loadGoldenFolder(t, dir, Options{Quantization: QuantizationFP8})
			stored := loadGoldenFolder(t, filepath.Join(goldenFP8Dir, name+"_ct_dynamic"), Options{})
			checkSameFP8Weights(t, online, stored)
			prompt := randomTokens(newRand(6), 40, online.Config().VocabSize)
			a := allPositionLogits(t, online, prompt, 0)
			b := allPositionLogits(t, stored, prompt, 0)
			for pos := range a {
				if !slices.Equal(a[pos], b[pos]) {
					t.Fatalf("position %d: logits differ (max %g)", pos, maxAbsDiff(a[pos], float64s(b[pos])))
				}
			}
		})
	}
}

// TestGoldenFP8Bases checks the bfloat16 bases themselves against HF transformers (make_goldens.py's
// golden.json): the last logits and the greedy continuations, as TestGoldenGreedy does.
func TestGoldenFP8Bases(t *testing.T) {
	_, bases := fp8GoldenDirs(t)
	for _, dir := range bases {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
			if err != nil {
				t.Fatal(err)
			}
			var g golden
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			m := loadGoldenFolder(t, dir, Options{})
			if m.Config().DType != weights.DTypeBF16 {
				t.Fatalf("dtype %v", m.Config().DType)
			}
			p := newModelPager(m, newRand(2))
			for i, pr := range g.Prompts {
				logits, err := m.Forward(p.step(chunk{seq: i, tokens: pr.PromptIDs}))
				if err != nil {
					t.Fatal(err)
				}
				if diff := maxAbsDiff(logits[0], pr.LastLogits); diff > 2e-2 {
					t.Errorf("prompt of %d tokens: last logits max abs diff %g", len(pr.PromptIDs), diff)
				}
				var got []int32
				for range g.NewTokens {
					next := argmax(logits[0])
					got = append(got, next)
					if logits, err = m.Forward(p.step(chunk{seq: i, tokens: []int32{next}})); err != nil {
						t.Fatal(err)
					}
				}
				if !slices.Equal(got, pr.GreedyIDs) {
					t.Errorf("prompt of %d tokens: greedy\n got %v\nwant %v", len(pr.PromptIDs), got, pr.GreedyIDs)
				}
			}
		})
	}
}
