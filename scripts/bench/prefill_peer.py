#!/usr/bin/env python3
"""The PyTorch peer of `gollm bench latency` at batch 1 with long prompts: the prefill of one prompt
through a model of Llama-3.1-8B's shape (32 layers, hidden 4096, 32 query and 8 KV heads of 128, MLP
14336, vocabulary 128256, llama3 rotary scaling), bf16 with random weights, written in plain torch:
cuBLAS matrix products (q, k and v as one product, gate and up as one, as gollm stacks them), causal
scaled_dot_product_attention on its flash kernel, RMSNorm in float32, logits of the last position only.
No KV cache is written and nothing is chunked (an H200 holds a 131072-token prefill's activations),
so this is the least a full prefill costs in eager PyTorch, the time to first token gollm is measured
against.

For each length it prints the median of --iters timed runs (CUDA events, after one warm-up run), the
prompt tokens per second, and the attention's part: the median of SDPA alone on one layer's shapes times
the layers, with its TFLOP/s (causal: 4·d·heads·L·(L+1)/2 a layer).

    python3 scripts/bench/prefill_peer.py [--lens 8192,32768,131071] [--iters 3] [--json FILE]

(131071: gollm's longest prompt on a 131072-token context, which leaves room for the token it generates.)
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# meta-llama/Llama-3.1-8B's config.json.
HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 14336, 32, 32, 8, 128, 128256
EPS, THETA = 1e-5, 500000.0
SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)


def inv_freq():
    """The rotary frequencies with llama3 scaling (transformers' _compute_llama3_parameters)."""
    inv = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
    old = SCALING["original_max_position_embeddings"]
    low_wavelen = old / SCALING["low_freq_factor"]
    high_wavelen = old / SCALING["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / SCALING["factor"], inv)
    smooth = (old / wavelen - SCALING["low_freq_factor"]) / (SCALING["high_freq_factor"] - SCALING["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / SCALING["factor"] + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rms_norm(x, w):
    v = x.float()
    return (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype) * w


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attention(q, k, v, gqa):
    """Causal attention on the flash kernel; without its GQA support, K and V repeated per query head."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        if gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)


def make_weights(dev):
    g = torch.Generator(device=dev).manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=g) * 0.02)

    layers = []
    for _ in range(LAYERS):
        layers.append(dict(
            in_norm=torch.ones(HIDDEN, device=dev, dtype=torch.bfloat16),
            qkv=w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
            o=w(HIDDEN, HEADS * HEAD_DIM),
            post_norm=torch.ones(HIDDEN, device=dev, dtype=torch.bfloat16),
            gate_up=w(2 * INTER, HIDDEN),
            down=w(HIDDEN, INTER),
        ))
    return dict(embed=w(VOCAB, HIDDEN), layers=layers, norm=torch.ones(HIDDEN, device=dev, dtype=torch.bfloat16),
                lm_head=w(VOCAB, HIDDEN))


@torch.inference_mode()
def prefill(W, ids, cos, sin, gqa):
    n = ids.shape[0]
    x = F.embedding(ids, W["embed"])
    for lw in W["layers"]:
        h = rms_norm(x, lw["in_norm"])
        qkv = h @ lw["qkv"].T
        q, k, v = qkv.split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        q = rotate(q.view(n, HEADS, HEAD_DIM).transpose(0, 1), cos, sin).unsqueeze(0)
        k = rotate(k.view(n, KV_HEADS, HEAD_DIM).transpose(0, 1), cos, sin).unsqueeze(0)
        v = v.view(n, KV_HEADS, HEAD_DIM).transpose(0, 1).unsqueeze(0)
        o = attention(q, k, v, gqa).squeeze(0).transpose(0, 1).reshape(n, HEADS * HEAD_DIM)
        del q, k, v, qkv, h
        x = x + o @ lw["o"].T
        h = rms_norm(x, lw["post_norm"])
        gate, up = (h @ lw["gate_up"].T).chunk(2, dim=-1)
        x = x + (F.silu(gate) * up) @ lw["down"].T
        del gate, up, h
    last = rms_norm(x[-1:], W["norm"])
    return (last @ W["lm_head"].T).argmax(-1)


def timed(fn, iters, warmup=1):
    times = []
    for i in range(warmup + iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lens", default="8192,32768,131071", help="prompt lengths, comma-separated")
    ap.add_argument("--iters", type=int, default=3, help="timed runs a length (one above 65536)")
    ap.add_argument("--json", help="write the results as JSON lines to this file too")
    args = ap.parse_args()
    dev = torch.device("cuda")
    W = make_weights(dev)
    gqa = True
    try:
        q = torch.randn(1, HEADS, 64, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, 64, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        attention(q, k, k, True)
    except (RuntimeError, TypeError):
        gqa = False  # this PyTorch's flash kernel takes no GQA: K and V are repeated (counted in the time)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, flash SDPA {'with' if gqa else 'without'} GQA", flush=True)
    out = open(args.json, "w") if args.json else None
    freq = inv_freq().to(dev)
    for n in [int(x) for x in args.lens.split(",")]:
        angles = torch.outer(torch.arange(n, device=dev, dtype=torch.float32), freq)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
        ids = torch.randint(0, VOCAB, (n,), device=dev)
        iters = 1 if n > 65536 else args.iters
        ms = timed(lambda: prefill(W, ids, cos, sin, gqa), iters)
        q = torch.randn(1, HEADS, n, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, n, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, KV_HEADS, n, HEAD_DIM, device=dev, dtype=torch.bfloat16)
        with torch.inference_mode():
            attn_layer_ms = timed(lambda: attention(q, k, v, gqa), max(3, iters))
        del q, k, v
        flops = 4 * HEAD_DIM * HEADS * n * (n + 1) / 2
        r = dict(tokens=n, prefill_ms=ms, prefill_tok_s=n / (ms / 1e3), attn_ms=LAYERS * attn_layer_ms,
                 attn_tflops=flops / (attn_layer_ms * 1e-3) / 1e12, iters=iters, gqa=gqa, torch=torch.__version__)
        print(f"prefill_peer tokens {n} prefill_ms {ms:.1f} tok_s {r['prefill_tok_s']:.0f} "
              f"attn_ms {r['attn_ms']:.1f} attn_tflops {r['attn_tflops']:.1f}", flush=True)
        if out:
            out.write(json.dumps(r) + "\n")
            out.flush()
        del cos, sin, emb, angles, ids
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
