#!/usr/bin/env python3
"""Write tiny random LLaMA checkpoints and HF transformers' greedy continuations of them (the goldens).

Run on a machine with PyTorch and transformers (the device machine has torch 2.11, transformers 5.17):

    python3 scripts/goldens/make_goldens.py OUTDIR
    # then: rm -rf model/testdata/golden && mkdir -p model/testdata/golden && cp -r OUTDIR/* model/testdata/golden/

For each case in CASES it builds a LlamaForCausalLM from a config (random weights drawn with a fixed seed,
larger than transformers' init so that the next-token distributions are peaked), stores it in the case's
dtype with save_pretrained, optionally rewrites config.json into the transformers-4 style (rope_theta +
rope_scaling, torch_dtype) instead of the 5 style (rope_parameters, dtype), then loads the folder back with
from_pretrained exactly as written, converts it to float32 (.float()) and, on the CPU in IEEE float32 with
eager attention, records for prompts of 1, 7, 33 and 300 random token ids:

  - last_logits: the logits at the last prompt position (from the forward over the prompt alone);
  - greedy_ids: 32 greedy tokens, each from a full forward over prompt + tokens so far (no KV cache);
  - min_margin: the smallest gap between the best and second-best logit over those 32 choices.

A case's seed is retried (up to 8 times) until every min_margin is at least MIN_MARGIN, so that a float32
implementation that differs from transformers only by rounding must pick the same tokens.

golden.json also holds what transformers made of the config (rope parameters, head_dim, dtype) and the
inv_freq buffer of the rotary embedding, so a reader of the config can be checked against it.
"""

import json
import os
import sys
import traceback

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

PROMPT_LENS = [1, 7, 33, 300]
NEW_TOKENS = 32
MIN_MARGIN = 2e-4
PROMPT_SEED = 1234

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Each case: name, style ("v4" or "v5" config.json), dtype, and LlamaConfig fields. rope is
# (rope_theta, scaling dict or None); scaling dicts use the 5-style keys and are rewritten for v4.
CASES = [
    dict(name="mha_f32_tied_v5", style="v5", dtype="float32",
         cfg=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=171,
                  vocab_size=509, tie_word_embeddings=True, rms_norm_eps=1e-5),
         rope=(10000.0, None)),
    dict(name="gqa4_f32_untied_v4", style="v4", dtype="float32",
         cfg=dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=False, rms_norm_eps=1e-6),
         rope=(500000.0, None)),
    dict(name="mqa_bf16_tied_v5", style="v5", dtype="bfloat16",
         cfg=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=True, rms_norm_eps=1e-5),
         rope=(10000.0, None)),
    dict(name="llama3_f32_untied_v4", style="v4", dtype="float32",
         cfg=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=False, rms_norm_eps=1e-5),
         rope=(10000.0, dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=64))),
    dict(name="llama3_bf16_tied_v5", style="v5", dtype="bfloat16",
         cfg=dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=True, rms_norm_eps=1e-5),
         rope=(10000.0, dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=64))),
    dict(name="linear_f16_untied_v4", style="v4", dtype="float16",
         cfg=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=False, rms_norm_eps=1e-5),
         rope=(10000.0, dict(rope_type="linear", factor=2.0))),
    dict(name="linear_f32_tied_v5", style="v5", dtype="float32",
         cfg=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=True, rms_norm_eps=1e-5),
         rope=(10000.0, dict(rope_type="linear", factor=4.0))),
    dict(name="headdim32_f32_untied_v5", style="v5", dtype="float32",
         cfg=dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  intermediate_size=128, vocab_size=512, tie_word_embeddings=False, rms_norm_eps=1e-5),
         rope=(10000.0, None)),
    dict(name="gqa4_f16_tied_v5", style="v5", dtype="float16",
         cfg=dict(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=512, tie_word_embeddings=True, rms_norm_eps=1e-5),
         rope=(10000.0, None)),
    dict(name="headdim32_bf16_untied_v4", style="v4", dtype="bfloat16",
         cfg=dict(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                  intermediate_size=128, vocab_size=512, tie_word_embeddings=False, rms_norm_eps=1e-5),
         rope=(10000.0, dict(rope_type="llama3", factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=128))),
]


def make_config(case):
    theta, scaling = case["rope"]
    params = {"rope_type": "default", "rope_theta": theta}
    if scaling:
        params.update(scaling)
    common = dict(num_hidden_layers=2, max_position_embeddings=512, hidden_act="silu",
                  attention_bias=False, mlp_bias=False, bos_token_id=1, eos_token_id=2, **case["cfg"])
    return LlamaConfig(rope_parameters=params, **common)


def randomize(model, seed):
    """Overwrite every parameter with seeded values: norms near 1, matrices N(0, s^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                val = 1.0 + 0.2 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or "lm_head" in name:
                val = 0.5 * torch.randn(p.shape, generator=g)
            else:
                val = 0.15 * torch.randn(p.shape, generator=g)
            p.copy_(val)


def rewrite_config(path, case):
    """Turn save_pretrained's (5-style) config.json into the requested style, with the case's dtype."""
    with open(path) as f:
        cfg = json.load(f)
    theta, scaling = case["rope"]
    for key in ("dtype", "torch_dtype", "rope_parameters", "rope_theta", "rope_scaling"):
        cfg.pop(key, None)
    if case["style"] == "v5":
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            params.update(scaling)
        cfg["rope_parameters"] = params
        cfg["dtype"] = case["dtype"]
    else:
        cfg["rope_theta"] = theta
        if scaling is None:
            cfg["rope_scaling"] = None
        else:
            old = dict(scaling)
            kind = old.pop("rope_type")
            # Older 4.x checkpoints spell the key "type" (linear, dynamic); Llama 3.1 uses "rope_type".
            cfg["rope_scaling"] = dict({"type" if kind == "linear" else "rope_type": kind}, **old)
        cfg["torch_dtype"] = case["dtype"]
        cfg["transformers_version"] = "4.46.0"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@torch.no_grad()
def greedy(model, prompt):
    ids = torch.tensor([prompt], dtype=torch.long)
    last_logits = model(ids).logits[0, -1].float()
    out, margins = [], []
    for _ in range(NEW_TOKENS):
        logits = model(ids).logits[0, -1].float()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        out.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return last_logits, out, min(margins)


def build_case(case, outdir, log):
    d = os.path.join(outdir, case["name"])
    vocab = case["cfg"]["vocab_size"]
    gen = torch.Generator().manual_seed(PROMPT_SEED)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENS]
    for attempt in range(8):
        seed = 1000 * (CASES.index(case) + 1) + attempt
        torch.manual_seed(seed)
        model = LlamaForCausalLM(make_config(case)).float()
        randomize(model, seed)
        model = model.to(DTYPES[case["dtype"]])
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        rewrite_config(os.path.join(d, "config.json"), case)

        ref = AutoModelForCausalLM.from_pretrained(d, dtype=DTYPES[case["dtype"]],
                                                   attn_implementation="eager").float().eval()
        # The stored weights must be what we drew (rounded to the case's dtype).
        saved = {k: v.float() for k, v in model.state_dict().items()}
        for k, v in ref.state_dict().items():
            if k in saved and not torch.equal(saved[k], v):
                raise RuntimeError(f"{case['name']}: reloaded {k} differs")
        records = []
        for prompt in prompts:
            last_logits, ids, margin = greedy(ref, prompt)
            records.append(dict(prompt_ids=prompt, greedy_ids=ids, min_margin=margin,
                                last_logits=[float(x) for x in last_logits]))
        worst = min(r["min_margin"] for r in records)
        log.write(f"{case['name']}: seed {seed} min margin {worst:.3g}\n")
        if worst >= MIN_MARGIN:
            break
    else:
        raise RuntimeError(f"{case['name']}: no seed with min margin >= {MIN_MARGIN}")

    rc = ref.config
    rotary = getattr(ref.model, "rotary_emb", None)
    inv_freq = rotary.inv_freq.float().tolist() if rotary is not None else None
    golden = dict(
        case=case["name"], style=case["style"], dtype=case["dtype"], seed=seed,
        torch_version=torch.__version__, transformers_version=transformers.__version__,
        new_tokens=NEW_TOKENS,
        hf_rope_parameters=getattr(rc, "rope_parameters", None),
        hf_head_dim=getattr(rc, "head_dim", None),
        hf_tie_word_embeddings=rc.tie_word_embeddings,
        inv_freq=inv_freq,
        prompts=records,
    )
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    log.write(f"{case['name']}: ok, files {sorted(os.listdir(d))}\n")


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    torch.backends.cuda.matmul.allow_tf32 = False
    failed = 0
    with open(os.path.join(outdir, "make_goldens.log"), "w") as log:
        log.write(f"torch {torch.__version__} transformers {transformers.__version__}\n")
        for case in CASES:
            try:
                build_case(case, outdir, log)
            except Exception:
                failed += 1
                log.write(f"{case['name']}: FAILED\n{traceback.format_exc()}\n")
            log.flush()
    with open(os.path.join(outdir, "make_goldens.log")) as log:
        sys.stdout.write(log.read())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
