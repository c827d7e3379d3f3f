#!/usr/bin/env python3
"""How much a choice among cuBLASLt's algorithms could gain on the decode step's small products.

The 9-64-row Q/K/V, O and down products of a Llama-3-8B step run on cublasGemmEx, whose kernel is cuBLAS's
heuristic pick. This asks cuBLASLt's heuristic for up to 64 candidate algorithms for each product (bf16
weights and activations, float32 output, fp32 compute: the backend's GemmEx call, Yᵀ = W · Xᵀ in column
major) and times every one with CUDA events: 100 back-to-back calls, weights rotating among copies
totalling ≥ 256 MB (L2 is 50 MB), best of three. The heuristic's first answer is what cublasGemmEx runs.

Run on the device (torch only allocates memory and times; cuBLASLt is called through ctypes):
    python3 scripts/bench/cublaslt_probe.py [--rows 16,64] > OUT/cublaslt.txt
"""
import argparse
import ctypes
import glob
import os
import sys

import torch


def load_lt():
    names = ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    for base in [os.path.dirname(torch.__file__)] + sys.path:
        names += glob.glob(os.path.join(base, "nvidia", "cu*", "lib", "libcublasLt.so*"))
        names += glob.glob(os.path.join(base, "nvidia", "cublas", "lib", "libcublasLt.so*"))
    for n in names:
        try:
            return ctypes.CDLL(n), n
        except OSError:
            continue
    raise SystemExit("no libcublasLt")


lt, lt_name = load_lt()
vp, u64, i64 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64


def ok(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: cublas status {status}")


class Heuristic(ctypes.Structure):  # cublasLtMatmulHeuristicResult_t
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


R_32F, R_16BF, COMPUTE_32F = 0, 14, 68
OP_N, OP_T = 0, 1
DESC_TRANSA, DESC_TRANSB = 3, 4
PREF_MAX_WORKSPACE = 1

handle = vp()
ok(lt.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
WS_BYTES = 32 << 20
workspace = torch.empty(WS_BYTES, dtype=torch.uint8, device="cuda")


def layout(dtype, rows, cols, ld):
    l = vp()
    ok(lt.cublasLtMatrixLayoutCreate(ctypes.byref(l), dtype, u64(rows), u64(cols), i64(ld)), "layout")
    return l


def product(out, inn, rows, beta):
    """The candidates for y[rows][out] (+)= x[rows][inn] · w[out][inn]ᵀ, timed."""
    desc = vp()
    ok(lt.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_32F, R_32F), "desc")
    ta, tb = ctypes.c_int(OP_T), ctypes.c_int(OP_N)
    ok(lt.cublasLtMatmulDescSetAttribute(desc, DESC_TRANSA, ctypes.byref(ta), 4), "transa")
    ok(lt.cublasLtMatmulDescSetAttribute(desc, DESC_TRANSB, ctypes.byref(tb), 4), "transb")
    a = layout(R_16BF, inn, out, inn)
    b = layout(R_16BF, inn, rows, inn)
    c = layout(R_32F, out, rows, out)
    pref = vp()
    ok(lt.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "pref")
    ws = ctypes.c_size_t(WS_BYTES)
    ok(lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, ctypes.byref(ws), 8), "pref ws")
    res = (Heuristic * 64)()
    n = ctypes.c_int()
    ok(lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, pref, 64, res, ctypes.byref(n)), "heuristic")

    wbytes = out * inn * 2
    copies = max(1, -(-(256 << 20) // wbytes))
    ws_ = [torch.randn(out, inn, device="cuda").to(torch.bfloat16) for _ in range(copies)]
    x = torch.randn(rows, inn, device="cuda").to(torch.bfloat16)
    y = torch.zeros(rows, out, device="cuda", dtype=torch.float32)
    alpha, beta_ = ctypes.c_float(1.0), ctypes.c_float(beta)
    stream = vp(torch.cuda.current_stream().cuda_stream)

    def run(h, i):
        return lt.cublasLtMatmul(handle, desc, ctypes.byref(alpha), vp(ws_[i % copies].data_ptr()), a,
                                 vp(x.data_ptr()), b, ctypes.byref(beta_), vp(y.data_ptr()), c,
                                 vp(y.data_ptr()), c, ctypes.byref(h.algo), vp(workspace.data_ptr()),
                                 ctypes.c_size_t(WS_BYTES), stream)

    times = []
    for k in range(n.value):
        h = res[k]
        if h.state != 0:
            continue
        if run(h, 0) != 0:
            continue
        best = None
        for _ in range(3):
            for i in range(10):
                run(h, i)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for i in range(100):
                run(h, i)
            e.record()
            torch.cuda.synchronize()
            us = s.elapsed_time(e) * 1000 / 100
            best = us if best is None else min(best, us)
        times.append((k, best, h.workspace, h.waves))
    # check the heuristic's first against torch's product (the candidates compute the same y)
    return times, wbytes


ap = argparse.ArgumentParser()
ap.add_argument("--rows", default="16,64")
args = ap.parse_args()
print(f"# {torch.cuda.get_device_name()} {lt_name}; µs per call, best of 3 × 100 calls, weights rotating ≥ 256 MB")
shapes = [("8b-qkv", 6144, 4096, 0.0), ("8b-o", 4096, 4096, 1.0), ("8b-down", 4096, 14336, 1.0),
          ("8b-down-half", 2048, 14336, 1.0), ("8b-o-half", 2048, 4096, 1.0)]
for name, out, inn, beta in shapes:
    for rows in [int(r) for r in args.rows.split(",")]:
        times, wbytes = product(out, inn, rows, beta)
        if not times:
            print(f"{name} {out}x{inn} m={rows}: no algorithm ran")
            continue
        first = next(t for t in times if t[0] == 0) if any(t[0] == 0 for t in times) else times[0]
        best = min(times, key=lambda t: t[1])
        rank = sorted(times, key=lambda t: t[1])
        top = " ".join(f"#{k}:{us:.1f}" for k, us, _, _ in rank[:6])
        print(f"{name} {out}x{inn} m={rows} beta={beta:g}: {len(times)} algos; heuristic #0 {first[1]:.1f} µs "
              f"({wbytes / first[1] / 1e3:.0f} GB/s), best #{best[0]} {best[1]:.1f} µs (ws {best[2]}), "
              f"gap #0/best {first[1] / best[1]:.3f}; fastest: {top}", flush=True)
