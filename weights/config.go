package weights

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
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

// Config is the part of a model's config.json that the forward pass needs, validated, with the
// defaults of transformers' configuration class of the architecture applied. The zero value of every
// field after RopeScaling is LLaMA's (no window, SiLU, no biases or q/k norms, plain RMSNorm weights,
// unscaled embeddings and logits, tensors under "model."), so that a Config written out by hand for a
// LLaMA shape needs none of them.
type Config struct {
	// Architecture is one of the supported architectures (see ParseConfig), e.g. "LlamaForCausalLM".
	Architecture string
	// ModelType is the text model's model_type ("llama", "qwen3", "gemma3_text", …).
	ModelType string

	VocabSize             int // V: rows of the embedding and LM head
	HiddenSize            int // H: the residual stream width
	IntermediateSize      int // I: the MLP's inner width
	NumHiddenLayers       int // decoder layers
	NumAttentionHeads     int // Hq
	NumKeyValueHeads      int // Hkv; divides Hq (GQA groups of Hq/Hkv)
	HeadDim               int // D; the family's default unless the file says otherwise
	MaxPositionEmbeddings int // the longest context (prompt plus output) the model supports

	RMSNormEps float64 // added to the mean square in every RMSNorm
	RopeTheta  float64 // the base of the rotary embedding frequencies (of full-attention layers)
	// RopeScaling has Type "default" when the file has no scaling.
	RopeScaling RopeScaling

	// LayerTypes holds each layer's attention, FullAttention or SlidingAttention; nil means every layer
	// is FullAttention.
	LayerTypes []string
	// SlidingWindow is W: a SlidingAttention layer's token attends to the last W positions, its own
	// included. 0 when no window binds: none is set, or it is at least as long as any context the model
	// supports (MaxPositionEmbeddings), and the sliding layers see their whole context.
	SlidingWindow int
	// LocalRopeTheta and LocalRopeScaling are the rotary embedding of SlidingAttention layers when it
	// differs from the full-attention layers' (Gemma 3's rope_local_base_freq, or rope_parameters keyed by
	// layer type); LocalRopeTheta is 0 when every layer rotates by RopeTheta and RopeScaling.
	LocalRopeTheta   float64
	LocalRopeScaling RopeScaling

	// HiddenAct is the gated MLP's activation: ActSiLU ("" means it too) or ActGELUTanh.
	HiddenAct string
	// QKVBias means q_proj, k_proj and v_proj carry biases; OBias that o_proj does.
	QKVBias, OBias bool
	// QKNorm means q_norm and k_norm (weights [HeadDim]) RMS-normalise each query and key head before
	// the rotary embedding.
	QKNorm bool
	// NormOffset is added to every RMSNorm weight before it multiplies (Gemma's (1 + w) norms: 1).
	NormOffset float64
	// SandwichNorm is Gemma's layer: post_attention_layernorm normalises the attention's output before
	// the residual add, pre_feedforward_layernorm precedes the MLP and post_feedforward_layernorm
	// normalises its output (without it, post_attention_layernorm precedes the MLP, as in LLaMA).
	SandwichNorm bool
	// EmbedScale means the embeddings are multiplied by sqrt(HiddenSize), rounded to DType as transformers
	// rounds it to the embedding's dtype.
	EmbedScale bool
	// QueryPreAttnScalar, when positive, makes the attention scale 1/sqrt(QueryPreAttnScalar) instead of
	// 1/sqrt(HeadDim).
	QueryPreAttnScalar float64
	// FinalLogitSoftcap, when positive, caps the logits: c·tanh(logits/c).
	FinalLogitSoftcap float64

	// TieWordEmbeddings means the LM head reuses the embedding matrix.
	TieWordEmbeddings bool
	// BOSTokenIDs and EOSTokenIDs are empty when the file sets them to null.
	BOSTokenIDs, EOSTokenIDs []int32
	// DType is the dtype the checkpoint was saved in (dtype or torch_dtype); in an FP8 checkpoint, that
	// of the parameters it does not quantize.
	DType DType
	// Quantization is the checkpoint's quantization_config (FP8 weights and KV cache scales), or nil for
	// a checkpoint that holds every parameter in DType.
	Quantization *Quantization

	// dtypeGiven records whether the file named a dtype (DType defaults to DTypeF32 otherwise).
	dtypeGiven bool
	// tensorPrefix names the text model's tensors ("" means "model."), lmHead the LM head's ("" means
	// "lm_head.weight"); textConfig says Open must find them among textPrefixes.
	tensorPrefix, lmHead string
	textConfig           bool
}

// Tensor returns the checkpoint name of the text model's tensor suffix: "model." + suffix for most
// checkpoints, "model.language_model." + suffix for a Gemma 3 image-text one.
func (c *Config) Tensor(suffix string) string {
	if c.tensorPrefix == "" {
		return "model." + suffix
	}
	return c.tensorPrefix + suffix
}

// LayerTensor returns the checkpoint name of decoder layer l's tensor suffix ("self_attn.q_proj.weight").
func (c *Config) LayerTensor(l int, suffix string) string {
	return c.Tensor("layers." + strconv.Itoa(l) + "." + suffix)
}

// LMHeadTensor returns the checkpoint name of the LM head's weight (absent when TieWordEmbeddings).
func (c *Config) LMHeadTensor() string {
	if c.lmHead == "" {
		return "lm_head.weight"
	}
	return c.lmHead
}

// LayerType returns layer l's attention, FullAttention or SlidingAttention.
func (c *Config) LayerType(l int) string {
	if c.LayerTypes == nil {
		return FullAttention
	}
	return c.LayerTypes[l]
}

// LayerWindow returns how many positions layer l's token attends to (the last ones, its own included),
// or 0 for all of them.
func (c *Config) LayerWindow(l int) int {
	if c.LayerType(l) == SlidingAttention {
		return c.SlidingWindow
	}
	return 0
}

// LayerRope returns the rotary embedding's base and scaling of layer l.
func (c *Config) LayerRope(l int) (theta float64, scaling RopeScaling) {
	if c.LayerType(l) == SlidingAttention && c.LocalRopeTheta > 0 {
		return c.LocalRopeTheta, c.LocalRopeScaling
	}
	return c.RopeTheta, c.RopeScaling
}

// Activation returns HiddenAct, ActSiLU when it is empty.
func (c *Config) Activation() string {
	if c.HiddenAct == "" {
		return ActSiLU
	}
	return c.HiddenAct
}

// ParseConfig parses and validates the contents of a config.json. It accepts the architectures of
// LLaMA, Mistral, Ministral, Qwen2 (and 2.5), Qwen3 and Gemma 3 (its text model, and the text tower of
// a Gemma3ForConditionalGeneration folder, read from text_config), in the config forms of transformers 4
// (rope_theta, rope_scaling, rope_local_base_freq, sliding_window_pattern, torch_dtype) and 5
// (rope_parameters, possibly keyed by layer type, layer_types, dtype). Fields a file omits take the
// defaults of transformers' configuration class of the architecture; the shape fields are required.
// Anything gollm cannot run exactly (other rope types or architectures, partial rotary embeddings,
// quantizations other than FP8 (see Quantization), MLP biases, bidirectional attention, heads that do
// not divide) is an error wrapping ErrUnsupported or ErrInvalid that names the field.
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

func parseConfig(top fields) (*Config, error) {
	c := &Config{}
	fam, err := parseArchitecture(top, c)
	if err != nil {
		return nil, err
	}
	f := top
	if fam.textConfig {
		if f, err = textFields(top); err != nil {
			return nil, err
		}
		c.textConfig = true
		c.tensorPrefix, c.lmHead = textPrefixes[0].prefix, textPrefixes[0].lmHead
	}
	c.ModelType = fam.modelType

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
			if v, ok = fam.defaultShape[r.key]; !ok {
				return nil, invalid(r.key, "missing")
			}
		}
		if v <= 0 {
			return nil, invalid(r.key, "%d is not positive", v)
		}
		*r.dst = v
	}

	defaultHeadDim := fam.defaultHeadDim
	if defaultHeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 && !f.has("head_dim") {
			return nil, invalid("num_attention_heads", "%d does not divide hidden_size %d and head_dim is not given", c.NumAttentionHeads, c.HiddenSize)
		}
		defaultHeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	defaultKVHeads := fam.defaultKVHeads
	if defaultKVHeads == 0 {
		defaultKVHeads = c.NumAttentionHeads
	}
	optionalInts := []struct {
		key string
		dst *int
		def int
	}{
		{"num_key_value_heads", &c.NumKeyValueHeads, defaultKVHeads},
		{"max_position_embeddings", &c.MaxPositionEmbeddings, fam.defaultContext},
		{"head_dim", &c.HeadDim, defaultHeadDim},
	}
	for _, o := range optionalInts {
		v, ok, err := f.int(o.key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			v = o.def
			if _, null := f[o.key]; null && o.key == "num_key_value_heads" {
				v = c.NumAttentionHeads // null: transformers' classes fall back to num_attention_heads
			}
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
	c.TieWordEmbeddings = fam.defaultTie
	if ok {
		c.TieWordEmbeddings = tie
	}

	for _, t := range []struct {
		key string
		dst *[]int32
		def []int32
	}{{"bos_token_id", &c.BOSTokenIDs, fam.defaultBOS}, {"eos_token_id", &c.EOSTokenIDs, fam.defaultEOS}} {
		ids, present, err := f.tokenIDs(t.key)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !present {
			ids = slices.Clone(t.def)
		}
		for _, id := range ids {
			if int(id) >= c.VocabSize {
				return nil, invalid(t.key, "token id %d is not below vocab_size %d", id, c.VocabSize)
			}
		}
		*t.dst = ids
	}

	for _, step := range []func(fields, *Config, *family) error{
		parseConfigDType, parseActivation, parseBiases, parseLayerTypes, parseRopes, parseGemma, parseQuantization,
	} {
		if err := step(f, c, fam); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseArchitecture finds the config's family from architectures, or from model_type alone.
func parseArchitecture(f fields, c *Config) (*family, error) {
	modelType, hasModelType, err := f.string("model_type")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if f.has("architectures") {
		var archs []string
		if err := json.Unmarshal(f["architectures"], &archs); err != nil {
			return nil, invalid("architectures", "want a list of strings, got %s", abbreviate(f["architectures"]))
		}
		if len(archs) != 1 {
			return nil, unsupported("architectures", "want exactly one architecture, got %q", archs)
		}
		c.Architecture = archs[0]
		fam, ok := families[c.Architecture]
		if !ok {
			return nil, unsupported("architectures", "%q (supported: %s)", c.Architecture, strings.Join(slices.Sorted(maps.Keys(families)), ", "))
		}
		if want := modelTypeOf(c.Architecture); hasModelType && modelType != want {
			return nil, invalid("model_type", "%q does not match architecture %s (want %q)", modelType, c.Architecture, want)
		}
		return fam, nil
	}
	if modelType == "" {
		return nil, invalid("architectures", "missing, and no model_type")
	}
	arch, ok := modelTypes[modelType]
	if !ok {
		return nil, unsupported("model_type", "%q (supported: %s)", modelType, strings.Join(slices.Sorted(maps.Keys(modelTypes)), ", "))
	}
	c.Architecture = arch
	return families[arch], nil
}

// modelTypeOf returns the model_type a config.json of architecture arch carries.
func modelTypeOf(arch string) string {
	for mt, a := range modelTypes {
		if a == arch {
			return mt
		}
	}
	return ""
}

// sharedKeys are the members of a multimodal config that hold for the whole model, text model included:
// taken from the top level when text_config lacks them, and required to agree when both have them.
// topKeys are the whole model's special tokens, which override text_config's (transformers saves the
// text model's defaults there).
var (
	sharedKeys = []string{"dtype", "torch_dtype", "tie_word_embeddings", "quantization_config"}
	topKeys    = []string{"bos_token_id", "eos_token_id"}
)

// textFields returns the text model's fields of a multimodal config: its text_config (whose model_type,
// if given, must be the text model's), with sharedKeys and topKeys from the top level.
func textFields(top fields) (fields, error) {
	if !top.has("text_config") {
		return nil, invalid("text_config", "missing")
	}
	f, err := decodeObject(top["text_config"])
	if err != nil {
		return nil, invalid("text_config", "want an object: %v", err)
	}
	if mt, ok, err := f.string("model_type"); err != nil {
		return nil, fmt.Errorf("%w: in text_config: %w", ErrInvalid, err)
	} else if ok && mt != "gemma3_text" {
		return nil, unsupported("text_config.model_type", "%q (supported: gemma3_text)", mt)
	}
	for _, key := range sharedKeys {
		outer, inOuter := top[key]
		inner, inInner := f[key]
		switch {
		case !inOuter:
		case !inInner:
			f[key] = outer
		case !jsonEqual(outer, inner):
			return nil, invalid("text_config."+key, "%s disagrees with %s at the top level", abbreviate(inner), abbreviate(outer))
		}
	}
	for _, key := range topKeys {
		if outer, ok := top[key]; ok {
			f[key] = outer
		}
	}
	return f, nil
}

// jsonEqual reports whether two JSON values decode to the same value.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// parseConfigDType reads dtype (transformers 5) or torch_dtype (transformers 4).
func parseConfigDType(f fields, c *Config, _ *family) error {
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

// parseRopes reads the rotary embedding: one for every layer (parseRope), or Gemma 3's one per layer
// type (parseLayerRopes).
func parseRopes(f fields, c *Config, fam *family) error {
	if fam.defaultLocalTheta > 0 {
		return parseLayerRopes(f, c, fam)
	}
	if f.has("rope_parameters") {
		if obj, err := decodeObject(f["rope_parameters"]); err == nil && (obj[FullAttention] != nil || obj[SlidingAttention] != nil) {
			return unsupported("rope_parameters", "keyed by layer type, but %s rotates every layer alike", c.Architecture)
		}
	}
	return parseRope(f, c, fam.defaultTheta)
}

// parseRope reads rope_theta and rope_scaling (transformers 4) and rope_parameters (transformers 5).
// When both styles are present they must agree. defaultTheta is the base when the file names none.
func parseRope(f fields, c *Config, defaultTheta float64) error {
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
		theta = defaultTheta
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

// parseLayerRopes reads Gemma 3's two rotary embeddings: full-attention layers rotate by rope_theta
// and rope_scaling, sliding layers by rope_local_base_freq without scaling (transformers 4), or each
// layer type by its entry of rope_parameters (transformers 5), whose missing members take the
// transformers 4 keys' values or the defaults, as Gemma3TextConfig fills them in. When both forms are
// present they must agree.
func parseLayerRopes(f fields, c *Config, fam *family) error {
	if err := checkPartialRotary(f, "partial_rotary_factor"); err != nil {
		return err
	}
	type rope struct {
		theta    float64
		hasTheta bool // the file names it
		scaling  *RopeScaling
	}
	full, local := rope{theta: fam.defaultTheta}, rope{theta: fam.defaultLocalTheta}
	for _, k := range []struct {
		key string
		dst *rope
	}{{"rope_theta", &full}, {"rope_local_base_freq", &local}} {
		v, ok, err := f.float(k.key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if ok {
			k.dst.theta, k.dst.hasTheta = v, true
		}
	}
	if f.has("rope_scaling") {
		rs, t, ok, err := parseRopeObject(f["rope_scaling"], "rope_scaling")
		if err != nil {
			return err
		}
		if ok && (!full.hasTheta || t != full.theta) {
			return invalid("rope_scaling.rope_theta", "%g disagrees with rope_theta", t)
		}
		full.scaling = &rs
	}
	if f.has("rope_parameters") {
		obj, err := decodeObject(f["rope_parameters"])
		if err != nil {
			return invalid("rope_parameters", "want an object: %v", err)
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if key != FullAttention && key != SlidingAttention {
				return invalid("rope_parameters."+key, "want one entry per layer type (%s, %s)", FullAttention, SlidingAttention)
			}
		}
		for _, k := range []struct {
			key string
			dst *rope
			old string
		}{{FullAttention, &full, "rope_theta"}, {SlidingAttention, &local, "rope_local_base_freq"}} {
			if !obj.has(k.key) {
				continue
			}
			field := "rope_parameters." + k.key
			rs, t, ok, err := parseRopeObject(obj[k.key], field)
			if err != nil {
				return err
			}
			if ok {
				if k.dst.hasTheta && t != k.dst.theta {
					return invalid(field+".rope_theta", "%g disagrees with %s %g", t, k.old, k.dst.theta)
				}
				k.dst.theta = t
			}
			if k.dst.scaling != nil && *k.dst.scaling != rs {
				return invalid(field, "%+v disagrees with rope_scaling %+v", rs, *k.dst.scaling)
			}
			k.dst.scaling = &rs
		}
	}
	for _, r := range []struct {
		key string
		v   float64
	}{{"rope_theta", full.theta}, {"rope_local_base_freq", local.theta}} {
		if !(r.v > 0) {
			return invalid(r.key, "%g is not positive", r.v)
		}
	}
	c.RopeTheta, c.RopeScaling = full.theta, RopeScaling{Type: "default"}
	if full.scaling != nil {
		c.RopeScaling = *full.scaling
	}
	localScaling := RopeScaling{Type: "default"}
	if local.scaling != nil {
		localScaling = *local.scaling
	}
	if local.theta != c.RopeTheta || localScaling != c.RopeScaling {
		c.LocalRopeTheta, c.LocalRopeScaling = local.theta, localScaling
	}
	return nil
}

// parseActivation reads the gated MLP's activation (hidden_act, or Gemma 3's hidden_activation, whose
// configuration class ignores hidden_act: a file that sets both must agree).
func parseActivation(f fields, c *Config, fam *family) error {
	act, ok, err := f.string(fam.actKey)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !ok {
		act = fam.defaultAct
	}
	if act != ActSiLU && act != ActGELUTanh {
		return unsupported(fam.actKey, "%q (supported: %s, %s)", act, ActSiLU, ActGELUTanh)
	}
	if fam.actKey != "hidden_act" {
		if other, ok, err := f.string("hidden_act"); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		} else if ok && other != act {
			return invalid("hidden_act", "%q disagrees with %s %q", other, fam.actKey, act)
		}
	}
	c.HiddenAct = act
	return nil
}

// parseBiases reads which projections carry biases: attention_bias (q, k, v and o) where the
// architecture has it, Qwen2's fixed q, k and v biases; MLP biases are not supported.
func parseBiases(f fields, c *Config, fam *family) error {
	for _, key := range []string{"attention_bias", "mlp_bias"} {
		v, _, err := f.bool(key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if key == "attention_bias" && fam.attentionBias {
			c.QKVBias, c.OBias = v, v
			continue
		}
		if v {
			return unsupported(key, "true (%s has no such biases)", c.Architecture)
		}
	}
	c.QKVBias = c.QKVBias || fam.qkvBias
	c.QKNorm = fam.qkNorm
	return nil
}

// parseLayerTypes reads which layers slide and over how many positions, as the architecture's
// configuration class decides it (see windowRule). A config whose layer_types the architecture ignores
// must agree with what it does instead. Layers whose window covers every context the model supports
// are full-attention layers.
func parseLayerTypes(f fields, c *Config, fam *family) error {
	window := 0
	if fam.window != windowNone {
		w, ok, err := f.int("sliding_window")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if _, present := f["sliding_window"]; !present {
			w, ok = fam.defaultWindow, true
		}
		if ok {
			if w <= 0 {
				return invalid("sliding_window", "%d is not positive", w)
			}
			window = w
		}
	}
	if fam.window == windowQwen {
		use, _, err := f.bool("use_sliding_window")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !use {
			window = 0
		}
	}
	given, err := readLayerTypes(f, c.NumHiddenLayers)
	if err != nil {
		return err
	}
	types := make([]string, c.NumHiddenLayers)
	for i := range types {
		types[i] = FullAttention
	}
	switch fam.window {
	case windowNone:
		if slices.Contains(given, SlidingAttention) {
			return unsupported("layer_types", "sliding layers, but %s has no sliding-window attention", c.Architecture)
		}
	case windowAll:
		if window > 0 {
			for i := range types {
				types[i] = SlidingAttention
			}
		}
		if given != nil && window > 0 && !slices.Equal(given, types) {
			return unsupported("layer_types", "%s slides every layer and ignores layer_types (MinistralForCausalLM reads them)", c.Architecture)
		}
	case windowLayerTypes:
		for i := range types {
			if window > 0 {
				types[i] = SlidingAttention
			}
		}
	case windowQwen:
		first, ok, err := f.int("max_window_layers")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			first = 28 // Qwen2Config's and Qwen3Config's default
		}
		if first < 0 {
			return invalid("max_window_layers", "%d is negative", first)
		}
		for i := first; i < len(types) && window > 0; i++ {
			types[i] = SlidingAttention
		}
	case windowPattern:
		pattern, ok, err := f.int("sliding_window_pattern")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			pattern = 6 // Gemma3TextConfig's default
		}
		if pattern <= 0 {
			return invalid("sliding_window_pattern", "%d is not positive", pattern)
		}
		for i := range types {
			if (i+1)%pattern != 0 {
				types[i] = SlidingAttention
			}
		}
	}
	if given != nil && fam.window != windowNone && fam.window != windowAll {
		types = given
	}
	if !slices.Contains(types, SlidingAttention) {
		return nil
	}
	c.LayerTypes = types
	// Without a window, or with one at least as long as any context, a sliding layer sees everything
	// (and keeps its type, which chooses Gemma 3's rotary embedding).
	if window > 0 && window < c.MaxPositionEmbeddings {
		c.SlidingWindow = window
	}
	return nil
}

// readLayerTypes reads layer_types: nil when absent, else one known attention kind per layer
// (transformers' legacy "attention" read as FullAttention).
func readLayerTypes(f fields, numLayers int) ([]string, error) {
	if !f.has("layer_types") {
		return nil, nil
	}
	var types []string
	if err := json.Unmarshal(f["layer_types"], &types); err != nil {
		return nil, invalid("layer_types", "want a list of strings, got %s", abbreviate(f["layer_types"]))
	}
	if len(types) != numLayers {
		return nil, invalid("layer_types", "%d entries for %d layers", len(types), numLayers)
	}
	for i, t := range types {
		switch t {
		case FullAttention, SlidingAttention:
		case "attention":
			types[i] = FullAttention
		default:
			return nil, unsupported(fmt.Sprintf("layer_types[%d]", i), "%q (supported: %s, %s)", t, FullAttention, SlidingAttention)
		}
	}
	return types, nil
}

// parseGemma reads what only Gemma's layers have: the attention scale's query_pre_attn_scalar and the
// final logits' soft cap. attn_logit_softcapping is accepted without effect, as in transformers, whose
// Gemma3Attention does not hand it to the attention (Gemma 3 replaced Gemma 2's soft cap by q/k norms).
func parseGemma(f fields, c *Config, fam *family) error {
	if !fam.gemma {
		return nil
	}
	c.NormOffset, c.SandwichNorm, c.EmbedScale = 1, true, true
	scalar, ok, err := f.float("query_pre_attn_scalar")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !ok {
		scalar = 256 // Gemma3TextConfig's default
	}
	if !(scalar > 0) {
		return invalid("query_pre_attn_scalar", "%g is not positive", scalar)
	}
	c.QueryPreAttnScalar = scalar
	for _, key := range []string{"final_logit_softcapping", "attn_logit_softcapping"} {
		v, ok, err := f.float(key)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if ok && !(v > 0) {
			return invalid(key, "%g is not positive", v)
		}
		if ok && key == "final_logit_softcapping" && fam.finalSoftcap {
			c.FinalLogitSoftcap = v
		}
	}
	if bidi, _, err := f.bool("use_bidirectional_attention"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	} else if bidi {
		return unsupported("use_bidirectional_attention", "true (gollm runs causal language models)")
	}
	return nil
}
