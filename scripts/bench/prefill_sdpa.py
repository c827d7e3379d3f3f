#!/usr/bin/env python3
"""The peer of attention's BenchmarkCUDAPrefill: causal scaled_dot_product_attention (PyTorch's flash
kernel) on a contiguous bf16 cache, one prompt attending to itself, the same shapes, median of 30 runs
timed with CUDA events after 5 warm-up runs. Prints one line per shape: name, µs, TFLOP/s.

    python3 scripts/bench/prefill_sdpa.py
"""
import torch
import torch.nn.functional as F

SHAPES = [("d128-hq32-hkv8-L1024", 128, 1024, 32, 8), ("d128-hq32-hkv8-L4096", 128, 4096, 32, 8),
          ("d64-hq32-hkv8-L1024", 64, 1024, 32, 8), ("d64-hq32-hkv8-L4096", 64, 4096, 32, 8),
          ("d128-hq32-hkv8-L8192", 128, 8192, 32, 8), ("d128-hq32-hkv8-L16384", 128, 16384, 32, 8),
          ("d128-hq32-hkv8-L32768", 128, 32768, 32, 8), ("d256-hq16-hkv8-L4096", 256, 4096, 16, 8)]

for name, d, n, hq, hkv in SHAPES:
    q = torch.randn(1, hq, n, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, hkv, n, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, hkv, n, d, device="cuda", dtype=torch.bfloat16)
    times = []
    for i in range(35):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        e.record()
        torch.cuda.synchronize()
        if i >= 5:
            times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    us = times[len(times) // 2]
    flops = 4 * d * hq * n * (n + 1) / 2
    print(f"{name} {us:.1f} {flops / (us * 1e-6) / 1e12:.1f}", flush=True)
