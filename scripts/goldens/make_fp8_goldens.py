#!/usr/bin/env python3
"""Write a tiny random LLaMA checkpoint in FP8 (e4m3) forms and PyTorch's answers for it (the FP8 goldens).

Run on a machine with PyTorch and transformers (the device machine has torch 2.11, transformers 5.17,
safetensors; llm-compressor is not needed); it takes seconds on the CPU and writes about 170 KB:

    python3 scripts/goldens/make_fp8_goldens.py OUTDIR
    # then: rm -rf model/testdata/golden_fp8 && mkdir -p model/testdata/golden_fp8 && cp -r OUTDIR/* model/testdata/golden_fp8/

It builds a LlamaForCausalLM with make_goldens.py's helpers (random weights drawn with a fixed seed, 2
layers, tied embeddings, GQA), saves it in bfloat16 (BASE_bf16), then writes three FP8 checkpoints of
those same weights, quantized in plain torch:

  - BASE_ct_dynamic: compressed-tensors float-quantized, as llm-compressor's FP8_DYNAMIC writes it: every
    Linear layer but lm_head in F8_E4M3 with weight_scale [N, 1] (float32, max|w_row|/448), activations
    scaled per token at run time;
  - BASE_ct_static: compressed-tensors with one weight_scale per tensor ([1]), a static input_scale per
    layer and a kv_cache_scheme with each layer's K and V scale (self_attn.k_scale / v_scale), all
    calibrated on CALIB prompts (max of the layer's input, of the rotated K and of V, over 448);
  - BASE_autofp8: AutoFP8's form (quant_method fp8, activation_scheme dynamic, ignored_layers lm_head), one
    weight_scale per tensor as a 0-d tensor.

Quantizing w: scale = (max|w| / 448).clamp(min=1/(448*512)), codes = (w.float() / scale).clamp(-448,
448).to(torch.float8_e4m3fn): float32 division, round to nearest even, saturating.

The reference of an FP8 checkpoint is the bfloat16 model loaded by transformers (float32, eager attention)
with its quantized Linear layers replaced by modules that compute, from the stored codes and scales,

    s  = input_scale, or per token (x.abs().amax(-1) / 448).clamp(min=1/(448*512))
    xq = (x / s).clamp(-448, 448).to(float8_e4m3fn).float()
    y  = (xq @ codes.float().T) * (s * weight_scale.T)          all float32

(docs/fp8.md, "The arithmetic"), and, for an FP8 KV cache, the rotated keys and the values each layer's
attention reads replaced by (k / k_scale).clamp(-448, 448).to(float8_e4m3fn).float() * k_scale (and v
likewise), by wrapping transformers' eager_attention_forward.

The answers are teacher-forced, so that no seed has to be searched for clear greedy margins: for each
prompt of make_goldens.py's PROMPT_LENS (1, 7, 33, 300 tokens) a run's model (each FP8 checkpoint, with
an FP8 KV cache too for ct_static; the bfloat16 base in float32) continues it greedily by NEW_TOKENS
tokens, and the whole sequence is then run in one forward pass: golden.json keeps, per run and sequence,
the token ids and, at the positions KEPT selects (the first 24 positions, every 32nd, and the last
NEW_TOKENS + 8), the TOP_K largest logits with their ids and the top-2 margin. A test
compares its logits at those ids within a tolerance and requires PyTorch's argmax only where PyTorch's
margin is larger than twice that tolerance. Each FP8 run also holds, over every position of its
sequences, the KL divergence of its next-token distribution from the bfloat16 model's (mean, max) and
their top-1 agreement.
"""

import json
import os
import shutil
import sys
import traceback

import torch
import transformers
import transformers.models.llama.modeling_llama as modeling_llama
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import (  # noqa: E402
    PROMPT_LENS,
    PROMPT_SEED,
    make_config,
    randomize,
    rewrite_config,
)

FP8_MAX = 448.0
MIN_SCALE = 1.0 / (448.0 * 512.0)
NEW_TOKENS = 16  # greedy tokens each prompt is continued by before the teacher-forced pass
TOP_K = 4  # logits kept per position
SEED = 7000
CALIB_SEED = 4321
CALIB = [64, 64, 64, 64]  # calibration prompt lengths

LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]

# The base: make_goldens.py's case fields (name, style, dtype, cfg, rope) and kv_names, how its static
# checkpoint names the KV scales. Small, so that its four folders stay under 200 KB with the answers.
BASES = [
    dict(name="gqa_tied", style="v5", dtype="bfloat16", kv_names="k_scale",
         cfg=dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=64,
                  vocab_size=128, tie_word_embeddings=True, rms_norm_eps=1e-5),
         rope=(10000.0, None)),
]


def ct_args(strategy, dynamic, observer):
    return {"num_bits": 8, "type": "float", "symmetric": True, "strategy": strategy, "dynamic": dynamic,
            "group_size": None, "block_structure": None, "actorder": None, "observer": observer,
            "observer_kwargs": {}}


def ct_config(static):
    w = "tensor" if static else "channel"
    a = ct_args("tensor", False, "minmax") if static else ct_args("token", True, None)
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "ignore": ["lm_head"], "kv_cache_scheme": ct_args("tensor", False, "minmax") if static else None,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": ct_args(w, False, "minmax"),
                                          "input_activations": a, "output_activations": None}}}


# Each FP8 variant: folder suffix, quantization_config, weight scales per channel, the shape of a
# per-tensor scale (None when per channel), static inputs, and the KV cache dtypes it is run with.
VARIANTS = [
    dict(suffix="ct_dynamic", qc=ct_config(False), per_channel=True, scalar=None, static=False, kv=["auto"]),
    dict(suffix="ct_static", qc=ct_config(True), per_channel=False, scalar=(1,), static=True, kv=["auto", "fp8"]),
    dict(suffix="autofp8", qc={"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": ["lm_head"]},
         per_channel=False, scalar=(), static=False, kv=["auto"]),
]


def e4m3(x):
    """Round float32 x to e4m3 (nearest even, saturating) and back to float32."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float()


def quantize_weight(w, per_channel):
    """Return the e4m3 codes of w and its float32 scales ([N, 1] per channel, 0-d per tensor)."""
    w = w.float()
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax()
    scale = (amax / FP8_MAX).clamp(min=MIN_SCALE)
    codes = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes.contiguous(), scale.to(torch.float32).contiguous()


class FP8Linear(torch.nn.Module):
    """The W8A8 product of stored e4m3 codes and scales (see the header)."""

    def __init__(self, codes, weight_scale, input_scale):
        super().__init__()
        self.codes = codes.float()  # the e4m3 values, unscaled, [N, K]
        self.weight_scale = weight_scale.float().reshape(-1, 1)  # [N, 1] or [1, 1]
        self.input_scale = None if input_scale is None else input_scale.float().reshape(())

    def forward(self, x):
        x = x.float()
        if self.input_scale is None:
            s = (x.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
        else:
            s = self.input_scale
        xq = e4m3(x / s)
        return (xq @ self.codes.t()) * (s * self.weight_scale.t())


# The KV cache's rounding: eager_attention_forward wrapped so that, while KV["scales"] is set, the keys
# and values every layer's attention reads are rounded to e4m3 with the layer's scales; while
# KV["observe"] is set, their largest magnitudes are recorded instead (calibration).
KV = {"scales": None, "observe": None}
_eager = modeling_llama.eager_attention_forward


def _fp8_kv_eager(module, query, key, value, attention_mask, **kwargs):
    layer = module.layer_idx
    if KV["observe"] is not None:
        k_max, v_max = KV["observe"].get(layer, (0.0, 0.0))
        KV["observe"][layer] = (max(k_max, float(key.float().abs().max())), max(v_max, float(value.float().abs().max())))
    if KV["scales"] is not None:
        ks, vs = KV["scales"][layer]
        key = e4m3(key.float() / ks) * ks
        value = e4m3(value.float() / vs) * vs
    return _eager(module, query, key, value, attention_mask, **kwargs)


modeling_llama.eager_attention_forward = _fp8_kv_eager


def load_reference(d):
    return AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").float().eval()


@torch.no_grad()
def calibrate(model, prompts):
    """Largest |input| of each layer's q_proj (= k, v), o_proj, gate_proj (= up) and down_proj, and of
    each layer's rotated K and V, over the prompts."""
    amax = {}
    hooks = []
    for l, layer in enumerate(model.model.layers):
        for name in ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"):
            def hook(mod, args, key=(l, name)):
                amax[key] = max(amax.get(key, 0.0), float(args[0].float().abs().max()))
            hooks.append(layer.get_submodule(name).register_forward_pre_hook(hook))
    KV["observe"] = {}
    try:
        for p in prompts:
            model(torch.tensor([p], dtype=torch.long))
        kv = dict(KV["observe"])
    finally:
        KV["observe"] = None
        for h in hooks:
            h.remove()
    inputs = {}
    for l in range(len(model.model.layers)):
        for name, src in (("self_attn.q_proj", "self_attn.q_proj"), ("self_attn.k_proj", "self_attn.q_proj"),
                          ("self_attn.v_proj", "self_attn.q_proj"), ("self_attn.o_proj", "self_attn.o_proj"),
                          ("mlp.gate_proj", "mlp.gate_proj"), ("mlp.up_proj", "mlp.gate_proj"),
                          ("mlp.down_proj", "mlp.down_proj")):
            inputs[(l, name)] = torch.tensor(amax[(l, src)] / FP8_MAX, dtype=torch.float32)
    kv_scales = {l: (torch.tensor(k / FP8_MAX, dtype=torch.float32), torch.tensor(v / FP8_MAX, dtype=torch.float32))
                 for l, (k, v) in kv.items()}
    return inputs, kv_scales


def write_fp8(base, variant, bf16_dir, out_dir, input_scales, kv_scales, num_layers):
    """Write the FP8 checkpoint of the bfloat16 folder and return its tensors."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = load_file(os.path.join(bf16_dir, "model.safetensors"))
    for l in range(num_layers):
        for name in LINEARS:
            prefix = f"model.layers.{l}.{name}"
            codes, scale = quantize_weight(tensors[prefix + ".weight"], variant["per_channel"])
            tensors[prefix + ".weight"] = codes
            if variant["scalar"] is not None:
                scale = scale.reshape(variant["scalar"])
            tensors[prefix + ".weight_scale"] = scale.contiguous()
            if variant["static"]:
                tensors[prefix + ".input_scale"] = input_scales[(l, name)].reshape(variant["scalar"]).contiguous()
        if variant["static"]:
            ks, vs = kv_scales[l]
            if base["kv_names"] == "k_scale":
                names = (f"model.layers.{l}.self_attn.k_scale", f"model.layers.{l}.self_attn.v_scale")
                shape = (1,)
            else:
                names = (f"model.layers.{l}.self_attn.k_proj.output_scale", f"model.layers.{l}.self_attn.v_proj.output_scale")
                shape = ()
            tensors[names[0]] = ks.reshape(shape).contiguous()
            tensors[names[1]] = vs.reshape(shape).contiguous()
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(bf16_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = variant["qc"]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = os.path.join(bf16_dir, "generation_config.json")
    if os.path.exists(gen):
        shutil.copy(gen, out_dir)
    return tensors


def fp8_model(bf16_dir, tensors, num_layers, static):
    """The reference model of an FP8 checkpoint: the bfloat16 model with its Linear layers replaced."""
    model = load_reference(bf16_dir)
    for l, layer in enumerate(model.model.layers):
        for name in LINEARS:
            prefix = f"model.layers.{l}.{name}"
            parent, child = name.split(".")
            setattr(layer.get_submodule(parent), child, FP8Linear(
                tensors[prefix + ".weight"], tensors[prefix + ".weight_scale"],
                tensors[prefix + ".input_scale"] if static else None))
    return model


def kept(n, prompt_len):
    """The positions of a sequence of n tokens (prompt_len of them the prompt) whose logits are kept: the
    first 24, every 32nd, and the last NEW_TOKENS + 8 (the continuation and the prompt's end)."""
    return [p for p in range(n) if p < 24 or p % 32 == 0 or p >= n - NEW_TOKENS - 8]


@torch.no_grad()
def references(model, prompts):
    """Each prompt continued greedily by NEW_TOKENS tokens, then the whole sequence's logits in one pass:
    the sequences, their kept positions' top logits, and every position's log-probabilities (float64)."""
    records, all_log_probs = [], []
    for prompt in prompts:
        ids = list(prompt)
        for _ in range(NEW_TOKENS):
            ids.append(int(model(torch.tensor([ids], dtype=torch.long)).logits[0, -1].argmax()))
        logits = model(torch.tensor([ids], dtype=torch.long)).logits[0].float()
        positions = []
        for p in kept(len(ids), len(prompt)):
            top = torch.topk(logits[p], TOP_K)
            positions.append(dict(pos=p, ids=[int(i) for i in top.indices],
                                  logits=[float("%.6g" % float(v)) for v in top.values],
                                  margin=float("%.4g" % float(top.values[0] - top.values[1]))))
        records.append(dict(prompt_len=len(prompt), ids=ids, positions=positions))
        all_log_probs.append(torch.log_softmax(logits.double(), dim=-1))
    return records, all_log_probs


def kl_stats(fp8_log_probs, bf16_log_probs):
    """KL(bf16 || fp8) of the next-token distributions (mean, max) and top-1 agreement over every position
    of the sequences (both models' log-probabilities on the same ids)."""
    kls, agree, n = [], 0, 0
    for a, b in zip(bf16_log_probs, fp8_log_probs):
        kls.append((a.exp() * (a - b)).sum(dim=-1))
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        n += a.shape[0]
    kl = torch.cat(kls)
    return dict(kl_vs_bf16_mean=float(kl.mean()), kl_vs_bf16_max=float(kl.max()), top1_vs_bf16=agree / n, positions=n)


@torch.no_grad()
def sequence_log_probs(model, records):
    """model's next-token log-probabilities (float64) at every position of each record's sequence."""
    return [torch.log_softmax(model(torch.tensor([r["ids"]], dtype=torch.long)).logits[0].double(), dim=-1)
            for r in records]


@torch.no_grad()
def check_kv_hook(model, prompt, num_layers):
    """Fail unless the KV rounding reaches the attention: scales far too small saturate every K and V."""
    ids = torch.tensor([prompt], dtype=torch.long)
    plain = model(ids).logits
    KV["scales"] = {l: (torch.tensor(1e-6), torch.tensor(1e-6)) for l in range(num_layers)}
    try:
        rounded = model(ids).logits
    finally:
        KV["scales"] = None
    if torch.allclose(plain, rounded):
        raise RuntimeError("the FP8 KV rounding did not reach the attention (transformers' eager attention changed?)")


def build_base(base, outdir, log):
    vocab = base["cfg"]["vocab_size"]
    gen = torch.Generator().manual_seed(PROMPT_SEED)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENS]
    cgen = torch.Generator().manual_seed(CALIB_SEED)
    calib = [torch.randint(0, vocab, (n,), generator=cgen).tolist() for n in CALIB]
    num_layers = 2
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(make_config(base)).float()
    randomize(model, SEED)
    model = model.to(torch.bfloat16)
    bf16_dir = os.path.join(outdir, base["name"] + "_bf16")
    os.makedirs(bf16_dir, exist_ok=True)
    model.save_pretrained(bf16_dir, safe_serialization=True)
    rewrite_config(os.path.join(bf16_dir, "config.json"), base)
    common = dict(seed=SEED, torch_version=torch.__version__, transformers_version=transformers.__version__,
                  new_tokens=NEW_TOKENS, top_k=TOP_K)

    bf16_model = load_reference(bf16_dir)
    check_kv_hook(bf16_model, prompts[2], num_layers)
    bf16_records, _ = references(bf16_model, prompts)
    with open(os.path.join(bf16_dir, "golden.json"), "w") as f:
        json.dump(dict(case=base["name"] + "_bf16", base=base["name"] + "_bf16",
                       runs=[dict(kv_cache_dtype="auto", sequences=bf16_records)], **common), f, separators=(",", ":"))
    input_scales, kv_scales = calibrate(bf16_model, calib)
    for variant in VARIANTS:
        case = base["name"] + "_" + variant["suffix"]
        tensors = write_fp8(base, variant, bf16_dir, os.path.join(outdir, case), input_scales, kv_scales, num_layers)
        model = fp8_model(bf16_dir, tensors, num_layers, variant["static"])
        runs = []
        for kv in variant["kv"]:
            KV["scales"] = {l: kv_scales[l] for l in range(num_layers)} if kv == "fp8" else None
            try:
                records, fp8_log_probs = references(model, prompts)
            finally:
                KV["scales"] = None
            stats = kl_stats(fp8_log_probs, sequence_log_probs(bf16_model, records))
            runs.append(dict(kv_cache_dtype=kv, sequences=records, **stats))
            margins = sorted(pos["margin"] for r in records for pos in r["positions"])
            log.write(f"{case} kv {kv}: KL vs bf16 mean {stats['kl_vs_bf16_mean']:.3g} max {stats['kl_vs_bf16_max']:.3g}, "
                      f"top-1 agreement {stats['top1_vs_bf16']:.3f} over {stats['positions']} positions; "
                      f"{len(margins)} kept positions, {sum(m > 0.02 for m in margins)} with a margin above 0.02 "
                      f"(smallest {margins[0]:.3g})\n")
        with open(os.path.join(outdir, case, "golden.json"), "w") as f:
            json.dump(dict(case=case, base=base["name"] + "_bf16", quantization_config=variant["qc"], runs=runs, **common),
                      f, separators=(",", ":"))
    log.write(f"{base['name']}: ok\n")


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    failed = 0
    with open(os.path.join(outdir, "make_fp8_goldens.log"), "w") as log:
        log.write(f"torch {torch.__version__} transformers {transformers.__version__}\n")
        for base in BASES:
            try:
                build_base(base, outdir, log)
            except Exception:
                failed += 1
                log.write(f"{base['name']}: FAILED\n{traceback.format_exc()}\n")
            log.flush()
    with open(os.path.join(outdir, "make_fp8_goldens.log")) as log:
        sys.stdout.write(log.read())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
