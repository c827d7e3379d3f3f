package bench

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gollm/gollm/model"

	"github.com/gollm/gollm/weights"
)

// TestCountParams checks every preset against its model card's published parameter count and against
// the tensor shapes weights.TensorShapes lists (an independent sum).
func TestCountParams(t *testing.T) {
	published := map[string]int64{
		"llama3-8b":       8_030_261_248,
		"llama3.1-8b":     8_030_261_248,
		"llama3-70b":      70_553_706_496,
		"llama3.2-1b":     1_235_814_400,
		"llama3.2-3b":     3_212_749_824,
		"llama2-7b":       6_738_415_616,
		"mistral-7b":      7_248_023_552,
		"mistral-7b-v0.1": 7_241_732_096,
		"ministral-8b":    8_019_808_256,
		"qwen2.5-7b":      7_615_616_512,
		"qwen3-8b":        8_190_735_360,
		// The text models of checkpoints of 12,187,325,040 and 4,300,079,472 parameters, whose vision
		// towers (SigLIP at 896 pixels and the projector to the text width) are 421,290,864 and
		// 419,816,304 of them: they differ by the projector's 1152 × (3840 − 2560).
		"gemma3-12b":   12_187_325_040 - 421_290_864,
		"gemma3-4b":    4_300_079_472 - 419_816_304,
		"smollm2-135m": 134_515_008,
	}
	if len(published) != len(PresetNames()) {
		t.Fatalf("%d presets, %d published counts", len(PresetNames()), len(published))
	}
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			cfg, err := Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			got := CountParams(cfg)
			if got.Total != published[name] {
				t.Errorf("total %d, published %d", got.Total, published[name])
			}
			var fromShapes int64
			for _, shape := range weights.TensorShapes(cfg) {
				n := int64(1)
				for _, d := range shape {
					n *= int64(d)
				}
				fromShapes += n
			}
			if got.Total != fromShapes {
				t.Errorf("total %d, tensor shapes sum to %d", got.Total, fromShapes)
			}
			if sum := got.Embedding + got.LMHead + got.Layers + got.FinalNorm; sum != got.Total {
				t.Errorf("parts sum to %d, total %d", sum, got.Total)
			}
			if cfg.TieWordEmbeddings != (got.LMHead == 0) {
				t.Errorf("tied %v but LM head %d", cfg.TieWordEmbeddings, got.LMHead)
			}
		})
	}
}

func TestPresetsAreValidConfigs(t *testing.T) {
	for _, name := range PresetNames() {
		cfg, _ := Preset(name)
		switch {
		case cfg.NumAttentionHeads%cfg.NumKeyValueHeads != 0, cfg.HeadDim%2 != 0, cfg.RMSNormEps <= 0,
			cfg.RopeTheta <= 0, !cfg.DType.Valid(), cfg.RopeScaling.Type == "":
			t.Errorf("%s: invalid config %+v", name, *cfg)
		}
		a, _ := Preset(name)
		a.VocabSize = 1
		if b, _ := Preset(name); b.VocabSize == 1 {
			t.Errorf("%s: Preset returns a shared config", name)
		}
	}
	if _, err := Preset("llama-9000"); err == nil {
		t.Error("unknown preset accepted")
	}
}

// TestDecodeStepBytes checks the roofline against hand-computed bytes and against the end-to-end peer
// table measured on the H100 (shared/bench/e2e-peers-h100.md: weights 15.0 GB for Llama-3-8B, 2.47 GB
// for Llama-3.2-1B, roofline ms at context 1024 and 3.03 TB/s).
func TestDecodeStepBytes(t *testing.T) {
	bf16 := Precision{WeightBytes: 2, KVBytes: 2}
	for _, tc := range []struct {
		name       string
		batch, ctx int
		prec       Precision
		weights    int64
		rows       int64
		kv         int64
		rooflineMS float64 // at 3.03e12 B/s; 0 to skip
	}{
		// (8,030,261,248 − 525,336,576 embedding) × 2; KV per token 2·32·8·128·2 = 131,072 B.
		{"llama3-8b", 1, 1024, bf16, 15_009_849_344, 8192, 134_217_728, 4.998},
		{"llama3-8b", 64, 1024, bf16, 15_009_849_344, 64 * 8192, 64 * 134_217_728, 7.789},
		// FP8 layers and KV: the layers' 6,979,321,856 matrix parameters in a byte each and a float32
		// scale for each of their 32 × 43,008 rows (5,505,024 B), their norms, the final norm and the LM
		// head (1,051,205,632 B) in bfloat16; 65,536 B of KV per token (1.898 ms at the H200's 4.27 TB/s).
		{"llama3-8b", 1, 1024, Precision{WeightBytes: 2, KVBytes: 1, LayerWeightBytes: 1}, 8_036_032_512, 8192, 67_108_864, 2.674},
		// Tied: the LM head reads the whole table, so every parameter counts: 1,235,814,400 × 2.
		{"llama3.2-1b", 1, 1024, bf16, 2_471_628_800, 4096, 33_554_432, 0.827},
		{"llama3.2-1b", 64, 1024, bf16, 2_471_628_800, 64 * 4096, 64 * 33_554_432, 1.524},
		// The CPU backend: bf16 weights, float32 KV (2·30·3·64·4 = 46,080 B per token).
		{"smollm2-135m", 8, 144, Precision{WeightBytes: 2, KVBytes: 4}, 269_030_016, 8 * 1152, 8 * 144 * 46_080, 0},
		// llama2-7b in float32 (as the CPU backend keeps float16 checkpoints), MHA: 2·32·32·128·4 B.
		{"llama2-7b", 2, 10, Precision{WeightBytes: 4, KVBytes: 4}, (6_738_415_616 - 131_072_000) * 4, 2 * 4096 * 4, 2 * 10 * 1_048_576, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Preset(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			got := DecodeStepBytes(cfg, tc.prec, UniformContexts(tc.batch, tc.ctx))
			want := StepBytes{Weights: tc.weights, EmbeddingRows: tc.rows, KV: tc.kv, Total: tc.weights + tc.rows + tc.kv}
			if got != want {
				t.Errorf("batch %d ctx %d: got %+v, want %+v", tc.batch, tc.ctx, got, want)
			}
			if tc.rooflineMS > 0 {
				ms := RooflineSeconds(got.Total, H100CopyBandwidth) * 1e3
				if math.Abs(ms-tc.rooflineMS) > 0.001 {
					t.Errorf("roofline %.4f ms, want %.3f", ms, tc.rooflineMS)
				}
			}
		})
	}
}

func TestWeightBytesLlama3(t *testing.T) {
	cfg, _ := Preset("llama3-8b")
	total := CountParams(cfg).Total * int64(cfg.DType.Size())
	if total != 16_060_522_496 { // ≈ 16.06 GB with embeddings and LM head
		t.Errorf("bf16 weights %d bytes, want 16,060,522,496", total)
	}
}

func TestRaggedContexts(t *testing.T) {
	cfg, _ := Preset("llama3-8b")
	p := Precision{WeightBytes: 2, KVBytes: 2}
	got := DecodeStepBytes(cfg, p, []int{1, 100, 4096})
	if want := int64(1+100+4096) * KVBytesPerToken(cfg, 2); got.KV != want {
		t.Errorf("KV %d, want %d", got.KV, want)
	}
	if RooflineSeconds(1, 0) != 0 {
		t.Error("zero bandwidth must give 0, not Inf")
	}
}

func TestMeasureCopyBandwidth(t *testing.T) {
	if bw := MeasureCopyBandwidth(1<<20, 2); !(bw > 0) || math.IsInf(bw, 0) {
		t.Errorf("bandwidth %v", bw)
	}
	if MeasureCopyBandwidth(0, 1) != 0 {
		t.Error("size 0 must give 0")
	}
}

func TestResolveBandwidth(t *testing.T) {
	gpu := Device{Name: "cuda", Bandwidth: H100CopyBandwidth}
	if bw, src := ResolveBandwidth(gpu, 0); bw != 3.03e12 || src != "cuda default" {
		t.Errorf("device default: %v %q", bw, src)
	}
	if bw, src := ResolveBandwidth(gpu, 2e12); bw != 2e12 || src != "flag" {
		t.Errorf("flag: %v %q", bw, src)
	}
	if bw, src := ResolveBandwidth(cpuDevice(), 5e9); bw != 5e9 || src != "flag" {
		t.Errorf("cpu flag: %v %q", bw, src)
	}
	measured := Device{Name: "cuda", MeasureBandwidth: func() (float64, error) { return 2.9e12, nil }}
	if bw, src := ResolveBandwidth(measured, 0); bw != 2.9e12 || src != "measured (device copy)" {
		t.Errorf("device measurement: %v %q", bw, src)
	}
	failing := Device{Name: "cuda", MeasureBandwidth: func() (float64, error) { return 0, errors.New("no GPU") }}
	if bw, src := ResolveBandwidth(failing, 0); bw != H100CopyBandwidth || !strings.Contains(src, "no GPU") {
		t.Errorf("failed device measurement: %v %q", bw, src)
	}
}

// tinyRooflineConfig: hidden 64, MLP 128, 2 layers, 4 query heads and 2 KV heads of 16, vocabulary 256.
func tinyRooflineConfig() *weights.Config {
	return &weights.Config{Architecture: "LlamaForCausalLM", VocabSize: 256, HiddenSize: 64, IntermediateSize: 128,
		NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16, DType: weights.DTypeBF16}
}

// TestTokenFLOPs against the arithmetic written out for the tiny shape: per layer Q 64×64, K and V
// 32×64 each, O 64×64, gate/up/down 3 × 128×64 (36,864 weights, 2 FLOPs each over 2 layers); attention
// 4 · 4 heads · 16 · keys per layer; the LM head 2 · 256 · 64.
func TestTokenFLOPs(t *testing.T) {
	cfg := tinyRooflineConfig()
	for _, tc := range []struct {
		pos    int
		logits bool
		want   float64
	}{
		{0, false, 2*36864*2 + 4*4*16*1*2},
		{9, false, 2*36864*2 + 4*4*16*10*2},
		{9, true, 2*36864*2 + 4*4*16*10*2 + 2*256*64},
	} {
		if got := TokenFLOPs(cfg, tc.pos, tc.logits); got != tc.want {
			t.Errorf("TokenFLOPs(pos %d, logits %v) = %v, want %v", tc.pos, tc.logits, got, tc.want)
		}
	}
	// The Llama-3-8B shape at position 511: about 14 GFLOP a token (the matrices' 2 × 6.98e9 weights
	// plus 0.27 GFLOP of attention), the figure docs/bench/e2e-h100.md divides by.
	cfg8, err := Preset("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	if f := TokenFLOPs(cfg8, 511, false); f < 13.9e9 || f > 14.4e9 {
		t.Errorf("8B token at 511: %.3g FLOP", f)
	}
}

// TestThroughputRoofline: two requests (3 prompt tokens and 2 outputs, 1 and 1) at most 2 a step on a
// device of 1 MFLOP/s and 1 MB/s: the FLOPs summed token by token, one decode step (3 outputs, 2 of them
// from the prefills) whose one decode reads a context of 4 tokens, and the bound the larger of compute
// and the reads (weights and K/V).
func TestThroughputRoofline(t *testing.T) {
	cfg := tinyRooflineConfig()
	p := Precision{WeightBytes: 2, KVBytes: 2}
	r := throughputRoofline(cfg, p, []int{3, 1}, []int{2, 1}, 2, 1e6, 1e6)
	wantFLOPs := TokenFLOPs(cfg, 0, false) + TokenFLOPs(cfg, 1, false) + TokenFLOPs(cfg, 2, true) +
		TokenFLOPs(cfg, 3, true) + TokenFLOPs(cfg, 0, true)
	if r.FLOPs != wantFLOPs || r.ComputeS != wantFLOPs/1e6 {
		t.Errorf("FLOPs %v (%v s), want %v", r.FLOPs, r.ComputeS, wantFLOPs)
	}
	weights, kv := DecodeStepBytes(cfg, p, nil).Weights, DecodeStepBytes(cfg, p, []int{4}).KV
	if r.DecodeSteps != 1 || r.Bytes != weights || r.KVBytes != kv || r.BandwidthS != float64(weights+kv)/1e6 ||
		r.KVS != float64(kv)/1e6 {
		t.Errorf("decode steps %d, bytes %d + K/V %d (%v s, K/V %v s), want 1, %d and %d", r.DecodeSteps, r.Bytes,
			r.KVBytes, r.BandwidthS, r.KVS, weights, kv)
	}
	if want := max(r.ComputeS, r.BandwidthS); r.BoundS != want || r.OutputTokensPerSecond != 3/want {
		t.Errorf("bound %v s, %v tok/s; want %v s", r.BoundS, r.OutputTokensPerSecond, want)
	}
	// No device figures: no bound.
	if r := throughputRoofline(cfg, p, []int{3}, []int{2}, 2, 0, 0); r.BoundS != 0 || r.OutputTokensPerSecond != 0 {
		t.Errorf("without figures: %+v", r)
	}
}

// TestWindowedBytes: a decode reads only its sliding layers' windows. Mistral-7B-v0.1 at context 16384
// reads what it reads at 4096 (its 32 layers all slide over 4096 tokens); Gemma-3-12B's 40 sliding layers
// read 1024 tokens each at any longer context, its 8 full ones the whole context; attention FLOPs follow.
func TestWindowedBytes(t *testing.T) {
	bf16 := Precision{WeightBytes: 2, KVBytes: 2}
	mistral, _ := Preset("mistral-7b-v0.1")
	perLayerToken := int64(2 * 8 * 128 * 2)
	at4k := DecodeStepBytes(mistral, bf16, []int{4096}).KV
	if want := 32 * 4096 * perLayerToken; at4k != want {
		t.Errorf("mistral-7b-v0.1 at 4096: KV %d, want %d", at4k, want)
	}
	if at16k := DecodeStepBytes(mistral, bf16, []int{16384}).KV; at16k != at4k {
		t.Errorf("mistral-7b-v0.1 at 16384: KV %d, want the 4096-token window's %d", at16k, at4k)
	}
	if at100 := DecodeStepBytes(mistral, bf16, []int{100}).KV; at100 != 32*100*perLayerToken {
		t.Errorf("mistral-7b-v0.1 at 100: KV %d, want %d", at100, 32*100*perLayerToken)
	}
	gemma, _ := Preset("gemma3-12b")
	gemmaToken := int64(2 * 8 * 256 * 2)
	if got, want := DecodeStepBytes(gemma, bf16, []int{32768}).KV, (8*32768+40*1024)*gemmaToken; got != want {
		t.Errorf("gemma3-12b at 32768: KV %d, want %d", got, want)
	}
	if got, want := KVBytesPerToken(gemma, 2), 48*gemmaToken; got != want {
		t.Errorf("gemma3-12b stores %d bytes a token, want %d", got, want)
	}
	// Attention FLOPs of a token at position 20000: 4·Hq·D per key read.
	flops := TokenFLOPs(gemma, 19999, false) - TokenFLOPs(gemma, 0, false)
	if want := 4.0 * 16 * 256 * float64(8*(20000-1)+40*(1024-1)); flops != want {
		t.Errorf("gemma3-12b attention FLOPs at position 19999 over position 0: %g, want %g", flops, want)
	}
	// The mean step of a latency run: full layers exact from the contexts' sum, windows at the mean.
	if got, want := meanStepKV(gemma, 2, 4, 4*3*2000, 3, 2000), (8*4*2000+4*40*1024)*gemmaToken; got != want {
		t.Errorf("mean step KV %d, want %d", got, want)
	}
}

// TestFP8ScaleBytes: FP8 layers read their codes (a byte a weight) and a float32 scale per output row of
// every matrix (q, k, v, o, gate, up, down), as model.FP8Weight holds them; written out for Qwen3-8B
// (head_dim 128 over 32 query and 8 KV heads, hidden 4096, MLP 12288, 36 layers).
func TestFP8ScaleBytes(t *testing.T) {
	cfg, _ := Preset("qwen3-8b")
	fp8 := DecodeStepBytes(cfg, Precision{WeightBytes: 2, KVBytes: 2, LayerWeightBytes: 1}, nil).Weights
	bf16 := DecodeStepBytes(cfg, Precision{WeightBytes: 2, KVBytes: 2}, nil).Weights
	matrices := int64(36 * (4096*4096 + 2*1024*4096 + 4096*4096 + 3*12288*4096))
	rows := int64(36 * (4096 + 1024 + 1024 + 4096 + 12288 + 12288 + 4096))
	if got, want := bf16-fp8, matrices-4*rows; got != want {
		t.Errorf("FP8 layers read %d bytes fewer than bf16, want %d (a byte a weight plus a float32 scale a row)", got, want)
	}
}

// TestTPRankRoofline: a model sharded over GPUs sets each roofline against one GPU, so it counts the
// busiest rank's shape (model.TPRankConfig), whose bytes are the rank shapes device-run.sh tprank times
// alone (scripts/bench/tp-ranks, which must stay planTP's cut); the whole model's bytes over one GPU's
// bandwidth put a group of N at N times its real fraction of the roofline.
func TestTPRankRoofline(t *testing.T) {
	whole, err := Preset("llama3-70b")
	if err != nil {
		t.Fatal(err)
	}
	p := Precision{WeightBytes: 2, KVBytes: 2}
	ctx := UniformContexts(1, 1025)
	wholeBytes := DecodeStepBytes(whole, p, ctx).Total
	for _, n := range []int{2, 4, 8} {
		rank, err := model.TPRankConfig(whole, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		file, err := weights.LoadConfig(filepath.Join("..", "..", "..", "scripts", "bench", "tp-ranks", fmt.Sprintf("llama3-70b-tp%d.json", n)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			name      string
			got, want int
		}{{"heads", file.NumAttentionHeads, rank.NumAttentionHeads}, {"kv heads", file.NumKeyValueHeads, rank.NumKeyValueHeads},
			{"head dim", file.HeadDim, rank.HeadDim}, {"features", file.IntermediateSize, rank.IntermediateSize},
			{"vocabulary rows", file.VocabSize, rank.VocabSize}, {"hidden", file.HiddenSize, rank.HiddenSize},
			{"layers", file.NumHiddenLayers, rank.NumHiddenLayers}} {
			if f.got != f.want {
				t.Errorf("tp%d: scripts/bench/tp-ranks has %s %d, planTP cuts %d", n, f.name, f.got, f.want)
			}
		}
		lm := &LoadedModel{Config: whole, RankConfig: rank}
		got := DecodeStepBytes(lm.rooflineConfig(), p, ctx).Total
		// A rank reads its 1/n of the layers' matrices and KV heads (8 KV heads: whole for n ≤ 8), its
		// vocabulary shard, and the replicated norms and embedding row.
		if lo, hi := wholeBytes/int64(n), wholeBytes/int64(n)+wholeBytes/200; got < lo || got > hi {
			t.Errorf("tp%d: the roofline counts %d bytes a GPU, want about the whole model's %d / %d", n, got, wholeBytes, n)
		}
	}
	if lm := (&LoadedModel{Config: whole}); lm.rooflineConfig() != whole {
		t.Error("a model whole: the roofline does not count its own shape")
	}
	if _, err := model.TPRankConfig(whole, 3, 0); err == nil {
		t.Error("TP 3 of 64 heads: no error")
	}
	if _, err := model.TPRankConfig(whole, 2, 2); err == nil {
		t.Error("rank 2 of 2: no error")
	}
}
