package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gollm/gollm/attention"
)

// planModel is the shape of a model whose steps the plan tests record, and its family's parts.
type planModel struct {
	name                                       string
	hidden, inter, layers, heads, kvHeads, dim int
	vocab                                      int
	// The family's parts: q/k/v biases (Qwen2), q/k norms (Qwen3, Gemma 3), Gemma's sublayer-output norms,
	// GeGLU and final soft cap; window, when positive, the sliding window of every layer but each
	// fullEvery-th (Gemma 3's five sliding to one full: 6; 0 every layer slides).
	bias, qkNorm, sandwich, gelu, softcap bool
	window, fullEvery                     int
}

var (
	planLlama3_8B  = planModel{name: "llama3-8b", hidden: 4096, inter: 14336, layers: 32, heads: 32, kvHeads: 8, dim: 128, vocab: 128256}
	planLlama32_1B = planModel{name: "llama3.2-1b", hidden: 2048, inter: 8192, layers: 16, heads: 32, kvHeads: 8, dim: 64, vocab: 128256}
	planQwen3_8B   = planModel{name: "qwen3-8b", hidden: 4096, inter: 12288, layers: 36, heads: 32, kvHeads: 8, dim: 128,
		vocab: 151936, qkNorm: true}
	planQwen25_7B = planModel{name: "qwen2.5-7b", hidden: 3584, inter: 18944, layers: 28, heads: 28, kvHeads: 4, dim: 128,
		vocab: 152064, bias: true}
	planGemma3_12B = planModel{name: "gemma3-12b", hidden: 3840, inter: 15360, layers: 48, heads: 16, kvHeads: 8, dim: 256,
		vocab: 262208, qkNorm: true, sandwich: true, gelu: true, softcap: true, window: 1024, fullEvery: 6}
	planMistral7B = planModel{name: "mistral-7b-v0.1", hidden: 4096, inter: 14336, layers: 32, heads: 32, kvHeads: 8, dim: 128,
		vocab: 32000, window: 4096}
)

// layerWindow is layer l's sliding window (0: none).
func (m planModel) layerWindow(l int) int {
	if m.window > 0 && (m.fullEvery == 0 || l%m.fullEvery != m.fullEvery-1) {
		return m.window
	}
	return 0
}

// planFacts are an H100's or an H200's facts ("h100", "h200") for a bf16 model m as the plan sees them:
// 132 SMs, every kernel loaded (the skinny product and GEMM, the GEMM's SwiGLU map, the norm folds, the
// decode kernels) with the occupancies attention's tests assume (head_dim 128: 2 programs an SM of
// every mma kernel; head_dim 64: 4 of the grouped ones, 3 of split-k), the drivers' peak bandwidths,
// and the default tunings.
func planFacts(device string, m planModel) stepFacts {
	bw := 2 * 2619e6 * 5120 / 8.0
	if device == "h200" {
		bw = 4.81e12
	}
	return stepFacts{sms: 132, hidden: m.hidden, headDim: m.dim, gemv: true, gemm: true, gemmSwiGLU: true,
		normFold: true, normSlots: 2*m.layers + 1, decodeKernels: true,
		attn: attention.DecodeDevice{SMs: 132, L2Bytes: 50 << 20, PeakBandwidth: bw, ProgramsPerSM: func(k attention.DecodeKernel) int {
			switch {
			case k.HeadDim == 256: // three stages of K and V in 96 KiB: two programs an SM
				return 2
			case k.Path == attention.PathFMA:
				return 4
			case k.HeadDim == 64 && k.Kernel == attention.SplitK:
				return 3
			case k.HeadDim == 64:
				return 4
			}
			return 2
		}},
		numHeads: m.heads, numKVHeads: m.kvHeads, blockSize: 16, attnDType: attention.BF16, tune: defaultGemvTuning}
}

// recordedStep is a step of model m recorded as Model.Forward records it: rows token rows; logits of
// every row (a decode step: no gather) or, with gather, of one row. The names index the ops the tests
// look at: the first layer's, the last layer's down product and the final ones.
func recordedStep(m planModel, rows int, gather bool) (ops []stepOp, at map[string]int) {
	const (
		hidden tensorID = iota + 1
		normed
		qkv
		attn
		proj
		gateUp
		act
		picked
		logits
	)
	at = map[string]int{}
	add := func(name string, op stepOp) {
		if op.rows == 0 {
			op.rows = rows
		}
		op.capacity, op.graphable = 256, true
		if name != "" {
			if _, seen := at[name]; !seen {
				at[name] = len(ops)
			}
		}
		ops = append(ops, op)
	}
	qkvCols := (m.heads + 2*m.kvHeads) * m.dim
	add("embed", stepOp{kind: opEmbed, dst: hidden, in: m.hidden})
	pending := tensorID(0)
	for l := range m.layers {
		norm := "norm0"
		if l == 1 {
			norm = "norm1"
		}
		w := m.layerWindow(l)
		add(norm, stepOp{kind: opNorm, dst: normed, add: pending, resid: hidden, in: m.hidden})
		add("qkv", stepOp{kind: opMatMul, dst: qkv, src: normed, out: qkvCols, in: m.hidden, bias: m.bias})
		if m.qkNorm {
			add("qknorm", stepOp{kind: opQKNorm, dst: qkv, src: qkv})
		}
		rope, attention := "rope", "attention"
		if m.window > 0 && w == 0 { // a full layer of a model whose others slide
			rope, attention = "ropeFull", "attentionFull"
		}
		add(rope, stepOp{kind: opRoPE, src: qkv, window: w})
		add(attention, stepOp{kind: opAttention, dst: attn, src: qkv, window: w})
		add("o", stepOp{kind: opMatMul, dst: proj, src: attn, out: m.hidden, in: m.heads * m.dim})
		if m.sandwich {
			add("attnOutNorm", stepOp{kind: opNorm, dst: proj, resid: proj, in: m.hidden})
		}
		add("post0", stepOp{kind: opNorm, dst: normed, add: proj, resid: hidden, in: m.hidden})
		add("gateup", stepOp{kind: opMatMul, dst: gateUp, src: normed, out: 2 * m.inter, in: m.hidden})
		if m.gelu {
			add("swiglu", stepOp{kind: opGeGLU, dst: act, src: gateUp, out: m.inter, in: 2 * m.inter})
		} else {
			add("swiglu", stepOp{kind: opSwiGLU, dst: act, src: gateUp, out: m.inter, in: 2 * m.inter})
		}
		down := "down"
		if l == m.layers-1 {
			down = "downLast"
		}
		add(down, stepOp{kind: opMatMul, dst: proj, src: act, out: m.hidden, in: m.inter})
		if m.sandwich {
			add("mlpOutNorm", stepOp{kind: opNorm, dst: proj, resid: proj, in: m.hidden})
		}
		pending = proj
	}
	add("final", stepOp{kind: opNorm, dst: normed, add: pending, resid: hidden, in: m.hidden})
	src, n := normed, rows
	if gather {
		src, n = picked, 1
		add("gather", stepOp{kind: opGather, rows: n, dst: picked, src: normed, in: m.hidden})
	}
	add("lmhead", stepOp{kind: opMatMul, rows: n, dst: logits, src: src, out: m.vocab, in: m.hidden})
	if m.softcap {
		add("softcap", stepOp{kind: opSoftcap, rows: n, dst: logits, src: logits, in: m.vocab})
	}
	add("argmax", stepOp{kind: opArgmax, rows: n, src: logits, in: m.vocab})
	return ops, at
}

// describe says how op i runs under plans, in the words of TestPlanStep's table.
func describe(ops []stepOp, plans []opPlan, i int, f *stepFacts) string {
	op, p := &ops[i], &plans[i]
	switch op.kind {
	case opMatMul:
		mm := p.mm
		var w []string
		switch mm.path {
		case pathGemv:
			w = append(w, "gemv", [...]string{"plain", "swiglu", "rope", "argmax", "geglu"}[mm.mode])
			if mm.accumulate {
				w = append(w, "accumulate")
			}
			if p.foldOut >= 0 {
				w = append(w, "normOut")
			}
			if p.foldIn >= 0 {
				w = append(w, "normIn")
			}
		case pathGemm:
			switch {
			case mm.mode == gemvSwiGLU:
				w = append(w, "gemm", "swiglu")
			case mm.accumulate:
				w = append(w, "gemm", "plain", "accumulate")
			case mm.mode == gemvArgmax:
				w = append(w, "gemm", "argmax")
			default:
				w = append(w, "gemm", "plain")
			}
		case pathCuBLAS:
			w = append(w, "cublas")
			if mm.accumulate {
				w = append(w, "accumulate")
			}
			if sp := mm.split; sp.parts > 1 && sp.rows {
				w = append(w, fmt.Sprintf("split-rows %d", sp.parts))
			} else if sp.parts > 1 {
				w = append(w, fmt.Sprintf("split-k %d", sp.parts))
			}
		}
		if p.bias {
			w = append(w, "bias")
		}
		return strings.Join(w, " ")
	case opNorm:
		switch {
		case p.folded:
			return "folded"
		case p.skip:
			return "into the next norm"
		case p.inPlace:
			return "in place"
		case p.preNorm >= 0:
			return "norm add"
		case p.add == addPartials:
			return fmt.Sprintf("add %d partials", p.addParts)
		case p.add == addNone:
			return "add none"
		case op.add == 0:
			return "no add"
		}
		return "add"
	case opRoPE:
		switch {
		case !p.skip && p.qkNorm >= 0:
			return "kernel qknorm"
		case !p.skip:
			return "kernel"
		case plans[i+1].attn.RoPE:
			return "attention"
		}
		return "qkv"
	case opAttention:
		if !p.decode {
			return "prefill"
		}
		d := fmt.Sprintf("%s %v %dx%d", p.attn.Kernel.Name, p.attn.Plan.Kernel, p.attn.Plan.NumPartitions, p.attn.Plan.PartitionTokens)
		if p.ropeBias >= 0 {
			d += " bias"
		}
		return d
	case opQKNorm:
		if p.skip {
			return "into rope"
		}
		return "kernel"
	case opSwiGLU, opGeGLU, opSoftcap:
		if p.skip {
			return "fused"
		}
		return "kernel"
	case opArgmax:
		switch p.argmax {
		case argmaxGemv:
			return "gemv"
		case argmaxGemm:
			return fmt.Sprintf("gemm %d", gemmBlocks(op.in, f.gemmPlan(op.in, ops[p.target].in)))
		}
		return "chunks"
	}
	return op.kind.String()
}

// TestPlanStep is the step plan's regression oracle: how every op of Llama-3-8B's and Llama-3.2-1B's
// steps runs on the H100 and the H200 (planFacts) at rows 1, 8, 16, 64 and 256 of a decode step run as
// its graph (context 1152: cap 2048), and of prefill steps of 5 and 300 tokens (rows −5, −300) with one
// logit row. The table was derived by running a CPU copy of the CUDA backend's run-time choices as they
// were before the plan was a function of its own (backend_cuda.go's gemvServes, gemmTakes, splitOf,
// normFolds, fused and ropeInAttention, at 71d212d) and the attention dispatcher's oracle: the refactor
// changed no launch. Which kernel serves a product at a row count is its "qkv", "o", "gateup", "down"
// and "lmhead" entries (planMatMul).

func TestPlanStep(t *testing.T) {
	models := map[string]planModel{"llama3-8b": planLlama3_8B, "llama3.2-1b": planLlama32_1B}
	for _, tc := range []struct {
		device, model string
		rows          int
		want          map[string]string
	}{
		{"h100", "llama3-8b", 1, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 16x128"}},
		{"h100", "llama3-8b", 8, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 4x512"}},
		{"h100", "llama3-8b", 16, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-rows 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-rows 2", "downLast": "cublas accumulate split-rows 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0"}},
		{"h100", "llama3-8b", 64, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-rows 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-rows 2", "downLast": "cublas accumulate split-rows 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0"}},
		{"h100", "llama3-8b", 256, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "cublas", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "chunks", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0"}},
		{"h100", "llama3-8b", -5, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate", "lmhead": "gemv argmax", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "add none", "swiglu": "fused", "argmax": "gemv", "attention": "prefill"}},
		{"h100", "llama3-8b", -300, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "gemv argmax", "rope": "kernel", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "gemv", "attention": "prefill"}},
		{"h100", "llama3.2-1b", 1, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d64_n8 split-k 16x128"}},
		{"h100", "llama3.2-1b", 8, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d64_n8 split-k 8x256"}},
		{"h100", "llama3.2-1b", 16, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-k 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-k 2", "downLast": "cublas accumulate split-k 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add 2 partials", "norm1": "add 2 partials", "final": "add 2 partials", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeGrouped_mma_bf16_d64_n8 grouped 1x0"}},
		{"h100", "llama3.2-1b", 64, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-k 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-k 2", "downLast": "cublas accumulate split-k 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add 2 partials", "norm1": "add 2 partials", "final": "add 2 partials", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeGrouped_mma_bf16_d64_n8 grouped 1x0"}},
		{"h100", "llama3.2-1b", 256, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "cublas", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "chunks", "attention": "DecodeGrouped_mma_bf16_d64_n8 grouped 1x0"}},
		{"h100", "llama3.2-1b", -5, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate", "lmhead": "gemv argmax", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "add none", "swiglu": "fused", "argmax": "gemv", "attention": "prefill"}},
		{"h100", "llama3.2-1b", -300, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "gemv argmax", "rope": "kernel", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "gemv", "attention": "prefill"}},
		{"h200", "llama3-8b", 1, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 16x128"}},
		{"h200", "llama3-8b", 8, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 4x512"}},
		{"h200", "llama3-8b", 16, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-rows 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-rows 2", "downLast": "cublas accumulate split-rows 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 2x1024"}},
		{"h200", "llama3-8b", 64, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-rows 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-rows 2", "downLast": "cublas accumulate split-rows 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0"}},
		{"h200", "llama3-8b", 256, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "cublas", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "chunks", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0"}},
		{"h200", "llama3-8b", -5, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate", "lmhead": "gemv argmax", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "add none", "swiglu": "fused", "argmax": "gemv", "attention": "prefill"}},
		{"h200", "llama3-8b", -300, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "gemv argmax", "rope": "kernel", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "gemv", "attention": "prefill"}},
		{"h200", "llama3.2-1b", 1, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d64_n8 split-k 16x128"}},
		{"h200", "llama3.2-1b", 8, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate normOut", "lmhead": "gemv argmax normIn", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "swiglu": "fused", "argmax": "gemv", "attention": "DecodeSplitK_mma_bf16_d64_n8 split-k 8x256"}},
		{"h200", "llama3.2-1b", 16, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-k 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-k 2", "downLast": "cublas accumulate split-k 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add 2 partials", "norm1": "add 2 partials", "final": "add 2 partials", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeSplitK_mma_bf16_d64_n8 split-k 4x512"}},
		{"h200", "llama3.2-1b", 64, map[string]string{"qkv": "cublas", "o": "cublas accumulate split-k 2", "gateup": "gemm swiglu", "down": "cublas accumulate split-k 2", "downLast": "cublas accumulate split-k 2", "lmhead": "gemm argmax", "rope": "attention", "norm0": "no add", "post0": "add 2 partials", "norm1": "add 2 partials", "final": "add 2 partials", "swiglu": "fused", "argmax": "gemm 501", "attention": "DecodeGrouped_mma_bf16_d64_n8 grouped 1x0"}},
		{"h200", "llama3.2-1b", 256, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "cublas", "rope": "attention", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "chunks", "attention": "DecodeGrouped_mma_bf16_d64_n8 grouped 1x0"}},
		{"h200", "llama3.2-1b", -5, map[string]string{"qkv": "gemv rope normIn", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "downLast": "gemv plain accumulate", "lmhead": "gemv argmax", "rope": "qkv", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "add none", "swiglu": "fused", "argmax": "gemv", "attention": "prefill"}},
		{"h200", "llama3.2-1b", -300, map[string]string{"qkv": "cublas", "o": "cublas accumulate", "gateup": "cublas", "down": "cublas accumulate", "downLast": "cublas accumulate", "lmhead": "gemv argmax", "rope": "kernel", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "swiglu": "kernel", "argmax": "gemv", "attention": "prefill"}},
	} {
		t.Run(fmt.Sprintf("%s/%s/rows%d", tc.device, tc.model, tc.rows), func(t *testing.T) {
			checkPlanStep(t, tc.device, models[tc.model], tc.rows, 2048, tc.want)
		})
	}
}

// TestPlanStepFamilies is TestPlanStep's oracle for the families' parts on the H200: Qwen3-8B, Qwen2.5-7B,
// Gemma-3-12B and Mistral-7B-v0.1, decode steps run as graphs of context cap 2048 unless stated, and
// prefill steps of 300 tokens. The q/k norms are a kernel after the Q/K/V product where decode attention
// folds the rotation (the product then fuses none), else the RoPE kernel runs them; the q/k/v biases
// added by decode attention where it rotates, else by a kernel after the product (which takes no
// epilogue); Gemma's sublayer-output norms run in the norm after
// them (NormAddRMSNorm; no norm folds); GeGLU the skinny product's epilogue, else a kernel; the soft cap
// a kernel before the argmax (which reads the capped logits); head_dim 256 its narrow decode kernels,
// without the rotation; sliding layers are planned on the tokens they read (Mistral at context 16384
// with its window of 4096: 4111 tokens, 13 partitions of 320).
func TestPlanStepFamilies(t *testing.T) {
	models := map[string]planModel{"qwen3-8b": planQwen3_8B, "qwen2.5-7b": planQwen25_7B, "gemma3-12b": planGemma3_12B,
		"mistral-7b-v0.1": planMistral7B}
	for _, tc := range []struct {
		device, model string
		rows          int
		want          map[string]string
		ctx           int // the graph's context cap (0: 2048)
	}{
		{"h200", "qwen3-8b", 1, map[string]string{"qkv": "gemv plain normIn", "qknorm": "kernel", "rope": "attention", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 16x128", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "swiglu": "fused", "down": "gemv plain accumulate normOut", "norm0": "folded", "post0": "folded", "norm1": "folded", "final": "folded", "lmhead": "gemv argmax normIn", "argmax": "gemv"}, 0},
		{"h200", "qwen3-8b", 64, map[string]string{"qkv": "cublas", "qknorm": "kernel", "rope": "attention", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0", "o": "cublas accumulate split-rows 2", "gateup": "gemm swiglu", "swiglu": "fused", "down": "cublas accumulate split-rows 2", "norm0": "no add", "post0": "add none", "norm1": "add none", "final": "add none", "lmhead": "gemm argmax", "argmax": "gemm 594"}, 0},
		{"h200", "qwen3-8b", -300, map[string]string{"qkv": "cublas", "qknorm": "into rope", "rope": "kernel qknorm", "attention": "prefill", "lmhead": "gemv argmax", "argmax": "gemv"}, 0},
		{"h200", "qwen2.5-7b", 1, map[string]string{"qkv": "gemv plain normIn", "rope": "attention", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 32x64 bias", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "down": "gemv plain accumulate normOut", "norm0": "folded", "post0": "folded", "final": "folded", "lmhead": "gemv argmax normIn", "argmax": "gemv"}, 0},
		{"h200", "qwen2.5-7b", 64, map[string]string{"qkv": "cublas", "rope": "attention", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0 bias", "o": "cublas accumulate split-k 2", "post0": "add 2 partials", "gateup": "cublas", "swiglu": "kernel", "down": "cublas accumulate split-k 2", "norm1": "add 2 partials", "lmhead": "gemm argmax", "argmax": "gemm 594"}, 0},
		{"h200", "qwen2.5-7b", -300, map[string]string{"qkv": "cublas bias", "rope": "kernel", "attention": "prefill"}, 0},
		{"h200", "gemma3-12b", 1, map[string]string{"norm0": "no add", "qkv": "gemv plain", "qknorm": "into rope", "rope": "kernel qknorm", "ropeFull": "kernel qknorm", "attention": "DecodeSplitK_mma_bf16_d256_n8 split-k 9x128", "attentionFull": "DecodeSplitK_mma_bf16_d256_n8 split-k 16x128", "o": "gemv plain", "attnOutNorm": "into the next norm", "post0": "norm add", "gateup": "gemv geglu", "swiglu": "fused", "down": "gemv plain", "mlpOutNorm": "into the next norm", "norm1": "norm add", "final": "norm add", "lmhead": "gemv plain", "softcap": "kernel", "argmax": "chunks"}, 0},
		{"h200", "gemma3-12b", 64, map[string]string{"norm0": "no add", "qkv": "cublas", "qknorm": "into rope", "rope": "kernel qknorm", "attention": "DecodeGrouped_mma_bf16_d256_n8 grouped 1x0", "attentionFull": "DecodeGrouped_mma_bf16_d256_n8 grouped 1x0", "o": "cublas", "attnOutNorm": "into the next norm", "post0": "norm add", "gateup": "gemm plain", "swiglu": "kernel", "down": "cublas", "mlpOutNorm": "into the next norm", "norm1": "norm add", "final": "norm add", "lmhead": "gemm plain", "softcap": "kernel", "argmax": "chunks"}, 0},
		{"h200", "gemma3-12b", -300, map[string]string{"qkv": "cublas", "qknorm": "into rope", "rope": "kernel qknorm", "attention": "prefill", "attnOutNorm": "into the next norm", "post0": "norm add", "swiglu": "kernel", "lmhead": "gemv plain", "softcap": "kernel", "argmax": "chunks"}, 0},
		{"h200", "mistral-7b-v0.1", 1, map[string]string{"qkv": "gemv rope normIn", "rope": "qkv", "attention": "DecodeSplitK_mma_bf16_d128_n8 split-k 13x320", "o": "gemv plain accumulate normOut", "gateup": "gemv swiglu normIn", "norm0": "folded", "lmhead": "gemv argmax normIn", "argmax": "gemv"}, 16384},
		{"h200", "mistral-7b-v0.1", 64, map[string]string{"qkv": "cublas", "rope": "attention", "attention": "DecodeGrouped_mma_bf16_d128_n8 grouped 1x0", "gateup": "gemm swiglu", "lmhead": "gemm argmax", "argmax": "gemm 125"}, 16384},
	} {
		t.Run(fmt.Sprintf("%s/%s/rows%d/ctx%d", tc.device, tc.model, tc.rows, tc.ctx), func(t *testing.T) {
			ctx := 2048
			if tc.ctx > 0 {
				ctx = tc.ctx
			}
			checkPlanStep(t, tc.device, models[tc.model], tc.rows, ctx, tc.want)
		})
	}
}

// checkPlanStep plans a step of model m on device (planFacts) at rows rows of a decode step run as its
// graph of context cap ctx, or (rows < 0) of a prefill step of −rows tokens with one logit row, and
// checks how the named ops run (describe) against want; every layer's attention must run as the first
// of its window's.
func checkPlanStep(t *testing.T, device string, m planModel, rows, ctx int, want map[string]string) {
	t.Helper()
	f := planFacts(device, m)
	prefill := rows < 0
	st := stepShape{decode: true, graph: true, contextCap: ctx, stride: ctx / 16, pdl: rows <= pdlMaxRows}
	planRows := rows
	if prefill {
		rows, planRows = -rows, 0
		st = stepShape{contextLens: []int32{int32(rows)}, stride: 19}
	}
	ops, at := recordedStep(m, rows, prefill)
	plans := planStep(ops, planRows, &f, &st)
	for name, w := range want {
		i, ok := at[name]
		if !ok {
			t.Errorf("%s: no such op", name)
			continue
		}
		if got := describe(ops, plans, i, &f); got != w {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	for i, p := range plans {
		if p.err != nil {
			t.Errorf("op %d (%v): %v", i, ops[i].kind, p.err)
		}
	}
	// A product's bias is added once: by its own kernel or by the decode attention that rotates its output.
	added := map[int]int{}
	for i, p := range plans {
		if ops[i].kind == opMatMul && p.bias {
			added[i]++
		}
		if ops[i].kind == opAttention && p.ropeBias >= 0 {
			if !p.attn.RoPE || ops[p.ropeBias].kind != opMatMul || !ops[p.ropeBias].bias {
				t.Errorf("op %d: attention adds op %d's bias without rotating it", i, p.ropeBias)
			}
			added[p.ropeBias]++
		}
	}
	for i, op := range ops {
		if op.kind == opMatMul && op.bias && !op.fp8 && added[i] != 1 {
			t.Errorf("op %d: bias added %d times", i, added[i])
		}
	}
	// Every layer's attention runs as the first layer's of its window.
	for i, op := range ops {
		if op.kind == opAttention {
			first := at["attention"]
			if op.window != ops[first].window {
				first = at["attentionFull"]
			}
			if got, w := describe(ops, plans, i, &f), describe(ops, plans, first, &f); got != w {
				t.Errorf("op %d: attention %s, its window's first %s", i, got, w)
			}
		}
	}
}

// TestPlanMatMul answers which kernel serves a product at a row count (planMatMul) for the products of
// Llama-3-8B and Llama-3.2-1B at rows 1-256, with and without the skinny kernels, and checks that the
// epilogue asked for runs only where the kernel serves it.
func TestPlanMatMul(t *testing.T) {
	h100 := planFacts("h100", planLlama3_8B)
	f32 := h100
	f32.gemv, f32.gemm, f32.gemmSwiGLU = false, false, false
	for _, tc := range []struct {
		name          string
		f             *stepFacts
		rows, out, in int
		mode          gemvMode
		residual      bool
		path          matmulPath
		runs          gemvMode
	}{
		{"8b-qkv-1", &h100, 1, 6144, 4096, gemvRoPE, false, pathGemv, gemvRoPE},
		{"8b-qkv-8", &h100, 8, 6144, 4096, gemvRoPE, false, pathGemv, gemvRoPE},
		{"8b-qkv-9", &h100, 9, 6144, 4096, gemvRoPE, false, pathCuBLAS, gemvPlain}, // under GemmMinBytes
		{"8b-gateup-16", &h100, 16, 28672, 4096, gemvSwiGLU, false, pathGemm, gemvSwiGLU},
		{"8b-gateup-64", &h100, 64, 28672, 4096, gemvSwiGLU, false, pathGemm, gemvSwiGLU},
		{"8b-gateup-65", &h100, 65, 28672, 4096, gemvSwiGLU, false, pathCuBLAS, gemvPlain},
		{"8b-lmhead-16", &h100, 16, 128256, 4096, gemvArgmax, false, pathGemm, gemvArgmax},
		{"8b-lmhead-256", &h100, 256, 128256, 4096, gemvArgmax, false, pathCuBLAS, gemvPlain},
		{"8b-o-16", &h100, 16, 4096, 4096, gemvPlain, true, pathCuBLAS, gemvPlain},
		{"8b-o-1", &h100, 1, 4096, 4096, gemvPlain, true, pathGemv, gemvPlain},
		{"f32-qkv-1", &f32, 1, 6144, 4096, gemvRoPE, false, pathCuBLAS, gemvPlain},
		{"f32-gateup-16", &f32, 16, 28672, 4096, gemvSwiGLU, false, pathCuBLAS, gemvPlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.f.planMatMul(tc.rows, tc.out, tc.in, tc.mode, tc.residual)
			if got.path != tc.path || got.mode != tc.runs || got.accumulate != (tc.residual && tc.mode == gemvPlain) {
				t.Errorf("planMatMul = %+v, want %v running %v", got, tc.path, tc.runs)
			}
		})
	}
}

// TestLinkOps checks the links the recording asks for: none with fusion off or without the skinny
// product (a float32 model), none between ops of different row counts, and the norm folds' slots in
// recording order.
func TestLinkOps(t *testing.T) {
	m := planLlama32_1B
	ops, at := recordedStep(m, 1, false)
	f := planFacts("h100", m)
	links, folds := linkOps(ops, &f)
	if len(folds) != 2*m.layers+1 {
		t.Errorf("%d folds, want %d", len(folds), 2*m.layers+1)
	}
	for k, n := range folds {
		if links[n].fold != k || ops[n].kind != opNorm {
			t.Errorf("fold %d: op %d (%v) has slot %d", k, n, ops[n].kind, links[n].fold)
		}
	}
	if l := links[at["qkv"]]; l.mode != gemvRoPE || l.normIn != at["norm0"] {
		t.Errorf("qkv links %+v", l)
	}
	if l := links[at["o"]]; !l.residual || !l.afterAttention || l.normOut != at["post0"] {
		t.Errorf("o links %+v", l)
	}
	for _, tc := range []struct {
		name string
		tune func(*stepFacts)
	}{
		{"nofuse", func(f *stepFacts) { f.tune.NoFuse = true }},
		{"float32", func(f *stepFacts) { f.gemv = false }},
	} {
		f := planFacts("h100", m)
		tc.tune(&f)
		links, _ := linkOps(ops, &f)
		for i, l := range links {
			if l.mode != gemvPlain {
				t.Errorf("%s: op %d (%v) asks for epilogue %d", tc.name, i, ops[i].kind, l.mode)
			}
		}
	}
	// An argmax of another row count than the LM head's product does not fuse into it.
	ops[len(ops)-1].rows = 2
	if links, _ := linkOps(ops, &f); links[len(ops)-1].target >= 0 {
		t.Errorf("argmax of 2 rows after a 1-row product fuses")
	}
}

// TestPlanNormFoldsAllOrNone: a step's norms fold all or none (the ring of fold slots): one norm whose
// product cannot run the skinny product (k not a multiple of 64) keeps every norm a kernel.
func TestPlanNormFoldsAllOrNone(t *testing.T) {
	m := planLlama32_1B
	ops, at := recordedStep(m, 1, false)
	f := planFacts("h100", m)
	st := stepShape{decode: true, graph: true, contextCap: 2048, stride: 128, pdl: true}
	if p := planStep(ops, 1, &f, &st); !p[at["post0"]].folded {
		t.Fatalf("the default step's norms do not fold")
	}
	// The first post-attention norm, 32 columns wider: its consumer's k is not whole 64-column blocks.
	ops[at["o"]].out, ops[at["post0"]].in, ops[at["gateup"]].in = m.hidden+32, m.hidden+32, m.hidden+32
	if links, _ := linkOps(ops, &f); links[at["post0"]].consumer != at["gateup"] {
		t.Fatalf("the norm does not fold into its consumer")
	}
	for i, p := range planStep(ops, 1, &f, &st) {
		if p.folded || p.foldIn >= 0 || p.foldOut >= 0 {
			t.Errorf("op %d (%v) folds", i, ops[i].kind)
		}
	}
}

// TestSplitOf checks how the products of a 9-64-row step on cuBLAS are split (splitOf): the O and down
// products (accumulating into the residual) in two halves of their output rows from splitRowsMinOut rows
// on, of k below, none past gemvMaxTokens rows, for products that do not accumulate (Q/K/V, gate/up) or
// when turned off; the tuning's forced forms. Neither skinny kernel is loaded.
func TestSplitOf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hidden        int
		out, in, rows int
		accumulates   bool
		tune          func(*gemvTuning)
		want          productSplit
	}{
		{"8b-o", 4096, 4096, 4096, 64, true, nil, productSplit{2, true}},
		{"8b-down", 4096, 4096, 14336, 16, true, nil, productSplit{2, true}},
		{"1b-o", 2048, 2048, 2048, 64, true, nil, productSplit{2, false}},
		{"1b-down", 2048, 2048, 8192, 9, true, nil, productSplit{2, false}},
		{"1b-down-k-odd", 2048, 2048, 8128, 64, true, nil, productSplit{1, false}},
		{"8b-o-prefill", 4096, 4096, 4096, 65, true, nil, productSplit{1, false}},
		{"8b-qkv", 4096, 6144, 4096, 64, false, nil, productSplit{1, false}},
		{"8b-gate-up-float", 4096, 28672, 4096, 64, false, nil, productSplit{1, false}},
		{"8b-o-off", 4096, 4096, 4096, 64, true, func(t *gemvTuning) { t.SplitK = -1 }, productSplit{1, false}},
		{"8b-o-k4", 4096, 4096, 4096, 64, true, func(t *gemvTuning) { t.SplitK = 4 }, productSplit{4, false}},
		{"1b-o-rows", 2048, 2048, 2048, 64, true, func(t *gemvTuning) { t.SplitRows = true }, productSplit{2, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &stepFacts{sms: 132, hidden: tc.hidden, tune: defaultGemvTuning}
			if tc.tune != nil {
				tc.tune(&f.tune)
			}
			if got := f.splitOf(tc.rows, tc.out, tc.in, tc.accumulates); got != tc.want {
				t.Errorf("splitOf(%d × %d, %d rows) = %+v, want %+v", tc.out, tc.in, tc.rows, got, tc.want)
			}
		})
	}
}

// TestPlanFP8 plans Llama-3-8B's and Qwen2.5's steps with FP8 Linear layers (the LM head in bfloat16, as
// Load keeps it) at decode and prefill sizes: every FP8 product runs the FP8 kernels at its rows (its
// own kernel up to fp8KernelMaxRows rows; beyond, the skinny GEMM's e4m3 kernel up to fp8GemmMaxRows rows
// where it is loaded and not tuned off, cuBLASLt otherwise), adds its own bias and takes no epilogue, accumulation,
// split or folded norm, so the ops around it (norms, RoPE, SwiGLU) run kernels of their own; the input
// norms and SwiGLU write the Q/K/V, gate/up and down products' inputs quantized (O's comes from
// attention: the product quantizes it), unless FP8NoFuse; the LM head keeps its bfloat16 plan (the
// argmax fused into it at one row).
func TestPlanFP8(t *testing.T) {
	for _, m := range []planModel{planLlama3_8B, planQwen25_7B} {
		for _, tc := range []struct {
			rows            int
			noFuse          bool
			gemm, gemmTuned bool // the e4m3 GEMM loaded; tuned off (FP8NoGemm)
		}{{1, false, true, false}, {8, false, true, false}, {9, false, false, false}, {9, false, true, false},
			{16, false, true, false}, {16, false, true, true}, {64, false, false, false}, {64, false, true, false},
			{65, false, true, false}, {512, false, true, false}, {1, true, false, false}, {512, true, false, false},
			{32, false, true, false}} {
			rows := tc.rows
			t.Run(fmt.Sprintf("%s/%d/nofuse=%v/gemm=%v,off=%v", m.name, rows, tc.noFuse, tc.gemm, tc.gemmTuned), func(t *testing.T) {
				ops, at := recordedStep(m, rows, false)
				for i := range ops {
					if ops[i].kind == opMatMul && i != at["lmhead"] {
						ops[i].fp8 = true
					}
				}
				f := planFacts("h200", m)
				f.fp8Lt, f.tune.FP8NoFuse, f.fp8In16 = true, tc.noFuse, true
				f.fp8Gemm, f.tune.FP8NoGemm = tc.gemm, tc.gemmTuned
				st := stepShape{decode: rows <= 64, graph: rows <= 64, contextCap: 2048, stride: 128, pdl: rows <= 8}
				plans := planStep(ops, 0, &f, &st)
				for i, p := range plans {
					op := &ops[i]
					if p.folded || p.foldIn >= 0 || p.foldOut >= 0 {
						t.Errorf("op %d (%v) folds a norm", i, op.kind)
					}
					switch {
					case op.kind == opMatMul && op.fp8:
						want := pathFP8
						switch {
						case rows > fp8KernelMaxRows && rows <= fp8GemmMaxRows && tc.gemm && !tc.gemmTuned:
							want = pathFP8Gemm
						case rows > fp8KernelMaxRows:
							want = pathFP8Lt
						}
						if p.mm.path != want || p.mm.mode != gemvPlain || p.mm.accumulate || p.mm.split.parts != 1 || p.bias {
							t.Errorf("op %d: FP8 product planned %+v, bias kernel %v", i, p.mm, p.bias)
						}
						// On cuBLASLt (which scales nothing here) O, gate/up and every down but the last
						// leave their scales to the quantizing op after them, Q/K/V (without a bias) to the
						// RoPE kernel where it runs.
						next := &ops[i+1]
						unscaled := want == pathFP8Lt && !op.bias && (!tc.noFuse && plans[i+1].fp8Out >= 0 &&
							(next.kind == opSwiGLU || next.kind == opNorm && next.add == op.dst) ||
							next.kind == opRoPE && !plans[i+1].skip)
						if p.fp8Unscaled != unscaled || unscaled && plans[i+1].fp8ScaleFrom != i {
							t.Errorf("op %d: unscaled %v (the next op applies the scales of %d), want %v", i, p.fp8Unscaled,
								plans[i+1].fp8ScaleFrom, unscaled)
						}
						// gate/up's unscaled sums go to the quantizing SwiGLU in bfloat16.
						if out16 := unscaled && next.kind == opSwiGLU; p.fp8Out16 != out16 || plans[i+1].fp8In16 != out16 {
							t.Errorf("op %d: bfloat16 sums %v (the next op reads them %v), want %v", i, p.fp8Out16, plans[i+1].fp8In16, out16)
						}
						// Every FP8 product but O (after attention) gets its input quantized.
						if quantized := !tc.noFuse && ops[i-1].kind != opAttention; p.fp8Quantized != quantized ||
							quantized && plans[i-1].fp8Out != i {
							t.Errorf("op %d: input quantized by the op before: %v (its plan's product %d), want %v", i,
								p.fp8Quantized, plans[i-1].fp8Out, quantized)
						}
					case op.kind == opNorm:
						if p.skip || p.add != addTensor {
							t.Errorf("op %d: norm skipped %v, adds %v", i, p.skip, p.add)
						}
						if p.fp8Out >= 0 && !ops[p.fp8Out].fp8 {
							t.Errorf("op %d: norm quantizes for op %d, not an FP8 product", i, p.fp8Out)
						}
					case op.kind == opSwiGLU:
						if p.skip {
							t.Errorf("op %d: SwiGLU fused into an FP8 product", i)
						}
					case op.kind == opRoPE:
						// Decode attention may rotate (it reads the product's output); a product never does.
						if p.skip && !(st.decode && p.qkNorm < 0 && plans[at["attention"]].attn.RoPE) {
							t.Errorf("op %d: RoPE fused into an FP8 product", i)
						}
					}
				}
				for i, p := range plans {
					if p.fp8ScaleFrom >= 0 && (p.fp8ScaleFrom != i-1 || !plans[i-1].fp8Unscaled ||
						p.fp8Out < 0 && ops[i].kind != opRoPE || p.skip) {
						t.Errorf("op %d (%v) applies the scales of op %d", i, ops[i].kind, p.fp8ScaleFrom)
					}
				}
				// Counted from the model alone: in a prefill on cuBLASLt every layer's O, gate/up, down but
				// the last, and Q/K/V where it has no bias, leave their scales; elsewhere none.
				unscaled, want := 0, 0
				for _, p := range plans {
					if p.fp8Unscaled {
						unscaled++
					}
				}
				if rows > gemvMaxTokens {
					want = 3*m.layers - 1
					if !m.bias {
						want += m.layers
					}
					if tc.noFuse {
						want = m.layers // only Q/K/V's RoPE: the norms and SwiGLU quantize nothing
						if m.bias {
							want = 0
						}
					}
				}
				if rows > fp8KernelMaxRows && rows <= gemvMaxTokens {
					want = -1 // decode steps: attention rotates at some rows; checked op by op above
				}
				if want >= 0 && unscaled != want {
					t.Errorf("%d products leave their scales, want %d", unscaled, want)
				}
				if lm := plans[at["lmhead"]]; lm.mm.path == pathFP8 {
					t.Errorf("the LM head planned on the FP8 path")
				}
				if rows == 1 && plans[at["argmax"]].argmax != argmaxGemv {
					t.Errorf("the greedy pick at one row is not the LM head's epilogue: %v", plans[at["argmax"]].argmax)
				}
			})
		}
	}
}

// TestPlanFP8Out16: gate/up on cuBLASLt writes its unscaled sums in bfloat16 for the quantizing SwiGLU
// (opPlan.fp8Out16, fp8In16) only where the SwiGLU's bfloat16-input kernels are loaded (16-bit compute),
// the tuning allows it and the sums are left unscaled; no other product does.
func TestPlanFP8Out16(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rows   int
		change func(f *stepFacts)
		want   bool
	}{
		{"default", 512, func(*stepFacts) {}, true},
		{"17 rows", 17, func(*stepFacts) {}, true},
		{"e4m3 GEMM rows", 16, func(*stepFacts) {}, false},
		{"no kernels", 512, func(f *stepFacts) { f.fp8In16 = false }, false},
		{"tuned-off", 512, func(f *stepFacts) { f.tune.FP8NoOut16 = true }, false},
		{"no scale fold", 512, func(f *stepFacts) { f.tune.FP8NoScaleFold = true }, false},
		{"lt-scales", 512, func(f *stepFacts) { f.fp8LtScaled = true }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, at := recordedStep(planLlama3_8B, tc.rows, false)
			for i := range ops {
				if ops[i].kind == opMatMul && i != at["lmhead"] {
					ops[i].fp8 = true
				}
			}
			f := planFacts("h200", planLlama3_8B)
			f.fp8Lt, f.fp8Gemm, f.fp8In16 = true, true, true
			tc.change(&f)
			st := stepShape{decode: tc.rows <= 64, graph: tc.rows <= 64, contextCap: 2048, stride: 128}
			plans := planStep(ops, 0, &f, &st)
			g := at["gateup"]
			if plans[g].fp8Out16 != tc.want || plans[g+1].fp8In16 != tc.want || ops[g+1].kind != opSwiGLU {
				t.Errorf("gate/up writes bfloat16 %v, %v reads it %v; want %v", plans[g].fp8Out16, ops[g+1].kind, plans[g+1].fp8In16, tc.want)
			}
			out16 := 0
			for i, p := range plans {
				gateUp := ops[i].kind == opMatMul && i+1 < len(ops) && ops[i+1].kind == opSwiGLU
				if p.fp8Out16 && (!gateUp || !plans[i+1].fp8In16) || p.fp8In16 && ops[i].kind != opSwiGLU {
					t.Errorf("op %d (%v): bfloat16 sums out %v, in %v", i, ops[i].kind, p.fp8Out16, p.fp8In16)
				}
				if p.fp8Out16 {
					out16++
				}
			}
			if want := map[bool]int{true: planLlama3_8B.layers}[tc.want]; out16 != want {
				t.Errorf("%d products write bfloat16 sums, want %d (every layer's gate/up)", out16, want)
			}
		})
	}
}

// TestPlanFP8ScaleFold: an FP8 product on cuBLASLt leaves its scales to the op after it (the quantizing
// norm or SwiGLU, the RoPE kernel) only where nothing else needs them applied: not where cuBLASLt scales
// itself, where the tuning keeps the pass, where the product has a bias, or (norm, SwiGLU) where another
// op reads its output too.
func TestPlanFP8ScaleFold(t *testing.T) {
	for _, tc := range []struct {
		name          string
		change        func(ops []stepOp, at map[string]int, f *stepFacts)
		unscaled, qkv bool // O's output, Q/K/V's
	}{
		{"default", func([]stepOp, map[string]int, *stepFacts) {}, true, true},
		{"lt-scales", func(_ []stepOp, _ map[string]int, f *stepFacts) { f.fp8LtScaled = true }, false, false},
		{"tuned-off", func(_ []stepOp, _ map[string]int, f *stepFacts) { f.tune.FP8NoScaleFold = true }, false, false},
		{"bias", func(ops []stepOp, at map[string]int, _ *stepFacts) { ops[at["o"]].bias = true }, false, true},
		{"qkv-bias", func(ops []stepOp, at map[string]int, _ *stepFacts) { ops[at["qkv"]].bias = true }, true, false},
		{"second-reader", func(ops []stepOp, at map[string]int, _ *stepFacts) {
			ops[at["gateup"]+1].resid = ops[at["o"]].dst // an op after the norm reads O's output
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, at := recordedStep(planLlama3_8B, 512, false)
			for i := range ops {
				if ops[i].kind == opMatMul && i != at["lmhead"] {
					ops[i].fp8 = true
				}
			}
			f := planFacts("h200", planLlama3_8B)
			f.fp8Lt, f.fp8Gemm = true, true
			tc.change(ops, at, &f)
			plans := planStep(ops, 0, &f, &stepShape{contextCap: 2048, stride: 128})
			o := at["o"]
			if got := plans[o].fp8Unscaled; got != tc.unscaled {
				t.Errorf("O leaves its scales: %v, want %v", got, tc.unscaled)
			}
			if got := plans[o+1].fp8ScaleFrom; (got == o) != tc.unscaled || got >= 0 && got != o {
				t.Errorf("the norm after O applies the scales of op %d, want them %v", got, tc.unscaled)
			}
			if plans[at["downLast"]].fp8Unscaled {
				t.Errorf("the last down product leaves its scales: no quantizing op reads it next")
			}
			qkv := at["qkv"]
			if got := plans[qkv].fp8Unscaled; got != tc.qkv || (plans[qkv+1].fp8ScaleFrom == qkv) != tc.qkv {
				t.Errorf("Q/K/V leaves its scales: %v (RoPE applies those of op %d), want %v", got,
					plans[qkv+1].fp8ScaleFrom, tc.qkv)
			}
		})
	}
}

// TestPlanStepShared: in an eager decode step that runs the shared-prefix decode (stepShape.shared),
// the layers without a window call it and leave the rotation to the RoPE kernel (it does not rotate);
// windowed layers plan as before; without it, Llama-3-8B at 32 rows folds RoPE into attention.
func TestPlanStepShared(t *testing.T) {
	for _, m := range []planModel{planLlama3_8B, planGemma3_12B} {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", m.name, shared), func(t *testing.T) {
				f := planFacts("h200", m)
				const rows = 32
				lens := make([]int32, rows)
				for i := range lens {
					lens[i] = 16384 + 128
				}
				st := stepShape{decode: true, contextLens: lens, stride: 16512 / 16, shared: shared}
				ops, _ := recordedStep(m, rows, false)
				plans := planStep(ops, 0, &f, &st)
				rotated := 0
				for i, op := range ops {
					p := plans[i]
					if p.err != nil {
						t.Fatalf("op %d (%v): %v", i, op.kind, p.err)
					}
					switch op.kind {
					case opAttention:
						if p.attn.RoPE && !p.shared {
							rotated++
						}
						if want := shared && op.window == 0; p.shared != want {
							t.Errorf("op %d (window %d): shared %v, want %v", i, op.window, p.shared, want)
						}
					case opRoPE:
						// The RoPE op runs unless the Q/K/V product fuses it or attention rotates.
						qkv := i - 1
						for ops[qkv].kind != opMatMul {
							qkv--
						}
						fused := plans[qkv].mm.mode == gemvRoPE
						attn := plans[i+1]
						if want := fused || attn.attn.RoPE && !attn.shared; p.skip != want {
							t.Errorf("op %d (window %d): RoPE skip %v, want %v (product fuses it %v, attention rotates %v)",
								i, op.window, p.skip, want, fused, attn.attn.RoPE && !attn.shared)
						}
						if attn.shared && attn.attn.RoPE {
							t.Errorf("op %d: the step's attention would both rotate and run shared", i)
						}
					}
				}
				if m.name == planLlama3_8B.name && !shared && rotated != m.layers {
					t.Errorf("%d of %d layers rotate in attention, want all (the case the shared path changes)", rotated, m.layers)
				}
			})
		}
	}
}

// TestFP8PathRows: which path an FP8 product takes by its rows, where cuBLASLt and the e4m3 GEMM are
// loaded: the FP8 kernel up to fp8KernelMaxRows, the GEMM up to fp8GemmMaxRows (FP8GemmRows moves the
// line, never past gemvMaxTokens; FP8NoGemm takes it away), cuBLASLt beyond.
func TestFP8PathRows(t *testing.T) {
	for _, tc := range []struct {
		gemmRows int
		noGemm   bool
		rows     int
		want     matmulPath
	}{
		{0, false, 8, pathFP8}, {0, false, 9, pathFP8Gemm}, {0, false, 16, pathFP8Gemm}, {0, false, 17, pathFP8Lt},
		{32, false, 32, pathFP8Gemm}, {32, false, 33, pathFP8Lt}, {100, false, 64, pathFP8Gemm},
		{100, false, 65, pathFP8Lt}, {0, true, 16, pathFP8Lt}, {64, true, 32, pathFP8Lt},
	} {
		f := stepFacts{fp8Lt: true, fp8Gemm: true, sms: 132}
		f.tune.FP8GemmRows, f.tune.FP8NoGemm = tc.gemmRows, tc.noGemm
		if got := f.fp8Path(tc.rows, 4096); got != tc.want {
			t.Errorf("FP8GemmRows %d, FP8NoGemm %v, %d rows: %v, want %v", tc.gemmRows, tc.noGemm, tc.rows, got, tc.want)
		}
	}
}

// TestPlanStepAllReduce plans a tensor-parallel rank's step (an all-reduce after the embedding and
// after each O and down product, as tpBackend records it) at 1 and 16 rows: nothing may fuse across an
// all-reduce, since the sum must happen before the residual add and the norm. So no product accumulates
// into the residual or is split by k (its partials would be summed by the norm, after the all-reduce of
// one part), no norm folds (a step's norms fold all or none), and every norm adds its operand itself;
// the fusions within a sublayer (RoPE into Q/K/V, SwiGLU into gate/up at one row) stay.
func TestPlanStepAllReduce(t *testing.T) {
	m := planLlama3_8B
	for _, rows := range []int{1, 16} {
		recorded, at := recordedStep(m, rows, false)
		var ops []stepOp
		reduces := 0
		for _, op := range recorded {
			ops = append(ops, op)
			if op.kind == opEmbed || op.kind == opMatMul && op.out == m.hidden {
				ops = append(ops, stepOp{kind: opAllReduce, rows: op.rows, capacity: op.capacity, graphable: true,
					dst: op.dst, src: op.dst, in: m.hidden})
				reduces++
			}
		}
		if reduces != 2*m.layers+1 {
			t.Fatalf("%d all-reduces, want %d", reduces, 2*m.layers+1)
		}
		f := planFacts("h200", m)
		st := stepShape{decode: true, graph: true, contextCap: 2048, stride: 128, pdl: true}
		plans := planStep(ops, rows, &f, &st)
		ropeFused, swigluFused := 0, 0
		for i, p := range plans {
			op := &ops[i]
			switch {
			case p.err != nil:
				t.Fatalf("rows %d: op %d (%v): %v", rows, i, op.kind, p.err)
			case p.folded || p.foldIn >= 0 || p.foldOut >= 0:
				t.Errorf("rows %d: op %d (%v) folds a norm", rows, i, op.kind)
			case op.kind == opMatMul && (p.mm.accumulate || p.mm.split.parts > 1):
				t.Errorf("rows %d: product %d accumulates (%v) or is split (%d parts)", rows, i, p.mm.accumulate, p.mm.split.parts)
			case op.kind == opNorm && p.add != addTensor:
				t.Errorf("rows %d: norm %d adds %v, not its operand", rows, i, p.add)
			case op.kind == opAllReduce && p.skip:
				t.Errorf("rows %d: all-reduce %d skipped", rows, i)
			case op.kind == opRoPE && p.skip:
				ropeFused++
			case op.kind == opSwiGLU && p.skip:
				swigluFused++
			}
		}
		if ropeFused != m.layers || rows == 1 && swigluFused != m.layers {
			t.Errorf("rows %d: RoPE fused or done by attention in %d layers, SwiGLU fused in %d; want %d", rows, ropeFused,
				swigluFused, m.layers)
		}
		// Without the all-reduces the same step's O product accumulates into the residual (one row: on
		// the skinny product, folding the norm after it; 16: split in two on cuBLAS): what the checks
		// above catch.
		whole := planStep(recorded, rows, &f, &st)[at["o"]]
		if !whole.mm.accumulate && whole.mm.split.parts < 2 {
			t.Errorf("rows %d: the step without all-reduces neither accumulates nor splits O: %+v", rows, whole.mm)
		}
	}
}

// TestPlanStepMixedDecodes: in a step of decodes and prefill chunks, attention runs its leading decodes
// on the decode kernels (opPlan.leadDecodes, with a decision at their own contexts and no rotation: the
// RoPE kernel has run over every row) from mixedDecodeMin of them (or MixedDecodeMin's count), and
// leaves them to the prefill kernel below it, without the decode kernels, or with MixedDecodeMin < 0;
// the windowed layers of a family take the decision at their window.
func TestPlanStepMixedDecodes(t *testing.T) {
	for _, m := range []planModel{planLlama3_8B, planGemma3_12B, planMistral7B} {
		for _, tc := range []struct {
			name     string
			decodes  int
			kernels  bool
			min      int // gemvTuning.MixedDecodeMin
			wantLead bool
		}{
			{"none", 0, true, 0, false},
			{"below", mixedDecodeMin - 1, true, 0, false},
			{"at", mixedDecodeMin, true, 0, true},
			{"many", 254, true, 0, true},
			{"no-kernels", 254, false, 0, false},
			{"switched-off", 254, true, -1, false},
			{"lowered", 3, true, 3, true},
			{"lowered-none", 0, true, 1, false},
		} {
			t.Run(m.name+"/"+tc.name, func(t *testing.T) {
				f := planFacts("h200", m)
				f.decodeKernels, f.tune.MixedDecodeMin = tc.kernels, tc.min
				// The decodes at contexts 1025…, then one prompt chunk of 1024 tokens.
				var lens []int32
				for i := range tc.decodes {
					lens = append(lens, int32(1025+i))
				}
				lens = append(lens, 1024)
				rows := tc.decodes + 1024
				st := stepShape{contextLens: lens, stride: 2048 / 16, leadDecodes: tc.decodes}
				ops, _ := recordedStep(m, rows, true)
				plans := planStep(ops, 0, &f, &st)
				seen := 0
				for i, op := range ops {
					p := plans[i]
					if p.err != nil {
						t.Fatalf("op %d (%v): %v", i, op.kind, p.err)
					}
					switch op.kind {
					case opRoPE:
						if p.skip {
							t.Errorf("op %d: RoPE skipped in a mixed step (nothing else rotates the prefill rows)", i)
						}
					case opAttention:
						seen++
						if p.decode || p.shared || p.attn.RoPE {
							t.Errorf("op %d: decode %v shared %v rope %v in a mixed step", i, p.decode, p.shared, p.attn.RoPE)
						}
						if got := p.leadDecodes > 0; got != tc.wantLead {
							t.Fatalf("op %d: leadDecodes %d, want them on the decode kernels: %v", i, p.leadDecodes, tc.wantLead)
						}
						if !tc.wantLead {
							continue
						}
						if p.leadDecodes != tc.decodes {
							t.Errorf("op %d: leadDecodes %d, want %d", i, p.leadDecodes, tc.decodes)
						}
						want, err := attention.Decide(attention.DecodeCall{ContextLens: lens[:tc.decodes], MaxBlocks: st.stride,
							NumHeads: m.heads, NumKVHeads: m.kvHeads, HeadDim: m.dim, BlockSize: 16, DType: attention.BF16,
							Window: op.window, WorkspaceBytes: splitWorkspaceBytes}, f.attn)
						if err != nil {
							t.Fatal(err)
						}
						if p.attn != want {
							t.Errorf("op %d (window %d): decision %+v, want %+v", i, op.window, p.attn, want)
						}
					}
				}
				if seen != m.layers {
					t.Errorf("%d attention ops, want %d", seen, m.layers)
				}
			})
		}
	}
}
