#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on a contiguous KV cache over the decode-attention grid.

The peer of `gollm bench attention`, measured the same way in the same device run: one query token per
sequence, q (B, Hq, 1, D), K and V contiguous (B, Hkv, ctx, D) in bf16, enable_gqa; CUDA events around
each call, the median of --iters runs after --warmup, inputs rotated among copies totalling at least
4x L2, and a GPU spin (torch.cuda._sleep) queued before each timed run so that the host stays ahead of
the GPU. sdpa_flush_us zeroes a 256 MiB buffer instead, as triton.testing.do_bench flushes L2 (cache.zero_()
before each run; the method of ../../../shared/bench/attention-peers-h100.md): L2 then holds dirty lines.

    python3 scripts/bench/sdpa_peer.py --shapes scripts/bench/attention-shapes.json --json sdpa.json
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F


SPIN_CYCLES = 100_000  # about 50 us at the H100's clock


def time_runs(fn, copies, iters, warmup, spacer, flush):
    for i in range(warmup):
        fn(i % copies)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        if flush:
            spacer.zero_()
        else:
            torch.cuda._sleep(SPIN_CYCLES)
        starts[i].record()
        fn((warmup + i) % copies)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="scripts/bench/attention-shapes.json")
    ap.add_argument("--json", default="")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="time the spin column this many times in a row (sdpa_rounds_us lists each)")
    args = ap.parse_args()
    grid = json.load(open(args.shapes))
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    spacer = torch.empty((256 << 20) // 4, dtype=torch.int, device=dev)  # do_bench's flush buffer
    results = []
    for i, s in enumerate(grid["shapes"]):
        b, ctx, hq, hkv, d = s["batch"], s["ctx"], s["hq"], s["hkv"], s["head_dim"]
        kv_bytes = 2 * b * ctx * hkv * d * 2
        copies = max(1, math.ceil(4 * l2 / kv_bytes))
        gen = torch.Generator(device=dev).manual_seed(i)
        ks = [torch.rand(b, hkv, ctx, d, device=dev, dtype=torch.bfloat16, generator=gen) * 2 - 1 for _ in range(copies)]
        vs = [torch.rand(b, hkv, ctx, d, device=dev, dtype=torch.bfloat16, generator=gen) * 2 - 1 for _ in range(copies)]
        qs = [(torch.rand(b, hq, 1, d, device=dev, dtype=torch.bfloat16, generator=gen) * 2 - 1) * 3 for _ in range(copies)]

        def fn(c):
            return F.scaled_dot_product_attention(qs[c], ks[c], vs[c], enable_gqa=(hq != hkv))

        rounds = [time_runs(fn, copies, args.iters, args.warmup, spacer, False) for _ in range(args.rounds)]
        us = rounds[0]
        flush_us = time_runs(fn, copies, args.iters, args.warmup, spacer, True)
        results.append(dict(s, kv_bytes=kv_bytes, copies=copies, sdpa_us=us, sdpa_flush_us=flush_us,
                            **({"sdpa_rounds_us": rounds} if args.rounds > 1 else {})))
        print(f"{i:2d} {s['name']:15s} b{b:<3d} ctx{ctx:<6d} hq{hq:<2d} hkv{hkv:<2d} SDPA {us:8.1f} us, flushed {flush_us:8.1f} us", file=sys.stderr)
        del ks, vs, qs
        torch.cuda.empty_cache()
    out = dict(device=props.name, torch=torch.__version__, iters=args.iters, results=results)
    if args.json:
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
