package weights

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ctArgs is a compressed-tensors QuantizationArgs as llm-compressor writes it (every key present).
func ctArgs(strategy string, dynamic bool, observer any) map[string]any {
	return map[string]any{"actorder": nil, "block_structure": nil, "dynamic": dynamic, "group_size": nil, "num_bits": 8,
		"observer": observer, "observer_kwargs": map[string]any{}, "strategy": strategy, "symmetric": true, "type": "float"}
}

// ctConfig is a compressed-tensors FP8 quantization_config with one group targeting every Linear layer
// (weights per channel, activations per token, lm_head ignored), as llm-compressor's FP8_DYNAMIC scheme
// writes it.
func ctConfig() map[string]any {
	return map[string]any{
		"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
		"global_compression_ratio": 1.46, "version": "0.10.2", "sparsity_config": map[string]any{},
		"ignore": []any{"lm_head"}, "kv_cache_scheme": nil,
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets": []any{"Linear"}, "output_activations": nil,
			"weights":           ctArgs("channel", false, "minmax"),
			"input_activations": ctArgs("token", true, nil),
		}},
	}
}

// edit returns a deep copy of the JSON value v with f applied.
func editJSON(t *testing.T, v map[string]any, f func(m map[string]any)) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if f != nil {
		f(out)
	}
	return out
}

func group0(m map[string]any) map[string]any {
	return m["config_groups"].(map[string]any)["group_0"].(map[string]any)
}

func parseQuant(t *testing.T, v map[string]any) (*Quantization, error) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return parseQuantizationConfig(data)
}

// TestParseQuantization reads the configurations of the FP8 checkpoints gollm runs and checks which
// scheme each Linear layer gets.
func TestParseQuantization(t *testing.T) {
	q := "model.layers.0.self_attn.q_proj"
	down := "model.layers.3.mlp.down_proj"
	tests := []struct {
		name    string
		config  map[string]any
		kv      bool
		schemes map[string]*FP8Scheme // nil: not quantized
	}{
		{"FP8-dynamic: channel weights, token activations", ctConfig(), false,
			map[string]*FP8Scheme{q: {PerChannel: true}, down: {PerChannel: true}, "lm_head": nil}},
		{"FP8 static: tensor weights and activations, KV scales", editJSON(t, ctConfig(), func(m map[string]any) {
			g := group0(m)
			g["weights"] = ctArgs("tensor", false, "minmax")
			g["input_activations"] = ctArgs("tensor", false, "minmax")
			m["kv_cache_scheme"] = ctArgs("tensor", false, "minmax")
		}), true, map[string]*FP8Scheme{q: {StaticInput: true}, "lm_head": nil}},
		{"naive-quantized, format per group, minimal args", map[string]any{
			"quant_method": "compressed-tensors", "ignore": []any{"re:.*lm_head", "re:model\\.layers\\.3\\..*"},
			"config_groups": map[string]any{"g": map[string]any{
				"format": "naive-quantized", "targets": []any{"Linear"},
				"weights":           map[string]any{"num_bits": 8, "type": "float", "strategy": "tensor"},
				"input_activations": map[string]any{"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true},
			}},
		}, false, map[string]*FP8Scheme{q: {}, down: nil, "lm_head": nil}},
		{"groups by name beat the class", editJSON(t, ctConfig(), func(m map[string]any) {
			m["config_groups"].(map[string]any)["group_1"] = map[string]any{
				"targets": []any{"re:.*down_proj$"}, "weights": ctArgs("tensor", false, nil),
				"input_activations": ctArgs("tensor", false, nil),
			}
		}), false, map[string]*FP8Scheme{q: {PerChannel: true}, down: {StaticInput: true}}},
		{"KV scales only", map[string]any{"quant_method": "compressed-tensors", "format": "float-quantized",
			"kv_cache_scheme": map[string]any{"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true}},
			true, map[string]*FP8Scheme{q: nil, "lm_head": nil}},
		{"AutoFP8 dynamic", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": []any{"lm_head"}},
			false, map[string]*FP8Scheme{q: {}, "lm_head": nil}},
		{"AutoFP8 static with KV scales", map[string]any{"quant_method": "fp8", "activation_scheme": "static",
			"ignored_layers": []any{"lm_head", down}, "kv_cache_scheme": "static", "fmt": "e4m3"},
			true, map[string]*FP8Scheme{q: {StaticInput: true}, down: nil, "lm_head": nil}},
		{"AutoFP8 with lm_head quantized", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic"},
			false, map[string]*FP8Scheme{"lm_head": {}}},
		{"block-wise (DeepSeek-V3)", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
			"weight_block_size": []any{128, 128}},
			false, map[string]*FP8Scheme{q: {Block: [2]int{128, 128}}, down: {Block: [2]int{128, 128}}, "lm_head": nil}},
		{"block-wise (Qwen3), modules_to_not_convert", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic",
			"weight_block_size": []any{64, 32}, "modules_to_not_convert": []any{"layers.3.mlp"}},
			false, map[string]*FP8Scheme{q: {Block: [2]int{64, 32}}, down: nil, "model.layers.3.mlp.up_proj": nil,
				"model.layers.2.mlp.up_proj": {Block: [2]int{64, 32}}, "lm_head": nil}},
		{"block-wise, transformers' FineGrainedFP8Config", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic",
			"weight_block_size": []any{128, 128}, "dequantize": false, "scale_fmt": "ue8m0", "modules_to_not_convert": nil},
			false, map[string]*FP8Scheme{q: {Block: [2]int{128, 128}}, "lm_head": nil}},
		{"per tensor, dequantize and scale_fmt float", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic",
			"dequantize": true, "scale_fmt": "float", "ignored_layers": []any{"lm_head"}},
			false, map[string]*FP8Scheme{q: {}, "lm_head": nil}},
		{"block size null", map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": nil,
			"modules_to_not_convert": nil, "ignored_layers": []any{"lm_head"}},
			false, map[string]*FP8Scheme{q: {}, "lm_head": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseQuant(t, tc.config)
			if err != nil {
				t.Fatal(err)
			}
			if got.KVCacheScales != tc.kv {
				t.Errorf("KVCacheScales %v, want %v", got.KVCacheScales, tc.kv)
			}
			for module, want := range tc.schemes {
				s, ok, err := got.Scheme(module)
				if err != nil {
					t.Fatalf("%s: %v", module, err)
				}
				if ok != (want != nil) || ok && s != *want {
					t.Errorf("%s: scheme %+v, quantized %v; want %+v", module, s, ok, want)
				}
			}
		})
	}
}

// TestParseQuantizationErrors checks that every configuration gollm cannot run exactly is refused with
// an error naming the field.
func TestParseQuantizationErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(m map[string]any)
		want string
		is   error
	}{
		{"other method", func(m map[string]any) { m["quant_method"] = "gptq" }, "quant_method", ErrUnsupported},
		{"no method", func(m map[string]any) { delete(m, "quant_method") }, "quant_method", ErrInvalid},
		{"int format", func(m map[string]any) { m["format"] = "int-quantized" }, "quantization_config.format", ErrUnsupported},
		{"packed format", func(m map[string]any) { m["format"] = "pack-quantized" }, "format", ErrUnsupported},
		{"unknown key", func(m map[string]any) { m["shiny"] = true }, "quantization_config.shiny", ErrUnsupported},
		{"frozen", func(m map[string]any) { m["quantization_status"] = "frozen" }, "quantization_status", ErrUnsupported},
		{"sparse", func(m map[string]any) { m["sparsity_config"] = map[string]any{"format": "sparse-24-bitmask"} }, "sparsity_config", ErrUnsupported},
		{"transforms", func(m map[string]any) { m["transform_config"] = map[string]any{"config_groups": 1} }, "transform_config", ErrUnsupported},
		{"int8 weights", func(m map[string]any) { group0(m)["weights"].(map[string]any)["type"] = "int" }, "config_groups.group_0.weights.type", ErrUnsupported},
		{"4-bit weights", func(m map[string]any) { group0(m)["weights"].(map[string]any)["num_bits"] = 4 }, "weights.num_bits", ErrUnsupported},
		{"no bits", func(m map[string]any) { delete(group0(m)["weights"].(map[string]any), "num_bits") }, "weights.num_bits", ErrInvalid},
		{"asymmetric", func(m map[string]any) { group0(m)["weights"].(map[string]any)["symmetric"] = false }, "weights.symmetric", ErrUnsupported},
		{"block weights", func(m map[string]any) {
			w := group0(m)["weights"].(map[string]any)
			w["strategy"], w["block_structure"] = "block", []any{128, 128}
		}, "weights.block_structure", ErrUnsupported},
		{"group weights", func(m map[string]any) {
			w := group0(m)["weights"].(map[string]any)
			w["strategy"], w["group_size"] = "group", 128
		}, "weights.group_size", ErrUnsupported},
		{"dynamic weights", func(m map[string]any) { group0(m)["weights"].(map[string]any)["dynamic"] = true }, "weights.dynamic", ErrUnsupported},
		{"weight strategy token", func(m map[string]any) { group0(m)["weights"].(map[string]any)["strategy"] = "token" }, "weights.strategy", ErrUnsupported},
		{"actorder", func(m map[string]any) { group0(m)["weights"].(map[string]any)["actorder"] = "group" }, "weights.actorder", ErrUnsupported},
		{"unknown arg", func(m map[string]any) { group0(m)["weights"].(map[string]any)["rounding"] = "up" }, "weights.rounding", ErrUnsupported},
		{"weight-only", func(m map[string]any) { group0(m)["input_activations"] = nil }, "input_activations", ErrUnsupported},
		{"dynamic per tensor", func(m map[string]any) {
			group0(m)["input_activations"].(map[string]any)["strategy"] = "tensor"
		}, "input_activations.strategy", ErrUnsupported},
		{"static per token", func(m map[string]any) {
			group0(m)["input_activations"].(map[string]any)["dynamic"] = false
		}, "input_activations.strategy", ErrUnsupported},
		{"dynamic local", func(m map[string]any) {
			group0(m)["input_activations"].(map[string]any)["dynamic"] = "local"
		}, "input_activations.dynamic", ErrUnsupported},
		{"output activations", func(m map[string]any) {
			group0(m)["output_activations"] = ctArgs("tensor", false, nil)
		}, "output_activations", ErrUnsupported},
		{"no targets", func(m map[string]any) { group0(m)["targets"] = []any{} }, "group_0.targets", ErrInvalid},
		{"bad regex", func(m map[string]any) { m["ignore"] = []any{"re:(?=lm_head)"} }, "ignore[0]", ErrUnsupported},
		{"ignore not a list", func(m map[string]any) { m["ignore"] = "lm_head" }, "quantization_config.ignore", ErrInvalid},
		{"group without format", func(m map[string]any) { delete(m, "format") }, "group_0.format", ErrInvalid},
		{"nothing quantized", func(m map[string]any) { delete(m, "config_groups") }, "config_groups", ErrInvalid},
		{"per-head KV scales", func(m map[string]any) { m["kv_cache_scheme"] = ctArgs("attn_head", false, nil) }, "kv_cache_scheme", ErrUnsupported},
		{"dynamic KV scales", func(m map[string]any) { m["kv_cache_scheme"] = ctArgs("tensor", true, nil) }, "kv_cache_scheme", ErrUnsupported},
		{"int8 KV", func(m map[string]any) {
			a := ctArgs("tensor", false, nil)
			a["type"] = "int"
			m["kv_cache_scheme"] = a
		}, "kv_cache_scheme.type", ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := parseQuant(t, editJSON(t, ctConfig(), tc.edit))
			if q != nil {
				t.Errorf("a quantization returned with the error")
			}
			checkError(t, err, tc.is, tc.want)
		})
	}
	auto := map[string]any{"quant_method": "fp8", "activation_scheme": "dynamic"}
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want string
		is   error
	}{
		{"block of one number", func(m map[string]any) { m["weight_block_size"] = []any{128} }, "weight_block_size", ErrInvalid},
		{"block of zero rows", func(m map[string]any) { m["weight_block_size"] = []any{0, 128} }, "weight_block_size", ErrInvalid},
		{"block of text", func(m map[string]any) { m["weight_block_size"] = "128x128" }, "weight_block_size", ErrInvalid},
		// A block so large that ceil(rows/block) overflows to 0 scale rows: a scale tensor of no bytes passed
		// the checks and DequantizeFP8 panicked slicing it.
		{"block beyond any matrix", func(m map[string]any) { m["weight_block_size"] = []any{int64(math.MaxInt64), 128} }, "weight_block_size", ErrInvalid},
		{"block with static inputs", func(m map[string]any) {
			m["weight_block_size"], m["activation_scheme"] = []any{128, 128}, "static"
		}, "activation_scheme", ErrUnsupported},
		{"e5m2", func(m map[string]any) { m["fmt"] = "e5m2" }, "fmt", ErrUnsupported},
		{"scheme", func(m map[string]any) { m["activation_scheme"] = "per-token" }, "activation_scheme", ErrUnsupported},
		{"no scheme", func(m map[string]any) { delete(m, "activation_scheme") }, "activation_scheme", ErrInvalid},
		{"modules_to_not_convert", func(m map[string]any) { m["modules_to_not_convert"] = "lm_head" }, "modules_to_not_convert", ErrInvalid},
		{"kv scheme", func(m map[string]any) { m["kv_cache_scheme"] = "dynamic" }, "kv_cache_scheme", ErrUnsupported},
		{"dequantize of text", func(m map[string]any) { m["dequantize"] = "no" }, "dequantize", ErrInvalid},
		{"scale_fmt unknown", func(m map[string]any) { m["scale_fmt"] = "e8m0fnu" }, "scale_fmt", ErrUnsupported},
		{"scale_fmt ue8m0 per tensor", func(m map[string]any) { m["scale_fmt"] = "ue8m0" }, "scale_fmt", ErrUnsupported},
	} {
		t.Run("AutoFP8 "+tc.name, func(t *testing.T) {
			_, err := parseQuant(t, editJSON(t, auto, tc.edit))
			checkError(t, err, tc.is, "quantization_config."+tc.want)
		})
	}
}

// TestSchemeAmbiguous checks that a layer two groups' targets match by name is refused.
func TestSchemeAmbiguous(t *testing.T) {
	q, err := parseQuant(t, editJSON(t, ctConfig(), func(m map[string]any) {
		g := group0(m)
		g["targets"] = []any{"re:.*proj"}
		m["config_groups"].(map[string]any)["group_1"] = map[string]any{
			"targets": []any{"model.layers.0.mlp.up_proj"}, "weights": ctArgs("tensor", false, nil),
			"input_activations": ctArgs("tensor", false, nil),
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := q.Scheme("model.layers.1.mlp.up_proj"); err != nil || !ok {
		t.Errorf("layer 1: %v %v", ok, err)
	}
	_, _, err = q.Scheme("model.layers.0.mlp.up_proj")
	checkError(t, err, ErrInvalid, "group_0", "group_1", "model.layers.0.mlp.up_proj")
}

// TestConfigQuantization reads a whole config.json with quantization_config (the FP8-dynamic Llama 3.1
// fixture) and checks that the rest of the config is unaffected.
func TestConfigQuantization(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join("testdata", "config", "llama-3.1-8b-instruct-fp8-dynamic.json"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := LoadConfig(filepath.Join("testdata", "config", "llama-3.1-8b-instruct.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Quantization == nil || cfg.Quantization.Method != QuantCompressedTensors {
		t.Fatalf("quantization %+v", cfg.Quantization)
	}
	mods := cfg.LinearModules()
	if len(mods) != 32*7+1 {
		t.Fatalf("%d Linear layers, want %d", len(mods), 32*7+1)
	}
	quantized := 0
	for _, m := range mods {
		if _, ok, err := cfg.Quantization.Scheme(m); err != nil {
			t.Fatal(err)
		} else if ok {
			quantized++
		}
	}
	if quantized != 32*7 {
		t.Errorf("%d layers quantized, want all but lm_head (%d)", quantized, 32*7)
	}
	cfg.Quantization = nil
	if !equalConfigs(cfg, plain) {
		t.Errorf("config differs from the unquantized one:\n%+v\n%+v", cfg, plain)
	}
}

func equalConfigs(a, b *Config) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// FuzzParseQuantization feeds arbitrary quantization_config objects to the parser (seeds:
// testdata/quantization, the configurations of published FP8 checkpoints). It must never panic; a
// configuration it accepts has a known method and quantizes something, and asking it for any layer's
// scheme neither panics nor gives both a scheme and an error.
func FuzzParseQuantization(f *testing.F) {
	addJSONSeeds(f, "quantization")
	f.Add([]byte(`{"quant_method":"fp8","activation_scheme":"static","ignored_layers":["lm_head"]}`))
	f.Add([]byte(`{"quant_method":"compressed-tensors","format":"float-quantized","ignore":["re:.*"],"config_groups":{"a":{"targets":["re:x|y"],"weights":{"num_bits":8,"type":"float","strategy":"tensor"},"input_activations":{"num_bits":8,"type":"float","strategy":"token","dynamic":true}}}}`))
	modules := []string{"lm_head", "model.layers.0.self_attn.q_proj", "model.layers.12.mlp.down_proj", "x", ""}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := parseQuantizationConfig(data)
		if err != nil {
			if q != nil {
				t.Fatal("a quantization returned with an error")
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %q wraps neither ErrInvalid nor ErrUnsupported", err)
			}
			return
		}
		if q.Method != QuantCompressedTensors && q.Method != QuantFP8 {
			t.Fatalf("method %q accepted", q.Method)
		}
		if len(q.groups) == 0 && !q.KVCacheScales {
			t.Fatal("a configuration that quantizes nothing accepted")
		}
		for _, m := range modules {
			if _, ok, err := q.Scheme(m); ok && err != nil {
				t.Fatalf("%s: a scheme and an error", m)
			}
		}
	})
}

// TestQuantizationSeeds checks that every seed of FuzzParseQuantization parses: they are published
// checkpoints' configurations.
func TestQuantizationSeeds(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "quantization", "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			q, err := parseQuantizationConfig(data)
			if strings.Contains(p, "refused") {
				if err == nil {
					t.Fatalf("accepted %+v", q)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
