package weights

// Attention kinds of a decoder layer, as config.json's layer_types names them.
const (
	// FullAttention layers attend to every earlier position.
	FullAttention = "full_attention"
	// SlidingAttention layers attend to the last Config.SlidingWindow positions, the token's own included.
	SlidingAttention = "sliding_attention"
)

// Activations of the gated MLP (config.json's hidden_act, or hidden_activation for Gemma 3).
const (
	// ActSiLU is LLaMA's SwiGLU: silu(gate) · up.
	ActSiLU = "silu"
	// ActGELUTanh is Gemma's GeGLU: gelu(gate) · up with the tanh approximation of GELU.
	ActGELUTanh = "gelu_pytorch_tanh"
)

// windowRule says how an architecture's config.json chooses the sliding-window layers.
type windowRule uint8

const (
	// windowNone: no layer slides; sliding_window is ignored (LlamaAttention has no window).
	windowNone windowRule = iota
	// windowAll: every layer slides when sliding_window is set (MistralModel's one mask for all layers).
	windowAll
	// windowLayerTypes: layer_types, else every layer slides when sliding_window is set (Ministral).
	windowLayerTypes
	// windowQwen: use_sliding_window turns the window on; layer_types, else the layers from
	// max_window_layers on slide (Qwen2Config, Qwen3Config).
	windowQwen
	// windowPattern: layer_types, else every sliding_window_pattern-th layer is full and the rest slide
	// (Gemma3TextConfig).
	windowPattern
)

// family is what an architecture fixes that its config.json does not say, and the defaults transformers'
// configuration class gives the fields a file may omit. It is the one place gollm branches on an
// architecture's name: everything downstream reads the Config it produces. To add a family that is made
// of the same parts, add an entry here (and its model_type to modelTypes); a new part needs a Config
// field, a tensor in TensorShapes and, in package model, its op.
type family struct {
	modelType string // the model_type the architecture implies
	// textConfig says the text model's fields are in config.json's text_config (a multimodal folder whose
	// vision tower gollm does not run); its tensors are found under one of textPrefixes.
	textConfig bool

	// defaultShape holds defaults of the shape fields, for the families whose published config files
	// leave some of them to the configuration class (Gemma 3's text_config); the others require them.
	defaultShape       map[string]int
	defaultContext     int     // max_position_embeddings
	defaultKVHeads     int     // num_key_value_heads; 0 means num_attention_heads
	defaultHeadDim     int     // head_dim; 0 means hidden_size / num_attention_heads
	defaultBOS         []int32 // bos_token_id; nil means none
	defaultEOS         []int32 // eos_token_id; nil means none
	defaultTie         bool    // tie_word_embeddings
	defaultTheta       float64 // rope_theta (of full-attention layers)
	defaultLocalTheta  float64 // rope_local_base_freq of sliding layers; 0: the layers share one rotary embedding
	actKey, defaultAct string
	window             windowRule
	defaultWindow      int // sliding_window when the key is absent

	qkvBias       bool // q_proj, k_proj and v_proj always carry biases (Qwen2)
	attentionBias bool // attention_bias puts biases on q_proj, k_proj, v_proj and o_proj
	qkNorm        bool // q_norm and k_norm
	gemma         bool // (1 + w) norms, sandwich norms, scaled embeddings, query_pre_attn_scalar, final_logit_softcapping
	finalSoftcap  bool // the causal-LM head applies final_logit_softcapping
}

// families maps each supported architecture to its family.
var families = map[string]*family{
	"LlamaForCausalLM": {
		modelType: "llama", defaultContext: 2048, defaultBOS: []int32{1}, defaultEOS: []int32{2},
		defaultTheta: 10000, actKey: "hidden_act", defaultAct: ActSiLU, window: windowNone, attentionBias: true,
	},
	"MistralForCausalLM": {
		modelType: "mistral", defaultContext: 131072, defaultKVHeads: 8, defaultBOS: []int32{1}, defaultEOS: []int32{2},
		defaultTheta: 10000, actKey: "hidden_act", defaultAct: ActSiLU, window: windowAll, defaultWindow: 4096,
	},
	"MinistralForCausalLM": {
		modelType: "ministral", defaultContext: 131072, defaultKVHeads: 8, defaultBOS: []int32{1}, defaultEOS: []int32{2},
		defaultTheta: 10000, actKey: "hidden_act", defaultAct: ActSiLU, window: windowLayerTypes, defaultWindow: 4096,
	},
	"Qwen2ForCausalLM": {
		modelType: "qwen2", defaultContext: 32768, defaultKVHeads: 32, defaultTheta: 10000, actKey: "hidden_act",
		defaultAct: ActSiLU, window: windowQwen, defaultWindow: 4096, qkvBias: true,
	},
	"Qwen3ForCausalLM": {
		modelType: "qwen3", defaultContext: 32768, defaultKVHeads: 32, defaultHeadDim: 128, defaultTheta: 10000,
		actKey: "hidden_act", defaultAct: ActSiLU, window: windowQwen, defaultWindow: 4096, attentionBias: true, qkNorm: true,
	},
	"Gemma3ForCausalLM": {
		modelType: "gemma3_text", defaultContext: 131072, defaultKVHeads: 4, defaultHeadDim: 256,
		defaultShape: gemma3Shape,
		defaultBOS:   []int32{2}, defaultEOS: []int32{1}, defaultTie: true, defaultTheta: 1e6, defaultLocalTheta: 1e4,
		actKey: "hidden_activation", defaultAct: ActGELUTanh, window: windowPattern, defaultWindow: 4096,
		attentionBias: true, qkNorm: true, gemma: true, finalSoftcap: true,
	},
	// The text tower of a Gemma 3 image-text checkpoint. Gemma3ForConditionalGeneration's head does not
	// apply final_logit_softcapping (transformers' forward leaves it out), so neither does gollm.
	"Gemma3ForConditionalGeneration": {
		modelType: "gemma3_text", textConfig: true, defaultContext: 131072, defaultKVHeads: 4, defaultHeadDim: 256,
		defaultShape: gemma3Shape,
		defaultBOS:   []int32{2}, defaultEOS: []int32{1}, defaultTie: true, defaultTheta: 1e6, defaultLocalTheta: 1e4,
		actKey: "hidden_activation", defaultAct: ActGELUTanh, window: windowPattern, defaultWindow: 4096,
		attentionBias: true, qkNorm: true, gemma: true,
	},
}

// gemma3Shape are Gemma3TextConfig's defaults of the shape fields.
var gemma3Shape = map[string]int{
	"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
}

// modelTypes maps a config.json's model_type to the architecture it implies, for files without
// architectures, and says which model_type each architecture's file may carry.
var modelTypes = map[string]string{
	"llama":       "LlamaForCausalLM",
	"mistral":     "MistralForCausalLM",
	"ministral":   "MinistralForCausalLM",
	"qwen2":       "Qwen2ForCausalLM",
	"qwen3":       "Qwen3ForCausalLM",
	"gemma3_text": "Gemma3ForCausalLM",
	"gemma3":      "Gemma3ForConditionalGeneration",
}

// textPrefixes are where a multimodal checkpoint keeps its text model's tensors, with the name of its
// LM head: transformers 4.52 and later save model.language_model.* and lm_head.weight, earlier versions
// language_model.model.* and language_model.lm_head.weight. Open picks the one the checkpoint has.
var textPrefixes = []struct{ prefix, lmHead string }{
	{"model.language_model.", "lm_head.weight"},
	{"language_model.model.", "language_model.lm_head.weight"},
}

// otherTowers are the tensors of a multimodal checkpoint that gollm leaves alone (the vision tower and
// its projector), by name prefix, in both of transformers' layouts.
var otherTowers = []string{
	"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.",
}
