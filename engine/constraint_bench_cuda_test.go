//go:build cuda

package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/internal/gputest"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// llama32_1B is meta-llama/Llama-3.2-1B's config.json (its hyperparameters; the weights are random).
const llama32_1B = `{
	"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
	"intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
	"head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
	"rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
	"tie_word_embeddings": true, "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"
}`

// synthVocab is a stand-in for a 128k byte-level vocabulary (no tokenizer file travels with the tests):
// ids below 256 are the bytes, the rest strings of 2 to 8 characters drawn from the letters, digits and
// JSON punctuation, the last 256 ids special. It is also the engine's tokenizer for the benchmark.
type synthVocab struct{ tokens [][]byte }

func newSynthVocab(size int) *synthVocab {
	const alphabet = `abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "{}[]:,.-_`
	rng := rand.New(rand.NewPCG(1, 2))
	v := &synthVocab{tokens: make([][]byte, size)}
	for id := range size - 256 {
		if id < 256 {
			v.tokens[id] = []byte{byte(id)}
			continue
		}
		n := 2 + rng.IntN(7)
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		v.tokens[id] = b
	}
	return v
}

func (v *synthVocab) TokenBytes(id int32) ([]byte, bool) {
	if id < 0 || int(id) >= len(v.tokens) || v.tokens[id] == nil {
		return nil, false
	}
	return v.tokens[id], true
}

func (v *synthVocab) Decode(ids []int32, _ bool) string {
	var b []byte
	for _, id := range ids {
		if t, ok := v.TokenBytes(id); ok {
			b = append(b, t...)
		}
	}
	return string(b)
}

// BenchmarkCUDAConstrainedStep is BenchmarkConstrainedStep on the GPU: a Llama-3.2-1B-shaped model with
// random bfloat16 weights, 64 tokens per request at temperature 1, at batch 1 and 64, without a
// constraint ("none"), with a JSON Schema constraint on every request ("constraint": masks computed on
// the host while the step's forward runs, uploaded in one copy and read by the sampling kernel beside
// the logits, pipelined), and both with the draws on the host ("host", "constraint-host": a zero logit
// bias, the path of a request with logprobs). Reports the decode step (step-ms: the median interval
// between two tokens of the batch) and its phases (benchConstrainedSteps); "constraint" should stay
// within 5% of "none".
//
//	go test -tags cuda -run XXX -bench CUDAConstrainedStep -benchtime 5x ./engine
func BenchmarkCUDAConstrainedStep(b *testing.B) {
	_, _, err := model.ResolveDevice(model.DeviceCUDA)
	gputest.Require(b, err)
	cfg, err := weights.ParseConfig([]byte(llama32_1B))
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.LoadRandom(cfg, 1, model.Options{Device: model.DeviceCUDA, NumBlocks: 64 * 8, BlockSize: 16}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	sv := newSynthVocab(cfg.VocabSize)
	vocab, err := constraint.NewVocabulary(sv, cfg.VocabSize)
	if err != nil {
		b.Fatal(err)
	}
	vocab.Warm()
	g, err := constraint.Compile(constraint.Spec{Kind: constraint.JSONSchema, Text: benchSchema}, vocab, constraint.Options{})
	if err != nil {
		b.Fatal(err)
	}
	prompt := []int32{128000, 1000, 2000, 3000, 4000, 5000, 6000, 7000}
	for _, batch := range []int{1, 64} {
		for _, mode := range []string{"none", "constraint", "host", "constraint-host"} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, mode), func(b *testing.B) {
				benchConstrainedSteps(b, m, sv, g, prompt, batch, 64, mode)
			})
		}
	}
}
