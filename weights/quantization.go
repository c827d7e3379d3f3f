package weights

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Quantization methods gollm reads (quantization_config.quant_method).
const (
	// QuantCompressedTensors is the compressed-tensors format that llm-compressor writes (the "-FP8" and
	// "-FP8-dynamic" checkpoints): config_groups of targets with their weights' and activations'
	// quantization arguments, an ignore list, and optionally a kv_cache_scheme.
	QuantCompressedTensors = "compressed-tensors"
	// QuantFP8 is the older form AutoFP8 writes: per-tensor weight scales, activation_scheme dynamic or
	// static, ignored_layers.
	QuantFP8 = "fp8"
)

// Quantization is a checkpoint's quantization_config, validated. gollm reads FP8 checkpoints in which
// Linear layers hold OCP e4m3 weights (safetensors F8_E4M3) with float scales and quantize their inputs
// to e4m3 before the product (W8A8), and optionally a per-layer scale for an FP8 KV cache.
//
// A quantized Linear layer named M (e.g. "model.layers.0.self_attn.q_proj") stores M.weight [N, K] in
// F8_E4M3 and M.weight_scale (F32, BF16 or F16): one scale for the matrix (shape [] or [1]) or one per
// output row ([N, 1]); its real weight is W[n][k] = e4m3(M.weight[n][k]) · scale(n). With a static
// input scheme it also stores M.input_scale ([] or [1]) that divides its input before rounding to
// e4m3; with a dynamic one, each token row's input is divided by max|x|/448 at run time. Layers the
// configuration leaves out (ignore, ignored_layers; usually lm_head) keep the checkpoint's dtype.
//
// The fp8 form may instead scale blocks of the weight (weight_block_size, FP8Scheme.Block), whose
// scales are M.weight_scale_inv.
//
// Anything else the configuration may say (other bit widths or types, compressed-tensors' block, group or asymmetric
// scales, weight-only or dynamic per-tensor activation quantization, sparsity, transforms, unknown
// keys) is an error naming the field.
type Quantization struct {
	// Method is QuantCompressedTensors or QuantFP8.
	Method string
	// KVCacheScales means the checkpoint holds a K and a V scale for every layer (kv_cache_scheme, FP8
	// e4m3 with one static scale per tensor): those of an FP8 KV cache (see KVScaleNames).
	KVCacheScales bool

	groups []quantGroup
	ignore []modulePattern
}

// FP8Scheme says how one Linear layer is quantized (see Quantization).
type FP8Scheme struct {
	// PerChannel means weight_scale holds one scale per output row ([N, 1]); otherwise one for the
	// whole matrix ([] or [1]).
	PerChannel bool
	// StaticInput means the layer's input_scale ([] or [1]) scales its activations; otherwise each token
	// row is scaled by max|x|/448 at run time.
	StaticInput bool
	// Block, when not zero, is the [rows, cols] of a block of block-wise scales (quant_method fp8 with
	// weight_block_size, as DeepSeek-V3's and Qwen3's FP8 checkpoints): M.weight_scale_inv
	// [ceil(N/rows), ceil(K/cols)] holds one scale per block, W[n][k] = e4m3(M.weight[n][k]) ·
	// scale[n/rows][k/cols]. gollm runs such layers on their dequantized weights (DequantizeFP8): its
	// FP8 products take one scale per row.
	Block [2]int
}

// quantGroup is one of compressed-tensors' config_groups: the layers its targets match share a scheme.
type quantGroup struct {
	name    string
	targets []modulePattern
	scheme  FP8Scheme
}

// modulePattern matches Linear layer names as compressed-tensors matches targets and ignore entries:
// "Linear" (the class: every Linear layer), "re:" followed by a regular expression that must match at
// the start of the name (Python's re.match), or the name itself.
type modulePattern struct {
	text      string
	anyLinear bool
	re        *regexp.Regexp
}

// match reports whether the pattern matches the Linear layer name, and whether it did so by the name
// (exactly or by a regular expression) rather than by the class.
func (p modulePattern) match(name string) (ok, byName bool) {
	switch {
	case p.anyLinear:
		return true, false
	case p.re != nil:
		return p.re.MatchString(name), true
	}
	return p.text == name, true
}

// Scheme returns how the Linear layer module (a name like "model.layers.3.mlp.down_proj" or "lm_head")
// is quantized; ok is false for a layer the checkpoint keeps in its dtype (ignored, or matched by no
// group's targets). A layer that several groups' targets match equally well (by name, or only by the
// class) is an error, as it is for compressed-tensors.
func (q *Quantization) Scheme(module string) (s FP8Scheme, ok bool, err error) {
	if q == nil {
		return FP8Scheme{}, false, nil
	}
	for _, p := range q.ignore {
		if m, _ := p.match(module); m {
			return FP8Scheme{}, false, nil
		}
	}
	var byName, byClass []*quantGroup
	for i := range q.groups {
		g := &q.groups[i]
		matched, named := false, false
		for _, p := range g.targets {
			if m, n := p.match(module); m {
				matched, named = true, named || n
			}
		}
		switch {
		case matched && named:
			byName = append(byName, g)
		case matched:
			byClass = append(byClass, g)
		}
	}
	found := byName
	if len(found) == 0 {
		found = byClass
	}
	switch len(found) {
	case 0:
		return FP8Scheme{}, false, nil
	case 1:
		return found[0].scheme, true, nil
	}
	return FP8Scheme{}, false, fmt.Errorf("quantization_config: layer %s: the targets of config groups %s and %s both match: %w",
		module, found[0].name, found[1].name, ErrInvalid)
}

// parseQuantization reads quantization_config.
func parseQuantization(f fields, c *Config, _ *family) error {
	if !f.has("quantization_config") {
		return nil
	}
	q, err := parseQuantizationConfig(f["quantization_config"])
	if err != nil {
		return err
	}
	c.Quantization = q
	return nil
}

// parseQuantizationConfig parses a quantization_config object.
func parseQuantizationConfig(raw json.RawMessage) (*Quantization, error) {
	const field = "quantization_config"
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, invalid(field, "want an object: %v", err)
	}
	method, ok, err := obj.string("quant_method")
	if err != nil {
		return nil, fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err)
	}
	if !ok {
		return nil, invalid(field+".quant_method", "missing")
	}
	switch method {
	case QuantCompressedTensors:
		return parseCompressedTensors(obj)
	case QuantFP8:
		return parseAutoFP8(obj)
	}
	return nil, unsupported(field+".quant_method", "%q (supported: %s, %s)", method, QuantCompressedTensors, QuantFP8)
}

// checkKeys refuses the keys of obj that known does not list, naming the first in sorted order.
func checkKeys(obj fields, field string, known ...string) error {
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, key) {
			return unsupported(field+"."+key, "unknown key")
		}
	}
	return nil
}

// emptyOrNull reports whether raw is null, {} or [].
func emptyOrNull(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// Activation-quantization formats of compressed-tensors whose FP8 weights gollm reads: float-quantized
// stores F8_E4M3 weights with scales; naive-quantized stores the quantized values in the quantization
// type itself, which for 8-bit floats is the same layout.
var fp8Formats = []string{"float-quantized", "naive-quantized"}

func parseCompressedTensors(obj fields) (*Quantization, error) {
	const field = "quantization_config"
	if err := checkKeys(obj, field, "quant_method", "format", "config_groups", "ignore", "kv_cache_scheme",
		"quantization_status", "global_compression_ratio", "version", "sparsity_config", "transform_config"); err != nil {
		return nil, err
	}
	q := &Quantization{Method: QuantCompressedTensors}
	format, hasFormat, err := obj.string("format")
	if err != nil {
		return nil, fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err)
	}
	if hasFormat && !slices.Contains(fp8Formats, format) {
		return nil, unsupported(field+".format", "%q (supported: %s)", format, strings.Join(fp8Formats, ", "))
	}
	if status, ok, err := obj.string("quantization_status"); err != nil {
		return nil, fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err)
	} else if ok && status != "compressed" {
		return nil, unsupported(field+".quantization_status", "%q (gollm reads compressed checkpoints)", status)
	}
	if _, _, err := obj.float("global_compression_ratio"); err != nil {
		return nil, fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err)
	}
	if _, _, err := obj.string("version"); err != nil {
		return nil, fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err)
	}
	for _, key := range []string{"sparsity_config", "transform_config"} {
		if raw, ok := obj[key]; ok && !emptyOrNull(raw) {
			return nil, unsupported(field+"."+key, "%s", abbreviate(raw))
		}
	}
	if q.ignore, err = parsePatterns(obj, field, "ignore", false); err != nil {
		return nil, err
	}
	if raw, ok := obj["kv_cache_scheme"]; ok && !isNull(raw) {
		args, err := decodeObject(raw)
		if err != nil {
			return nil, invalid(field+".kv_cache_scheme", "want an object: %v", err)
		}
		if _, err := parseFP8Args(args, field+".kv_cache_scheme", argsKV); err != nil {
			return nil, err
		}
		q.KVCacheScales = true
	}
	if obj.has("config_groups") {
		groups, err := decodeObject(obj["config_groups"])
		if err != nil {
			return nil, invalid(field+".config_groups", "want an object: %v", err)
		}
		// Groups in name order (group_0, group_1, … as llm-compressor writes them in file order).
		for _, name := range slices.Sorted(maps.Keys(groups)) {
			g, err := parseGroup(groups[name], field+".config_groups."+name, hasFormat)
			if err != nil {
				return nil, err
			}
			g.name = name
			q.groups = append(q.groups, g)
		}
	}
	if len(q.groups) == 0 && !q.KVCacheScales {
		return nil, invalid(field+".config_groups", "no config groups and no kv_cache_scheme: nothing is quantized")
	}
	return q, nil
}

// parseGroup reads one config group: its targets and the FP8 arguments of its weights and input
// activations. A group without a format of its own needs the top-level one.
func parseGroup(raw json.RawMessage, field string, topFormat bool) (quantGroup, error) {
	obj, err := decodeObject(raw)
	if err != nil {
		return quantGroup{}, invalid(field, "want an object: %v", err)
	}
	if err := checkKeys(obj, field, "targets", "weights", "input_activations", "output_activations", "format"); err != nil {
		return quantGroup{}, err
	}
	format, ok, err := obj.string("format")
	if err != nil {
		return quantGroup{}, fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err)
	}
	switch {
	case ok && !slices.Contains(fp8Formats, format):
		return quantGroup{}, unsupported(field+".format", "%q (supported: %s)", format, strings.Join(fp8Formats, ", "))
	case !ok && !topFormat:
		return quantGroup{}, invalid(field+".format", "missing, and quantization_config has no format")
	}
	if raw, ok := obj["output_activations"]; ok && !isNull(raw) {
		return quantGroup{}, unsupported(field+".output_activations", "output quantization")
	}
	var g quantGroup
	if g.targets, err = parsePatterns(obj, field, "targets", true); err != nil {
		return quantGroup{}, err
	}
	if !obj.has("weights") {
		return quantGroup{}, invalid(field+".weights", "missing")
	}
	w, err := decodeObject(obj["weights"])
	if err != nil {
		return quantGroup{}, invalid(field+".weights", "want an object: %v", err)
	}
	if g.scheme.PerChannel, err = parseFP8Args(w, field+".weights", argsWeights); err != nil {
		return quantGroup{}, err
	}
	if !obj.has("input_activations") {
		return quantGroup{}, unsupported(field+".input_activations", "missing or null: weight-only FP8 (W8A16); gollm runs W8A8")
	}
	a, err := decodeObject(obj["input_activations"])
	if err != nil {
		return quantGroup{}, invalid(field+".input_activations", "want an object: %v", err)
	}
	if g.scheme.StaticInput, err = parseFP8Args(a, field+".input_activations", argsInput); err != nil {
		return quantGroup{}, err
	}
	return g, nil
}

// argsKind says which tensor a set of quantization arguments describes.
type argsKind int

const (
	argsWeights argsKind = iota // a Linear layer's weight: static, per tensor or per channel
	argsInput                   // its input: dynamic per token, or static per tensor
	argsKV                      // the KV cache: static per tensor
)

// parseFP8Args checks compressed-tensors' QuantizationArgs of kind: 8-bit floats, symmetric, with the
// strategies gollm runs. It returns, for weights, whether the scales are per channel, and for inputs,
// whether they are static.
func parseFP8Args(obj fields, field string, kind argsKind) (bool, error) {
	if err := checkKeys(obj, field, "num_bits", "type", "symmetric", "strategy", "dynamic", "group_size",
		"block_structure", "actorder", "observer", "observer_kwargs", "scale_dtype", "zp_dtype"); err != nil {
		return false, err
	}
	wrap := func(err error) error { return fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err) }
	bits, ok, err := obj.int("num_bits")
	switch {
	case err != nil:
		return false, wrap(err)
	case !ok:
		return false, invalid(field+".num_bits", "missing")
	case bits != 8:
		return false, unsupported(field+".num_bits", "%d (gollm reads 8-bit floats)", bits)
	}
	typ, ok, err := obj.string("type")
	switch {
	case err != nil:
		return false, wrap(err)
	case !ok:
		return false, invalid(field+".type", "missing")
	case typ != "float":
		return false, unsupported(field+".type", "%q (gollm reads float e4m3, not int)", typ)
	}
	if sym, ok, err := obj.bool("symmetric"); err != nil {
		return false, wrap(err)
	} else if ok && !sym {
		return false, unsupported(field+".symmetric", "false: asymmetric scales (zero points)")
	}
	for _, key := range []string{"group_size", "block_structure"} {
		if obj.has(key) {
			return false, unsupported(field+"."+key, "%s: group or block scales", abbreviate(obj[key]))
		}
	}
	if raw, ok := obj["actorder"]; ok && !isNull(raw) && string(raw) != "false" {
		return false, unsupported(field+".actorder", "%s", abbreviate(raw))
	}
	for _, key := range []string{"observer", "scale_dtype", "zp_dtype"} { // calibration and storage details
		if _, _, err := obj.string(key); err != nil {
			return false, wrap(err)
		}
	}
	if raw, ok := obj["observer_kwargs"]; ok && !isNull(raw) {
		if _, err := decodeObject(raw); err != nil {
			return false, invalid(field+".observer_kwargs", "want an object: %v", err)
		}
	}
	strategy, ok, err := obj.string("strategy")
	if err != nil {
		return false, wrap(err)
	}
	if !ok {
		return false, invalid(field+".strategy", "missing")
	}
	var dynamic bool
	if obj.has("dynamic") {
		if err := json.Unmarshal(obj["dynamic"], &dynamic); err != nil {
			return false, unsupported(field+".dynamic", "%s (want true or false)", abbreviate(obj["dynamic"]))
		}
	}
	switch kind {
	case argsWeights:
		if dynamic {
			return false, unsupported(field+".dynamic", "true: weights quantized at run time")
		}
		switch strategy {
		case "tensor", "channel":
			return strategy == "channel", nil
		case "block":
			return false, unsupported(field+".strategy", "%q: block-wise FP8 weights", strategy)
		}
		return false, unsupported(field+".strategy", "%q (supported for weights: tensor, channel)", strategy)
	case argsInput:
		switch {
		case dynamic && strategy == "token":
			return false, nil
		case !dynamic && strategy == "tensor":
			return true, nil
		case dynamic && strategy == "tensor":
			return false, unsupported(field+".strategy", `"tensor" with dynamic true: per-batch activation scales would make one sequence's output depend on the others in its batch; gollm scales dynamic activations per token`)
		}
		return false, unsupported(field+".strategy", "%q with dynamic %v (supported: token with dynamic true, tensor with dynamic false)", strategy, dynamic)
	}
	if dynamic || strategy != "tensor" {
		return false, unsupported(field, "strategy %q with dynamic %v (supported: static per-tensor K and V scales)", strategy, dynamic)
	}
	return false, nil
}

// parsePatterns reads key of obj as a list of layer patterns (targets or ignore entries); required
// means it must be present and not empty.
func parsePatterns(obj fields, field, key string, required bool) ([]modulePattern, error) {
	if !obj.has(key) {
		if required {
			return nil, invalid(field+"."+key, "missing")
		}
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(obj[key], &list); err != nil {
		return nil, invalid(field+"."+key, "want a list of strings, got %s", abbreviate(obj[key]))
	}
	if required && len(list) == 0 {
		return nil, invalid(field+"."+key, "empty")
	}
	out := make([]modulePattern, 0, len(list))
	for i, s := range list {
		p := modulePattern{text: s}
		switch {
		case s == "Linear":
			p.anyLinear = true
		case strings.HasPrefix(s, "re:"):
			re, err := regexp.Compile(`^(?:` + s[3:] + `)`)
			if err != nil {
				return nil, unsupported(fmt.Sprintf("%s.%s[%d]", field, key, i), "regular expression %q: %v", s[3:], err)
			}
			p.re = re
		case s == "":
			return nil, invalid(fmt.Sprintf("%s.%s[%d]", field, key, i), "empty")
		}
		out = append(out, p)
	}
	return out, nil
}

// maxBlockSize bounds each side of weight_block_size: above any matrix's (ParseConfig's shape limits),
// so that the ceiling divisions of blockScaleShape cannot overflow.
const maxBlockSize = 1 << 24

// parseAutoFP8 reads AutoFP8's form: {"quant_method": "fp8", "activation_scheme": "dynamic" | "static",
// "ignored_layers": [...], "kv_cache_scheme": "static"}, whose weight scales are per tensor, or with
// "weight_block_size": [rows, cols] (and a dynamic activation scheme) per block. transformers'
// FineGrainedFP8Config also writes "dequantize" (whether transformers itself runs the layers
// dequantized: a choice of the loader, not a property of the checkpoint, which gollm makes for itself)
// and "scale_fmt" (how its kernels round the activations' block scales: "float", or "ue8m0" powers of
// two, which matters only where activations are quantized by blocks, and gollm runs block-wise layers
// in float).
func parseAutoFP8(obj fields) (*Quantization, error) {
	const field = "quantization_config"
	if err := checkKeys(obj, field, "quant_method", "activation_scheme", "ignored_layers", "kv_cache_scheme",
		"weight_block_size", "fmt", "modules_to_not_convert", "dequantize", "scale_fmt"); err != nil {
		return nil, err
	}
	if obj.has("dequantize") && string(obj["dequantize"]) != "null" {
		var b bool
		if err := json.Unmarshal(obj["dequantize"], &b); err != nil {
			return nil, invalid(field+".dequantize", "want true or false, got %s", abbreviate(obj["dequantize"]))
		}
	}
	wrap := func(err error) error { return fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err) }
	var block [2]int
	if obj.has("weight_block_size") && string(obj["weight_block_size"]) != "null" {
		var b []int
		if err := json.Unmarshal(obj["weight_block_size"], &b); err != nil || len(b) != 2 || b[0] <= 0 || b[1] <= 0 || b[0] > maxBlockSize || b[1] > maxBlockSize {
			return nil, invalid(field+".weight_block_size", "want two positive integers [rows, cols] of at most %d, got %s", maxBlockSize, abbreviate(obj["weight_block_size"]))
		}
		block = [2]int{b[0], b[1]}
	}
	if fmtName, ok, err := obj.string("fmt"); err != nil {
		return nil, wrap(err)
	} else if ok && fmtName != "e4m3" {
		return nil, unsupported(field+".fmt", "%q (supported: e4m3)", fmtName)
	}
	if sf, ok, err := obj.string("scale_fmt"); err != nil {
		return nil, wrap(err)
	} else if ok && sf != "float" && (sf != "ue8m0" || block == [2]int{}) {
		return nil, unsupported(field+".scale_fmt", "%q (supported: float; ue8m0 with weight_block_size)", sf)
	}
	scheme, ok, err := obj.string("activation_scheme")
	if err != nil {
		return nil, wrap(err)
	}
	q := &Quantization{Method: QuantFP8}
	g := quantGroup{name: "fp8", targets: []modulePattern{{text: "Linear", anyLinear: true}}}
	g.scheme.Block = block
	switch {
	case !ok:
		return nil, invalid(field+".activation_scheme", "missing")
	case scheme == "static" && block != [2]int{}:
		return nil, unsupported(field+".activation_scheme", "%q with weight_block_size (block-wise scales take dynamic activations)", scheme)
	case scheme == "static":
		g.scheme.StaticInput = true
	case scheme != "dynamic":
		return nil, unsupported(field+".activation_scheme", "%q (supported: dynamic, static)", scheme)
	}
	q.groups = []quantGroup{g}
	// The block-wise form's writers (DeepSeek-V3's, transformers' FineGrainedFP8) keep the LM head in
	// float without listing it, as vLLM, whose fp8 method quantizes no LM head, reads them.
	if block != [2]int{} {
		q.ignore = append(q.ignore, modulePattern{text: "lm_head"})
	}
	for _, key := range []string{"ignored_layers", "modules_to_not_convert"} {
		if !obj.has(key) || string(obj[key]) == "null" {
			continue
		}
		var names []string
		if err := json.Unmarshal(obj[key], &names); err != nil {
			return nil, invalid(field+"."+key, "want a list of layer names, got %s", abbreviate(obj[key]))
		}
		for _, n := range names {
			p := modulePattern{text: n}
			if key == "modules_to_not_convert" { // transformers' rule: any layer whose name contains n
				p.re = regexp.MustCompile(`^(?:.*` + regexp.QuoteMeta(n) + `)`)
			}
			q.ignore = append(q.ignore, p)
		}
	}
	if kv, ok, err := obj.string("kv_cache_scheme"); err != nil {
		return nil, wrap(err)
	} else if ok {
		if kv != "static" {
			return nil, unsupported(field+".kv_cache_scheme", "%q (supported: static)", kv)
		}
		q.KVCacheScales = true
	}
	return q, nil
}
