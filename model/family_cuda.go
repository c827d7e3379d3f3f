//go:build cuda

package model

import (
	"fmt"
	"strings"

	"github.com/gollm/gollm/weights"
)

// The CUDA backend does not run the ops and layer features of the families beyond LLaMA yet (sliding
// windows, per-layer rotary tables, biases, q/k norms, GeGLU, scaled embeddings and attention, soft caps).
// checkFamily refuses, at load, a model that needs any of them, so that no one is given wrong answers;
// the ops below are then never called.

// checkFamily returns an error naming every feature of cfg and s that the CUDA backend does not run yet.
func (b *cudaBackend) checkFamily(cfg *weights.Config, s Shape) error {
	var missing []string
	for _, f := range []struct {
		name string
		need bool
	}{
		{"sliding-window attention and KV groups", cfg.SlidingWindow > 0 || len(s.KVGroups) > 0},
		{"a second rotary table for sliding layers", s.LocalRopeInvFreq != nil},
		{"q/k/v or o biases", cfg.QKVBias || cfg.OBias},
		{"q/k norms", cfg.QKNorm},
		{"GeGLU (gelu_pytorch_tanh)", cfg.Activation() != weights.ActSiLU},
		{"(1 + w) norm weights", cfg.NormOffset != 0},
		{"post-attention and post-MLP norms", cfg.SandwichNorm},
		{"scaled embeddings", s.EmbedScale != 0},
		{"query_pre_attn_scalar", s.AttentionScale != 0},
		{"final logit soft-capping", cfg.FinalLogitSoftcap != 0},
	} {
		if f.need {
			missing = append(missing, f.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("cuda backend: %s: not supported on CUDA yet: %s (the CPU backend runs it: --device cpu): %w",
		cfg.Architecture, strings.Join(missing, ", "), weights.ErrUnsupported)
}

// notOnCUDA is the panic of an op that checkFamily keeps from being called.
func notOnCUDA(op string) string {
	return "cuda backend: " + op + " called: not supported on CUDA yet (Load should have refused the model)"
}

func (b *cudaBackend) QKNorm(qkv Tensor, q, k Weight, eps float32) { panic(notOnCUDA("QKNorm")) }
func (b *cudaBackend) GeGLU(dst, gateUp Tensor)                    { panic(notOnCUDA("GeGLU")) }
func (b *cudaBackend) Softcap(x Tensor, c float32)                 { panic(notOnCUDA("Softcap")) }
