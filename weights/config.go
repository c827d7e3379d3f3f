package weights

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// RopeScaling describes how rotary position embeddings are scaled. Type is "default" (no scaling),
// "linear" (positions divided by Factor) or "llama3" (Llama 3.1's frequency-dependent scaling, which
// uses every field). Fields that the type does not use are zero.
type RopeScaling struct {
	Type                          string  // "default", "linear" or "llama3"
	Factor                        float64 // linear, llama3: how much longer the context is than trained for
	LowFreqFactor                 float64 // llama3: wavelengths above OriginalMax/LowFreqFactor are scaled fully
	HighFreqFactor                float64 // llama3: wavelengths below OriginalMax/HighFreqFactor are kept
	OriginalMaxPositionEmbeddings int     // llama3: the context length the model was trained with
}

// Config is the part of a model's config.json that a LLaMA-family forward pass needs, validated.
type Config struct {
	// Architecture is "LlamaForCausalLM" or "MistralForCausalLM".
	Architecture string

	VocabSize             int // V: rows of the embedding and LM head
	HiddenSize            int // H: the residual stream width
	IntermediateSize      int // I: the MLP's inner width
	NumHiddenLayers       int // decoder layers
	NumAttentionHeads     int // Hq
	NumKeyValueHeads      int // Hkv; divides Hq (GQA groups of Hq/Hkv)
	HeadDim               int // D; HiddenSize/NumAttentionHeads unless the file says otherwise
	MaxPositionEmbeddings int // the longest context (prompt plus output) the model supports

	RMSNormEps float64 // added to the mean square in every RMSNorm
	RopeTheta  float64 // the base of the rotary embedding frequencies
	// RopeScaling has Type "default" when the file has no scaling.
	RopeScaling RopeScaling

	// TieWordEmbeddings means the LM head reuses model.embed_tokens.weight.
	TieWordEmbeddings bool
	// BOSTokenIDs and EOSTokenIDs are empty when the file sets them to null.
	BOSTokenIDs, EOSTokenIDs []int32
	// DType is the dtype the checkpoint was saved in (dtype or torch_dtype).
	DType DType

	// dtypeGiven records whether the file named a dtype (DType defaults to DTypeF32 otherwise).
	dtypeGiven bool
}

// Architectures that ParseConfig accepts, with the model_type each implies.
var supportedArchitectures = map[string]string{
	"LlamaForCausalLM":   "llama",
	"MistralForCausalLM": "mistral",
}

// ParseConfig parses and validates the contents of a config.json. Defaults are those of transformers'
// LlamaConfig and MistralConfig for fields a file may omit (rms_norm_eps 1e-6, rope_theta 10000,
// max_position_embeddings 2048 for Llama and 131072 for Mistral, bos 1 and eos 2, a Mistral
// sliding_window of 4096, dtype float32); the shape fields are required. Anything gollm cannot run
// exactly (biases, a sliding window shorter than the context, other rope types or architectures,
// quantized checkpoints, heads that do not divide) is an error wrapping ErrUnsupported or ErrInvalid
// that names the field.
func ParseConfig(data []byte) (*Config, error) {
	f, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	c, err := parseConfig(f)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// LoadConfig reads and parses the config.json at path.
func LoadConfig(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", path, err)
	}
	return c, nil
}

func unsupported(field, format string, args ...any) error {
	return fmt.Errorf("field %s: %s: %w", field, fmt.Sprintf(format, args...), ErrUnsupported)
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("field %s: %s: %w", field, fmt.Sprintf(format, args...), ErrInvalid)
}

func parseConfig(f fields) (*Config, error) {
	c := &Config{}
	if err := parseArchitecture(f, c); err != nil {
		return nil, err
	}
	isMistral := c.Architecture == "MistralForCausalLM"

	required := []struct {
		key string
		dst *int
	}{
		{"vocab_size", &c.VocabSize},
		{"hidden_size", &c.HiddenSize},
		{"intermediate_size", &c.IntermediateSize},
		{"num_hidden_layers", &c.NumHiddenLayers},
		{"num_attention_heads", &c.NumAttentionHeads},
	}
	for _, r := range required {
		v, ok, err := f.int(r.key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			return nil, invalid(r.key, "missing")
		}
		if v <= 0 {
			return nil, invalid(r.key, "%d is not positive", v)
		}
		*r.dst = v
	}

	defaultContext := 2048 // LlamaConfig's default
	if isMistral {
		defaultContext = 131072 // MistralConfig's default
	}
	defaultHeadDim := 0 // head_dim is then required
	if c.HiddenSize%c.NumAttentionHeads == 0 {
		defaultHeadDim = c.HiddenSize / c.NumAttentionHeads
	} else if !f.has("head_dim") {
		return nil, invalid("num_attention_heads", "%d does not divide hidden_size %d and head_dim is not given", c.NumAttentionHeads, c.HiddenSize)
	}
	optionalInts := []struct {
		key string
		dst *int
		def int
	}{
		{"num_key_value_heads", &c.NumKeyValueHeads, c.NumAttentionHeads},
		{"max_position_embeddings", &c.MaxPositionEmbeddings, defaultContext},
		{"head_dim", &c.HeadDim, defaultHeadDim},
	}
	for _, o := range optionalInts {
		v, ok, err := f.int(o.key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			v = o.def
		}
		if v <= 0 {
			return nil, invalid(o.key, "%d is not positive", v)
		}
		*o.dst = v
	}
	// Bounds far above any released checkpoint, so that the shape products below cannot overflow and a
	// crafted config cannot make the loader build millions of expected tensors.
	for _, b := range []struct {
		key      string
		v, limit int
	}{
		{"vocab_size", c.VocabSize, 1 << 22}, {"hidden_size", c.HiddenSize, 1 << 16},
		{"intermediate_size", c.IntermediateSize, 1 << 18}, {"num_hidden_layers", c.NumHiddenLayers, 1024},
		{"num_attention_heads", c.NumAttentionHeads, 4096}, {"num_key_value_heads", c.NumKeyValueHeads, 4096},
		{"head_dim", c.HeadDim, 1024}, {"max_position_embeddings", c.MaxPositionEmbeddings, 1 << 24},
	} {
		if b.v > b.limit {
			return nil, invalid(b.key, "%d exceeds %d", b.v, b.limit)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, invalid("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim%2 != 0 {
		return nil, invalid("head_dim", "%d is odd; rotary embeddings need an even head size", c.HeadDim)
	}

	eps, ok, err := f.float("rms_norm_eps")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !ok {
		eps = 1e-6
	}
	if !(eps > 0) {
		return nil, invalid("rms_norm_eps", "%g is not positive", eps)
	}
	c.RMSNormEps = eps

	tie, ok, err := f.bool("tie_word_embeddings")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c.TieWordEmbeddings = ok && tie

	for _, t := range []struct {
		key string
		dst *[]int32
		def int32
	}{{"bos_token_id", &c.BOSTokenIDs, 1}, {"eos_token_id", &c.EOSTokenIDs, 2}} {
		ids, present, err := f.tokenIDs(t.key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !present {
			ids = []int32{t.def}
		}
		for _, id := range ids {
			if int(id) >= c.VocabSize {
				return nil, invalid(t.key, "token id %d is not below vocab_size %d", id, c.VocabSize)
			}
		}
		*t.dst = ids
	}

	if err := parseConfigDType(f, c); err != nil {
		return nil, err
	}
	if err := parseRope(f, c); err != nil {
		return nil, err
	}
	if err := checkUnsupported(f, c, isMistral); err != nil {
		return nil, err
	}
	return c, nil
}

func parseArchitecture(f fields, c *Config) error {
	modelType, hasModelType, err := f.string("model_type")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if f.has("architectures") {
		var archs []string
		if err := json.Unmarshal(f["architectures"], &archs); err != nil {
			return invalid("architectures", "want a list of strings, got %s", abbreviate(f["architectures"]))
		}
		if len(archs) != 1 {
			return unsupported("architectures", "want exactly one architecture, got %q", archs)
		}
		c.Architecture = archs[0]
		want, ok := supportedArchitectures[c.Architecture]
		if !ok {
			return unsupported("architectures", "%q (supported: LlamaForCausalLM, MistralForCausalLM)", c.Architecture)
		}
		if hasModelType && modelType != want {
			return invalid("model_type", "%q does not match architecture %s (want %q)", modelType, c.Architecture, want)
		}
		return nil
	}
	switch modelType {
	case "llama":
		c.Architecture = "LlamaForCausalLM"
	case "mistral":
		c.Architecture = "MistralForCausalLM"
	case "":
		return invalid("architectures", "missing, and no model_type")
	default:
		return unsupported("model_type", "%q (supported: llama, mistral)", modelType)
	}
	return nil
}

// parseConfigDType reads dtype (transformers 5) or torch_dtype (transformers 4).
func parseConfigDType(f fields, c *Config) error {
	c.DType = DTypeF32
	var names [2]string
	for i, key := range []string{"dtype", "torch_dtype"} {
		name, ok, err := f.string(key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			continue
		}
		d, err := parseTorchDType(name)
		if err != nil {
			return fmt.Errorf("field %s: %w", key, err)
		}
		names[i] = name
		c.DType = d
		c.dtypeGiven = true
	}
	if names[0] != "" && names[1] != "" && names[0] != names[1] {
		return invalid("dtype", "%q disagrees with torch_dtype %q", names[0], names[1])
	}
	return nil
}

// parseTorchDType maps a torch dtype name as written in config.json to a DType.
func parseTorchDType(name string) (DType, error) {
	switch strings.TrimPrefix(name, "torch.") {
	case "float32", "float":
		return DTypeF32, nil
	case "float16", "half":
		return DTypeF16, nil
	case "bfloat16":
		return DTypeBF16, nil
	}
	return DTypeInvalid, fmt.Errorf("dtype %q (supported: float32, float16, bfloat16): %w", name, ErrUnsupported)
}

// supportedRopeTypes are the rope types gollm implements.
var supportedRopeTypes = map[string]bool{"default": true, "linear": true, "llama3": true}

// Keys a rope_scaling or rope_parameters object may hold for the types gollm supports.
var knownRopeKeys = map[string]bool{
	"rope_type": true, "type": true, "rope_theta": true, "factor": true, "low_freq_factor": true,
	"high_freq_factor": true, "original_max_position_embeddings": true, "partial_rotary_factor": true,
}

// parseRope reads rope_theta and rope_scaling (transformers 4) and rope_parameters (transformers 5).
// When both styles are present they must agree.
func parseRope(f fields, c *Config) error {
	theta, hasTheta, err := f.float("rope_theta")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkPartialRotary(f, "partial_rotary_factor"); err != nil {
		return err
	}
	var fromScaling, fromParams *RopeScaling
	var paramsTheta float64
	var hasParamsTheta bool
	if f.has("rope_scaling") {
		rs, t, ok, err := parseRopeObject(f["rope_scaling"], "rope_scaling")
		if err != nil {
			return err
		}
		if ok && (!hasTheta || t != theta) {
			// transformers 5 takes it over rope_theta; 4.x ignores it: refuse the ambiguity.
			return invalid("rope_scaling.rope_theta", "%g disagrees with rope_theta", t)
		}
		fromScaling = &rs
	}
	if f.has("rope_parameters") {
		rs, t, ok, err := parseRopeObject(f["rope_parameters"], "rope_parameters")
		if err != nil {
			return err
		}
		fromParams, paramsTheta, hasParamsTheta = &rs, t, ok
	}
	switch {
	case hasTheta && hasParamsTheta && theta != paramsTheta:
		return invalid("rope_parameters.rope_theta", "%g disagrees with rope_theta %g", paramsTheta, theta)
	case hasParamsTheta:
		theta = paramsTheta
	case !hasTheta:
		theta = 10000
	}
	if !(theta > 0) {
		return invalid("rope_theta", "%g is not positive", theta)
	}
	c.RopeTheta = theta
	switch {
	case fromScaling != nil && fromParams != nil && *fromScaling != *fromParams:
		return invalid("rope_parameters", "%+v disagrees with rope_scaling %+v", *fromParams, *fromScaling)
	case fromParams != nil:
		c.RopeScaling = *fromParams
	case fromScaling != nil:
		c.RopeScaling = *fromScaling
	default:
		c.RopeScaling = RopeScaling{Type: "default"}
	}
	return nil
}

func checkPartialRotary(f fields, key string) error {
	p, ok, err := f.float(key)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ok && p != 1 {
		return unsupported(key, "%g (only 1 is supported)", p)
	}
	return nil
}

// parseRopeObject parses one rope_scaling or rope_parameters object named field.
func parseRopeObject(raw json.RawMessage, field string) (rs RopeScaling, theta float64, hasTheta bool, err error) {
	obj, err := decodeObject(raw)
	if err != nil {
		return rs, 0, false, invalid(field, "want an object: %v", err)
	}
	wrap := func(err error) error { return fmt.Errorf("%w: in %s: %w", ErrInvalid, field, err) }
	typ, hasType, err := obj.string("rope_type")
	if err != nil {
		return rs, 0, false, wrap(err)
	}
	legacy, hasLegacy, err := obj.string("type") // the transformers 4.x spelling before rope_type
	if err != nil {
		return rs, 0, false, wrap(err)
	}
	switch {
	case hasType && hasLegacy && typ != legacy:
		// transformers 4.x copies type over rope_type, vLLM refuses the conflict: so do we.
		return rs, 0, false, invalid(field+".rope_type", "%q conflicts with type %q", typ, legacy)
	case !hasType:
		typ, hasType = legacy, hasLegacy
	}
	if !hasType {
		return rs, 0, false, invalid(field+".rope_type", "missing")
	}
	// The type first, so that an unsupported one (yarn, longrope, dynamic, …) is named as such rather
	// than by one of its own keys; then the keys, in order, so that the message does not vary.
	if !supportedRopeTypes[typ] {
		return rs, 0, false, unsupported(field+".rope_type", "%q (supported: default, linear, llama3)", typ)
	}
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		if !knownRopeKeys[key] {
			return rs, 0, false, unsupported(field+"."+key, "unknown key")
		}
	}
	if err := checkPartialRotary(obj, "partial_rotary_factor"); err != nil {
		return rs, 0, false, fmt.Errorf("in %s: %w", field, err)
	}
	if theta, hasTheta, err = obj.float("rope_theta"); err != nil {
		return rs, 0, false, wrap(err)
	}
	factor, hasFactor, err := obj.float("factor")
	if err != nil {
		return rs, 0, false, wrap(err)
	}
	switch typ {
	case "default":
		return RopeScaling{Type: "default"}, theta, hasTheta, nil
	case "linear":
		if !hasFactor {
			return rs, 0, false, invalid(field+".factor", "missing for rope type linear")
		}
		if !(factor >= 1) {
			return rs, 0, false, invalid(field+".factor", "%g is below 1", factor)
		}
		return RopeScaling{Type: "linear", Factor: factor}, theta, hasTheta, nil
	default: // llama3, the last of supportedRopeTypes
		rs = RopeScaling{Type: "llama3", Factor: factor}
		if !hasFactor {
			return rs, 0, false, invalid(field+".factor", "missing for rope type llama3")
		}
		if !(factor >= 1) {
			return rs, 0, false, invalid(field+".factor", "%g is below 1", factor)
		}
		var ok bool
		for _, p := range []struct {
			key string
			dst *float64
		}{{"low_freq_factor", &rs.LowFreqFactor}, {"high_freq_factor", &rs.HighFreqFactor}} {
			if *p.dst, ok, err = obj.float(p.key); err != nil {
				return rs, 0, false, wrap(err)
			}
			if !ok {
				return rs, 0, false, invalid(field+"."+p.key, "missing for rope type llama3")
			}
			if !(*p.dst > 0) {
				return rs, 0, false, invalid(field+"."+p.key, "%g is not positive", *p.dst)
			}
		}
		if !(rs.HighFreqFactor > rs.LowFreqFactor) {
			return rs, 0, false, invalid(field+".high_freq_factor", "%g is not above low_freq_factor %g", rs.HighFreqFactor, rs.LowFreqFactor)
		}
		if rs.OriginalMaxPositionEmbeddings, ok, err = obj.int("original_max_position_embeddings"); err != nil {
			return rs, 0, false, wrap(err)
		}
		if !ok {
			return rs, 0, false, invalid(field+".original_max_position_embeddings", "missing for rope type llama3")
		}
		if rs.OriginalMaxPositionEmbeddings <= 0 {
			return rs, 0, false, invalid(field+".original_max_position_embeddings", "%d is not positive", rs.OriginalMaxPositionEmbeddings)
		}
		return rs, theta, hasTheta, nil
	}
}

// checkUnsupported rejects the config fields that would change the model's math in ways gollm does
// not implement.
func checkUnsupported(f fields, c *Config, isMistral bool) error {
	for _, key := range []string{"attention_bias", "mlp_bias"} {
		v, _, err := f.bool(key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if v {
			return unsupported(key, "true")
		}
	}
	act, ok, err := f.string("hidden_act")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ok && act != "silu" {
		return unsupported("hidden_act", "%q (only silu is supported)", act)
	}
	if f.has("quantization_config") {
		return unsupported("quantization_config", "quantized checkpoints")
	}
	// LlamaAttention ignores sliding_window; MistralAttention applies it, and MistralConfig defaults
	// it to 4096 when the key is absent.
	if isMistral {
		window, ok, err := f.int("sliding_window")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		_, present := f["sliding_window"]
		if !present {
			window, ok = 4096, true
		}
		if ok && window < c.MaxPositionEmbeddings {
			return unsupported("sliding_window", "%d is shorter than max_position_embeddings %d (sliding-window attention)", window, c.MaxPositionEmbeddings)
		}
	}
	return nil
}
