#!/usr/bin/env python3
"""The torch peer of gollm's FP8 decode step: a Llama-3-8B-shaped decoder with e4m3 weights.

Every Linear layer of the 32 decoder layers is e4m3 with one float32 scale per output row (max|w|/448,
as gollm's --quantization fp8), its input quantized per token at run time (max|x|/448, floored at
1/(448*512), saturated to +-448) and multiplied by torch._scaled_mm with row-wise scales (bf16 out);
embeddings and the LM head stay bf16; RMSNorm, RoPE, SwiGLU in bf16; attention is SDPA over a static
contiguous bf16 KV cache (GQA, 32 query heads, 8 KV heads, head_dim 128). The step is compiled with
torch.compile (inductor's fused kernels, without its own CUDA graphs) and then captured whole in one
CUDA graph by hand (torch.cuda.graph, as vLLM captures its decode steps: the in-place KV writes that
kept torch.compile's "reduce-overhead" graphs off do not matter to a manual capture), and timed with
CUDA events at a fixed context (default 1088: a 1024-token prompt halfway through 128 new tokens, gollm
bench latency's mean), one new token per sequence, greedy. Each step falls back to the uncaptured or
eager form when a stage fails, and says so. Random weights, N(0, 0.02^2) as transformers initialises.

Run on the device (torch only; no internet needed):
    python3 scripts/bench/fp8_peer.py [--batches 1,64] [--context 1088] [--dtypes fp8,bf16] [--json OUT]
Prints one line per (dtype, batch): step ms (median of --iters steps after --warmup), how it ran, and
the step's roofline (weights and KV bytes over the copy bandwidth measured first, as gollm bench does).
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0
MIN_SCALE = 1.0 / (448.0 * 512.0)


def copy_bandwidth(dev, n=1 << 30):
    """(bytes read + bytes written) per second of a device-to-device copy of n bytes: the median of 20."""
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    del a, b
    return 2 * n / (times[len(times) // 2] * 1e-3)


def capture(fn, tokens, warmup):
    """fn(tokens) as one CUDA graph: warmed up on a side stream, captured, then replayed on each call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn(tokens)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(tokens)

    def replay(_):
        g.replay()
        return out

    return replay


def quantize_rows(w):
    """e4m3 codes and float32 row scales of a bf16 [N][K] matrix (gollm's --quantization fp8)."""
    wf = w.float()
    s = (wf.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=MIN_SCALE)
    q = (wf / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, s.reshape(1, -1).contiguous()


class FP8Linear:
    """y = (e4m3(x/sx) . e4m3(W)^T) * sx * sw, through torch._scaled_mm with row-wise scales."""

    pad16 = False  # set when _scaled_mm refuses a row count that is not a multiple of 16

    def __init__(self, n, k, dev, gen):
        w = (torch.randn(n, k, device=dev, generator=gen, dtype=torch.bfloat16) * 0.02)
        q, s = quantize_rows(w)
        self.wt = q.t()  # [K][N], column-major: what _scaled_mm's second operand must be
        self.sw = s
        self.bytes = n * k

    def __call__(self, x):
        m = x.shape[0]
        xf = x.float()
        sx = (xf.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=MIN_SCALE)
        xq = (xf / sx).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        if FP8Linear.pad16 and m % 16:
            pad = 16 - m % 16
            xq = torch.cat([xq, xq.new_zeros(pad, xq.shape[1])])
            sx = torch.cat([sx, sx.new_ones(pad, 1)])
        y = torch._scaled_mm(xq, self.wt, scale_a=sx, scale_b=self.sw, out_dtype=torch.bfloat16)
        return y[:m]


class BF16Linear:
    def __init__(self, n, k, dev, gen):
        self.w = torch.randn(n, k, device=dev, generator=gen, dtype=torch.bfloat16) * 0.02
        self.bytes = 2 * n * k

    def __call__(self, x):
        return x @ self.w.t()


class Decoder:
    def __init__(self, args, dtype, batch, dev):
        gen = torch.Generator(device=dev).manual_seed(1)
        lin = FP8Linear if dtype == "fp8" else BF16Linear
        h, i, hq, hkv, d = args.hidden, args.inter, args.heads, args.kv_heads, args.head_dim
        self.h, self.hq, self.hkv, self.d = h, hq, hkv, d
        self.layers = []
        for _ in range(args.layers):
            self.layers.append(dict(
                qkv=lin((hq + 2 * hkv) * d, h, dev, gen), o=lin(h, hq * d, dev, gen),
                gu=lin(2 * i, h, dev, gen), down=lin(h, i, dev, gen),
                n1=torch.ones(h, device=dev, dtype=torch.bfloat16), n2=torch.ones(h, device=dev, dtype=torch.bfloat16),
                k=torch.randn(batch, hkv, args.context + 1, d, device=dev, generator=gen, dtype=torch.bfloat16),
                v=torch.randn(batch, hkv, args.context + 1, d, device=dev, generator=gen, dtype=torch.bfloat16)))
        self.embed = torch.randn(args.vocab, h, device=dev, generator=gen, dtype=torch.bfloat16) * 0.02
        self.lm_head = torch.randn(args.vocab, h, device=dev, generator=gen, dtype=torch.bfloat16) * 0.02
        self.norm = torch.ones(h, device=dev, dtype=torch.bfloat16)
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=dev, dtype=torch.float32) / d))
        ang = args.context * inv
        self.cos = torch.cat([ang.cos(), ang.cos()]).to(torch.bfloat16)
        self.sin = torch.cat([ang.sin(), ang.sin()]).to(torch.bfloat16)
        self.pos = args.context
        self.weight_bytes = sum(l[n].bytes for l in self.layers for n in ("qkv", "o", "gu", "down")) + 2 * self.lm_head.numel()

    @staticmethod
    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16) * w

    def rope(self, x):
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rot * self.sin

    def step(self, tokens):
        b = tokens.shape[0]
        x = self.embed[tokens]
        for l in self.layers:
            hn = self.rms(x, l["n1"])
            qkv = l["qkv"](hn)
            q, k, v = qkv.split([self.hq * self.d, self.hkv * self.d, self.hkv * self.d], dim=-1)
            q = self.rope(q.reshape(b, self.hq, 1, self.d))
            k = self.rope(k.reshape(b, self.hkv, 1, self.d))
            l["k"][:, :, self.pos:self.pos + 1] = k
            l["v"][:, :, self.pos:self.pos + 1] = v.reshape(b, self.hkv, 1, self.d)
            a = F.scaled_dot_product_attention(q, l["k"], l["v"], enable_gqa=True)
            x = x + l["o"](a.reshape(b, self.hq * self.d))
            hn = self.rms(x, l["n2"])
            g, u = l["gu"](hn).chunk(2, dim=-1)
            x = x + l["down"](F.silu(g) * u)
        logits = self.rms(x, self.norm) @ self.lm_head.t()
        return logits.argmax(-1)


def probe_scaled_mm(dev):
    """Whether _scaled_mm takes one row with row-wise scales (else rows are padded to 16)."""
    a = torch.zeros(1, 64, device=dev).to(torch.float8_e4m3fn)
    b = torch.zeros(64, 32, device=dev).to(torch.float8_e4m3fn).t().contiguous().t()
    try:
        torch._scaled_mm(a, b, scale_a=torch.ones(1, 1, device=dev), scale_b=torch.ones(1, 32, device=dev),
                         out_dtype=torch.bfloat16)
    except RuntimeError as e:
        print(f"# _scaled_mm refuses 1 row ({str(e).splitlines()[0]}): rows padded to 16", file=sys.stderr)
        FP8Linear.pad16 = True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,64")
    p.add_argument("--dtypes", default="fp8")
    p.add_argument("--context", type=int, default=1088)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--inter", type=int, default=14336)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    probe_scaled_mm(dev)
    bw = copy_bandwidth(dev)
    print(f"# copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    results = []
    for dtype in args.dtypes.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            t0 = time.time()
            m = Decoder(args, dtype, batch, dev)
            tokens = torch.randint(0, args.vocab, (batch,), device=dev)
            fn, how = m.step, "eager"
            with torch.no_grad():
                if not args.no_compile:
                    try:
                        compiled = torch.compile(m.step, fullgraph=False)
                        for _ in range(args.warmup):
                            compiled(tokens)
                        fn, how = compiled, "compiled"
                    except Exception as e:  # noqa: BLE001 - any compile failure falls back to eager
                        print(f"# torch.compile failed ({str(e).splitlines()[0]}); eager", file=sys.stderr)
                try:
                    fn, how = capture(fn, tokens, args.warmup), how + "+graph"
                except Exception as e:  # noqa: BLE001 - a capture failure falls back to launches
                    print(f"# CUDA graph capture failed ({str(e).splitlines()[0]}); {how}, uncaptured", file=sys.stderr)
                    torch.cuda.synchronize()
                for _ in range(args.warmup):
                    fn(tokens)
                torch.cuda.synchronize()
                times = []
                for _ in range(args.iters):
                    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    s.record()
                    fn(tokens)
                    e.record()
                    e.synchronize()
                    times.append(s.elapsed_time(e))
            times.sort()
            ms = times[len(times) // 2]
            kv = 2 * args.layers * batch * args.kv_heads * (args.context + 1) * args.head_dim * 2
            roof = (m.weight_bytes + kv) / bw * 1e3
            r = dict(dtype=dtype, batch=batch, context=args.context, step_ms=ms, roofline_ms=roof, copy_tb_s=bw / 1e12,
                     how=how, setup_s=time.time() - t0, torch=torch.__version__,
                     device=torch.cuda.get_device_name())
            results.append(r)
            print(f"torch {dtype:<4} batch {batch:<3} context {args.context}: step {ms:.3f} ms "
                  f"(roofline {roof:.3f} ms, {100 * roof / ms:.0f}%; {how})", flush=True)
            del m, fn
            torch._dynamo.reset()
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
