#!/usr/bin/env python3
"""Write tiny random checkpoints of the non-LLaMA families and HF transformers' greedy continuations.

Run on a machine with PyTorch and transformers (the device machine has torch 2.11, transformers 5.17):

    python3 scripts/goldens/make_family_goldens.py OUTDIR
    # then copy OUTDIR/<case> folders into model/testdata/golden/

The method and golden.json's format are make_goldens.py's (same prompts of 1, 7, 33 and 300 tokens, 32
greedy tokens each from a full forward without a KV cache, last-position logits, the smallest top-2
margin, seeds retried until every margin is at least MIN_MARGIN), over Qwen2, Qwen3, Mistral, Ministral
and Gemma 3 (text, and the text tower of a Gemma3ForConditionalGeneration folder). Windows are 16
tokens, so the 33- and 300-token prompts and the generation after them cross them.

Each case is built from its family's config class in the 5.x form (what save_pretrained writes), and
optionally rewritten into the 4.x form (rope_theta, rope_scaling, rope_local_base_freq,
sliding_window_pattern, torch_dtype) before transformers loads it back: the reference is always what
transformers makes of the file as written. golden.json records that (hf_config: the loaded config as
a dict; rotary: every rotary embedding's inv_freq by module name), so that a config reader can be
checked against it. A case that transformers cannot build is logged and left out; the log is printed.
"""

import json
import os
import sys
import traceback

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_goldens import DTYPES, MIN_MARGIN, NEW_TOKENS, PROMPT_LENS, PROMPT_SEED, greedy  # noqa: E402

WINDOW = 16
COMMON = dict(hidden_size=64, intermediate_size=128, vocab_size=512, max_position_embeddings=512,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)

GEMMA_ROPE_V5 = {
    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
}
GEMMA_LAYERS = ["sliding_attention"] * 5 + ["full_attention"]

# Each case: name, family (config class, model class), style, dtype, config fields. "v4" rewrites
# config.json into the 4.x form (rewrite_v4 below).
CASES = [
    dict(name="qwen2_f32_tied_v4", family="qwen2", style="v4", dtype="float32",
         cfg=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                  rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    dict(name="qwen2_bf16_window_v5", family="qwen2", style="v5", dtype="bfloat16",
         cfg=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
                  rms_norm_eps=1e-6, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="qwen3_f32_untied_v5", family="qwen3", style="v5", dtype="float32",
         cfg=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  tie_word_embeddings=False, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    dict(name="qwen3_bf16_tied_v4", family="qwen3", style="v4", dtype="bfloat16",
         cfg=dict(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                  tie_word_embeddings=True, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    dict(name="mistral_f32_window_v4", family="mistral", style="v4", dtype="float32",
         cfg=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                  rms_norm_eps=1e-5, sliding_window=WINDOW,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    dict(name="mistral_bf16_window_v5", family="mistral", style="v5", dtype="bfloat16",
         cfg=dict(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
                  rms_norm_eps=1e-5, sliding_window=WINDOW,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    dict(name="ministral_f32_mixed_v5", family="ministral", style="v5", dtype="float32",
         cfg=dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                  rms_norm_eps=1e-5, sliding_window=WINDOW,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                  rope_parameters={"rope_type": "default", "rope_theta": 100000000.0})),
    dict(name="gemma3_f32_softcap_v5", family="gemma3_text", style="v5", dtype="float32",
         cfg=dict(num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, layer_types=GEMMA_LAYERS, query_pre_attn_scalar=24,
                  final_logit_softcapping=30.0, attn_logit_softcapping=50.0, rope_parameters=GEMMA_ROPE_V5)),
    dict(name="gemma3_bf16_v4", family="gemma3_text", style="v4", dtype="bfloat16",
         cfg=dict(num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, layer_types=GEMMA_LAYERS, query_pre_attn_scalar=32,
                  rope_parameters=GEMMA_ROPE_V5)),
    dict(name="gemma3_bf16_headdim256_v5", family="gemma3_text", style="v5", dtype="bfloat16",
         cfg=dict(num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, layer_types=GEMMA_LAYERS, query_pre_attn_scalar=256,
                  rope_parameters=GEMMA_ROPE_V5)),
    dict(name="gemma3_f32_headdim256_v4", family="gemma3_text", style="v4", dtype="float32",
         cfg=dict(num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, layer_types=GEMMA_LAYERS, query_pre_attn_scalar=256,
                  rope_parameters=GEMMA_ROPE_V5)),
    dict(name="gemma3mm_f32_v5", family="gemma3", style="v5", dtype="float32",
         cfg=dict(num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, layer_types=GEMMA_LAYERS, query_pre_attn_scalar=32,
                  rope_parameters=GEMMA_ROPE_V5)),
    # The same folder with the 4.x weight names of the checkpoints on the hub (language_model.model.*).
    dict(name="gemma3mm_bf16_oldnames_v4", family="gemma3", style="v4", dtype="bfloat16", old_names=True,
         cfg=dict(num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                  rms_norm_eps=1e-6, sliding_window=WINDOW, layer_types=GEMMA_LAYERS, query_pre_attn_scalar=32,
                  rope_parameters=GEMMA_ROPE_V5)),
]

VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14, num_channels=3)


def gemma_text_config(fields):
    """Gemma3TextConfig in the 5.x form (rope_parameters keyed by layer type), or, where this
    transformers does not take it, from the 4.x keywords; either way the rotary tables must come out
    as asked (checked by the caller through golden.json's rotary)."""
    try:
        return transformers.Gemma3TextConfig(**fields)
    except Exception as err:  # noqa: BLE001
        print(f"Gemma3TextConfig rejected rope_parameters ({err}); using the 4.x keywords", file=sys.stderr)
        params = fields.pop("rope_parameters")
        full, local = params["full_attention"], params["sliding_attention"]
        scaling = {k: v for k, v in full.items() if k != "rope_theta"}
        return transformers.Gemma3TextConfig(rope_theta=full["rope_theta"], rope_local_base_freq=local["rope_theta"],
                                             rope_scaling=scaling, **fields)


def make_model(case):
    fam = case["family"]
    fields = dict(COMMON, **case["cfg"])
    if fam == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**fields))
    if fam == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**fields))
    if fam == "mistral":
        return transformers.MistralForCausalLM(transformers.MistralConfig(**fields))
    if fam == "ministral":
        return transformers.MinistralForCausalLM(transformers.MinistralConfig(**fields))
    if fam == "gemma3_text":
        return transformers.Gemma3ForCausalLM(gemma_text_config(fields))
    if fam == "gemma3":
        cfg = transformers.Gemma3Config(text_config=gemma_text_config(fields).to_dict(), vision_config=VISION,
                                        mm_tokens_per_image=4)
        return transformers.Gemma3ForConditionalGeneration(cfg)
    raise ValueError(fam)


def randomize(model, seed, gemma):
    """Overwrite every parameter with seeded values: norms near 1 (Gemma's stored w near 0, as it
    multiplies by 1 + w), matrices N(0, s^2), biases N(0, 0.1^2)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                val = (0.0 if gemma else 1.0) + 0.2 * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name or "lm_head" in name:
                val = 0.5 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                val = 0.1 * torch.randn(p.shape, generator=g)
            else:
                val = 0.15 * torch.randn(p.shape, generator=g)
            p.copy_(val)


def rewrite_v4(cfg, case):
    """The 4.x form of a 5.x config dict: rope_theta (+ rope_scaling, rope_local_base_freq for
    Gemma 3), no layer_types where 4.x derived them (sliding_window_pattern, max_window_layers),
    torch_dtype."""
    text = cfg["text_config"] if "text_config" in cfg else cfg
    params = case["cfg"]["rope_parameters"]
    for c in (cfg, text):
        for key in ("dtype", "torch_dtype", "rope_parameters", "rope_theta", "rope_scaling"):
            c.pop(key, None)
    if "full_attention" in params:
        full, local = params["full_attention"], params["sliding_attention"]
        text["rope_theta"] = full["rope_theta"]
        text["rope_local_base_freq"] = local["rope_theta"]
        scaling = {k: v for k, v in full.items() if k != "rope_theta"}
        text["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
        if text.get("layer_types") == GEMMA_LAYERS:
            text.pop("layer_types")
            text["sliding_window_pattern"] = 6
    else:
        text["rope_theta"] = params["rope_theta"]
        text["rope_scaling"] = None
        if case["family"] == "qwen2":
            text.pop("layer_types", None)
    cfg["torch_dtype"] = case["dtype"]
    if text is not cfg:
        text["torch_dtype"] = case["dtype"]
    cfg["transformers_version"] = "4.50.0"
    return cfg


OLD_PREFIXES = [("model.language_model.", "language_model.model."), ("model.vision_tower.", "vision_tower."),
                ("model.multi_modal_projector.", "multi_modal_projector."), ("lm_head.", "language_model.lm_head.")]


def rename_old(d):
    """Rewrite model.safetensors' names into the 4.x ones of Gemma 3 checkpoints on the hub."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(d, "model.safetensors")
    tensors = load_file(path)
    out = {}
    for k, v in tensors.items():
        for new, old in OLD_PREFIXES:
            if k.startswith(new):
                k = old + k[len(new):]
                break
        out[k] = v.contiguous()
    save_file(out, path, metadata={"format": "pt"})


@torch.no_grad()
def build_case(case, outdir, log):
    d = os.path.join(outdir, case["name"])
    vocab = COMMON["vocab_size"]
    gen = torch.Generator().manual_seed(PROMPT_SEED)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENS]
    gemma = case["family"].startswith("gemma")
    for attempt in range(8):
        seed = 1000 * (CASES.index(case) + 101) + attempt
        torch.manual_seed(seed)
        model = make_model(case).float()
        randomize(model, seed, gemma)
        model = model.to(DTYPES[case["dtype"]])
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        path = os.path.join(d, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        if case["style"] == "v4":
            cfg = rewrite_v4(cfg, case)
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        if case.get("old_names"):
            rename_old(d)
        if case["family"].startswith("gemma"):
            from safetensors import safe_open
            with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
                names = sorted(f.keys())
            log.write(f"{case['name']}: {len(names)} tensors, e.g. {names[:3]} ... {names[-3:]}\n")

        cls = transformers.Gemma3ForConditionalGeneration if case["family"] == "gemma3" else AutoModelForCausalLM
        ref = cls.from_pretrained(d, dtype=DTYPES[case["dtype"]], attn_implementation="eager").float().eval()
        saved = {k: v.float() for k, v in model.state_dict().items()}
        loaded = ref.state_dict()
        for k, v in saved.items():
            if k not in loaded:
                raise RuntimeError(f"{case['name']}: {k} missing after reload")
            if not torch.equal(loaded[k].float(), v):
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

    rotary = {}
    for name, mod in ref.named_modules():
        for buf_name, buf in mod.named_buffers(recurse=False):
            if "inv_freq" in buf_name:
                rotary[f"{name}.{buf_name}"] = buf.float().tolist()
    golden = dict(
        case=case["name"], family=case["family"], style=case["style"], dtype=case["dtype"], seed=seed,
        torch_version=torch.__version__, transformers_version=transformers.__version__,
        new_tokens=NEW_TOKENS, hf_config=json.loads(ref.config.to_json_string()), rotary=rotary,
        prompts=records,
    )
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, separators=(",", ":"))
    log.write(f"{case['name']}: ok, files {sorted(os.listdir(d))}\n")


def main():
    outdir = sys.argv[1]
    only = set(sys.argv[2:])
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    failed = 0
    with open(os.path.join(outdir, "make_family_goldens.log"), "w") as log:
        log.write(f"torch {torch.__version__} transformers {transformers.__version__}\n")
        for case in CASES:
            if only and case["name"] not in only:
                continue
            try:
                build_case(case, outdir, log)
            except Exception:
                failed += 1
                log.write(f"{case['name']}: FAILED\n{traceback.format_exc()}\n")
            log.flush()
    with open(os.path.join(outdir, "make_family_goldens.log")) as log:
        sys.stdout.write(log.read())
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
