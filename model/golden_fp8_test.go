package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goldenFP8Dir holds a tiny random LLaMA checkpoint in bfloat16 and in FP8 (compressed-tensors per
// channel, per tensor with static input and KV scales, AutoFP8) and PyTorch's answers for each, written
// by scripts/goldens/make_fp8_goldens.py on the GPU machine (see its header for the command).
const goldenFP8Dir = "testdata/golden_fp8"

// goldenFP8 is a case's golden.json: per run (a KV cache dtype), PyTorch's teacher-forced sequences
// (a prompt and that model's own greedy continuation) with the largest logits at some of their
// positions; an FP8 run also holds how far its model is from the bfloat16 one over every position.
type goldenFP8 struct {
	Case                string `json:"case"`
	Base                string `json:"base"`
	TransformersVersion string `json:"transformers_version"`
	Runs                []struct {
		KVCacheDType string `json:"kv_cache_dtype"`
		Sequences    []struct {
			PromptLen int     `json:"prompt_len"`
			IDs       []int32 `json:"ids"`
			Positions []struct {
				Pos    int       `json:"pos"`
				IDs    []int     `json:"ids"`
				Logits []float64 `json:"logits"`
				Margin float64   `json:"margin"`
			} `json:"positions"`
		} `json:"sequences"`
		KLMean    float64 `json:"kl_vs_bf16_mean"`
		KLMax     float64 `json:"kl_vs_bf16_max"`
		Top1      float64 `json:"top1_vs_bf16"`
		Positions int     `json:"positions"`
	} `json:"runs"`
}

// fp8GoldenTol is the largest difference allowed between a logit of gollm's model and PyTorch's. Both
// compute in float32 and round every activation to e4m3 alike, so they differ by their float32 sums'
// order (about 1e-5 here) and, rarely, by an activation element close enough to an e4m3 rounding
// midpoint that the two round it to neighbouring codes: such an element (one step is 1/16 of it) moves
// a logit by about 1e-3. The tolerance allows several; a layer wired wrongly moves logits by 1e-1 or
// more (TestFP8CheckpointsMatchReference's measurement). Where PyTorch's top two logits are more than
// twice the tolerance apart, gollm must pick PyTorch's token: no error within the tolerance can swap them.
const fp8GoldenTol = 1e-2

// fp8GoldenDirs returns the folders of goldenFP8Dir whose golden.json is an FP8 case or the bfloat16
// base, or skips when the goldens are not there (fails with GOLLM_REQUIRE_TESTDATA=1: CI needs them).
func fp8GoldenDirs(t *testing.T) (fp8, bases []string) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(goldenFP8Dir, "*", "golden.json"))
	if len(paths) == 0 {
		msg := "no FP8 goldens under model/" + goldenFP8Dir + ": run `python3 scripts/goldens/make_fp8_goldens.py OUTDIR` on the GPU machine and copy OUTDIR/* there"
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
	for _, run := range g.Runs {
		if len(run.Sequences) == 0 {
			t.Fatalf("%s: a run without sequences", dir)
		}
	}
	return g
}

// loadGoldenFolder opens dir and loads it on the CPU with opts, room for the goldens' longest sequence.
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

// TestFP8Golden loads every checkpoint of the goldens on the CPU (the bfloat16 base and each FP8 form,
// with an FP8 KV cache for the runs PyTorch made with one), runs each of PyTorch's sequences in one
// prefill step and checks the logits at the kept positions: each of PyTorch's largest logits within
// fp8GoldenTol, and PyTorch's greedy token where its margin is above twice the tolerance.
func TestFP8Golden(t *testing.T) {
	fp8, bases := fp8GoldenDirs(t)
	for _, dir := range append(bases, fp8...) {
		g := readGoldenFP8(t, dir)
		for _, run := range g.Runs {
			t.Run(g.Case+"_kv_"+run.KVCacheDType, func(t *testing.T) {
				m := loadGoldenFolder(t, dir, Options{KVCacheDType: run.KVCacheDType})
				var worst float64
				checked, picked := 0, 0
				for i, seq := range run.Sequences {
					logits := allPositionLogits(t, m, seq.IDs, i)
					for _, p := range seq.Positions {
						got := logits[p.Pos]
						for j, id := range p.IDs {
							diff := math.Abs(float64(got[id]) - p.Logits[j])
							worst = max(worst, diff)
							if !(diff <= fp8GoldenTol) {
								t.Errorf("sequence %d (prompt %d) position %d token %d: logit %v, PyTorch %v", i, seq.PromptLen, p.Pos, id, got[id], p.Logits[j])
							}
						}
						checked++
						if p.Margin > 2*fp8GoldenTol {
							picked++
							if a := argmax(got); int(a) != p.IDs[0] {
								t.Errorf("sequence %d position %d: greedy token %d, PyTorch's %d (margin %.3g)", i, p.Pos, a, p.IDs[0], p.Margin)
							}
						}
					}
				}
				t.Logf("%s, KV %s (transformers %s): %d positions, worst logit difference %.3g, %d greedy tokens required",
					g.Case, run.KVCacheDType, g.TransformersVersion, checked, worst, picked)
				if picked < checked/10 {
					t.Errorf("only %d of %d positions with a margin above %g: the goldens test too little", picked, checked, 2*fp8GoldenTol)
				}
			})
		}
	}
}

// TestFP8GoldenAgainstBF16 reports, for every FP8 run of the goldens, how far gollm's FP8 model is from
// gollm's bfloat16 model of the same weights over every position of PyTorch's sequences (a few
// hundred): the mean and largest KL divergence of its next-token distribution and the top-1 agreement;
// and requires them to be what PyTorch measured between its own two models, up to float32 rounding.
func TestFP8GoldenAgainstBF16(t *testing.T) {
	dirs, _ := fp8GoldenDirs(t)
	for _, dir := range dirs {
		g := readGoldenFP8(t, dir)
		base := loadGoldenFolder(t, filepath.Join(goldenFP8Dir, g.Base), Options{})
		for _, run := range g.Runs {
			t.Run(g.Case+"_kv_"+run.KVCacheDType, func(t *testing.T) {
				m := loadGoldenFolder(t, dir, Options{KVCacheDType: run.KVCacheDType})
				var kl []float64
				agree := 0
				for i, seq := range run.Sequences {
					a := allPositionLogits(t, base, seq.IDs, 2*i)
					b := allPositionLogits(t, m, seq.IDs, 2*i+1)
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

// TestFP8GoldenQuantization loads the bfloat16 base with Options.Quantization fp8 and requires it to
// equal the per-channel FP8 checkpoint PyTorch wrote from the same weights: every FP8 layer's codes and
// scales, and the logits bit for bit.
func TestFP8GoldenQuantization(t *testing.T) {
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
