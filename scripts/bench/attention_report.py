#!/usr/bin/env python3
"""Writes docs/bench/attention-h100.md (or -h200.md) from one device run's results.

    python3 scripts/bench/attention_report.py OUT/gollm-attention.json OUT/sdpa.json \
        ../shared/bench/attention-peers-h100.md scripts/bench/attention-notes.md [OUT/variants.txt] \
        > docs/bench/attention-h100.md

gollm-attention.json comes from `gollm bench attention --json`, sdpa.json from sdpa_peer.py (same device
run); the vLLM Triton column is read from the peers' table (measured with triton.testing.do_bench on an
H100, whose L2 flush before each call is matched by our "flushed" columns). On another GPU (the H200) the
page says that the vLLM gap is not like for like.
"""
import json
import math
import re
import sys


def peers(path):
    rows = []
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[1].isdigit():
            rows.append(dict(b=int(cells[1]), ctx=int(cells[2]), hq=int(cells[3]), hkv=int(cells[4]),
                             vllm=float(cells[6]), sdpa=float(cells[8])))
    return rows


def variants(path):
    """Tables from attention's BenchmarkCUDADecodeVariants output (the notes name its device call)."""
    rows = {}
    for line in open(path):
        m = re.match(r"BenchmarkCUDADecodeVariants/(\S+?)/(\S+?)(-\d+)?\s+1\s+([\d.]+) us", line)
        if m:
            rows.setdefault(m.group(1), {})[m.group(2)] = float(m.group(4))
    out = []
    w = out.append
    w("## Variants (attention's BenchmarkCUDADecodeVariants, µs, spin unless flushed; the call is named in \"How it was measured\")\n")
    w("Split-k merge at the dispatcher's partition: *fused* = in the split-k programs (default), *reduce* = "
      "a second kernel; *1 level* = one program merges every partition, *chunk 4/8* = two levels.\n")
    w("| shape | partition | fused | reduce | 1 level | chunk 4 | chunk 8 |")
    w("|---|---|---|---|---|---|---|")
    for shape, v in rows.items():
        plan = [k for k in v if k.startswith("plan-split-k-")]
        if not plan:
            continue
        part = int(plan[0].rsplit("-", 1)[1])
        g = lambda k: f"{v[k]:.1f}" if k in v else "–"
        w(f"| {shape} | {part} | {g(f'split{part}/fused')} | {g(f'split{part}/reduce')} | "
          f"{g(f'split{part}/fused1level')} | {g(f'split{part}/fusedchunk4')} | {g(f'split{part}/fusedchunk8')} |")
    w("")
    w("L2 policy of the K/V copies, with the 50 µs spin before each call and after the flush (do_bench's: "
      "zeros over 256 MiB): *rule* = the dispatcher's (evict_first below 16 L2 sizes of K/V, evict_normal "
      "from there; evict_normal in grids of fewer programs than 90% of the SMs), *evict_first* and "
      "*evict_normal* everywhere:\n")
    w("| shape | rule | evict_first | evict_normal | rule, flushed | evict_first, flushed | evict_normal, flushed |")
    w("|---|---|---|---|---|---|---|")
    for shape, v in rows.items():
        k = "policy/%s/flush=%s"
        if k % ("rule", "false") not in v:
            continue
        cells = [v.get(k % (pol, fl)) for fl in ("false", "true") for pol in ("rule", "evictfirst", "normal")]
        w(f"| {shape} | " + " | ".join("–" if c is None else f"{c:.1f}" for c in cells) + " |")
    w("")
    w("Grouped kernels where (sequence, KV head) items outnumber the 264 program slots: *persistent* (264 "
      "programs looping over items), *classic* (one program per item), persistent with 132 programs:\n")
    w("| shape | persistent | classic | persistent, 1 per SM |")
    w("|---|---|---|---|")
    for shape, v in rows.items():
        if "grouped-classic" in v:
            w(f"| {shape} | {v['grouped']:.1f} | {v['grouped-classic']:.1f} | {v['grouped-persistent-1persm']:.1f} |")
    return out


def main():
    g = json.load(open(sys.argv[1]))
    s = json.load(open(sys.argv[2]))
    p = peers(sys.argv[3])
    sdpa = {(r["batch"], r["ctx"], r["hq"], r["hkv"]): r for r in s["results"]}
    vllm = {(r["b"], r["ctx"], r["hq"], r["hkv"]): r for r in p}
    bw = g["copy_bandwidth_bytes_per_s"]
    out = []
    w = out.append
    clean = []
    rows, gaps_vllm, within5, big_ok, small_ok, big_n, small_n, bw_ok, bw_n = [], [], 0, 0, 0, 0, 0, 0, 0
    for r in g["results"]:
        key = (r["batch"], r["ctx"], r["hq"], r["hkv"])
        sd, vl = sdpa[key], vllm.get(key)
        best = min([r["grouped_us"]] + [x["us"] for x in r["splitk_sweep"]])
        ours = r["dispatch_us"]
        mb = r["kv_bytes"] / 1e6
        if ours <= 1.05 * best:
            within5 += 1
        if mb >= 256:
            big_n += 1
            big_ok += ours <= sd["sdpa_us"]
            bw_n += 1
            bw_ok += r["bw_fraction"] >= 0.9
        else:
            small_n += 1
            small_ok += ours <= 1.3 * sd["sdpa_us"]
        gv = vl["vllm"] / r["dispatch_flush_us"] if vl else float("nan")
        gaps_vllm.append(gv)
        if vl:
            clean.append(vl["vllm"] / ours)
        plan = r["plan_kernel"] + (f" ×{r['plan_partitions']}" if r["plan_partitions"] > 1 else "")
        rows.append(
            f"| {r['name']} | {r['batch']} | {r['ctx']} | {r['hq']} | {r['hkv']} | {mb:.1f} | {r['grouped_us']:.1f} "
            f"| {r['splitk_us']:.1f} ({r['splitk_partitions']}) | {plan} | **{ours:.1f}** | {100 * r['bw_fraction']:.0f}% "
            f"| {sd['sdpa_us']:.1f} | {ours / sd['sdpa_us']:.2f}× | {r['dispatch_flush_us']:.1f} "
            f"| {vl['vllm'] if vl else float('nan'):.1f} | {gv:.2f}× |")
    geo = math.exp(sum(math.log(x) for x in gaps_vllm) / len(gaps_vllm))
    geo_clean = math.exp(sum(math.log(x) for x in clean) / len(clean))
    sdpa_geo = math.exp(sum(math.log(vllm[k]["vllm"] / sdpa[k]["sdpa_flush_us"]) for k in vllm) / len(vllm))
    beat = sum(1 for x in gaps_vllm if x > 1)
    gpu = "H100" if "H100" in g["device"] else "H200" if "H200" in g["device"] else g["device"]
    if gpu == "H100":
        like = f"like for like (both after an L2 flush; target ≥ 2×, {'met' if geo >= 2 else 'not met'})"
    else:
        like = (f"NOT like for like (vLLM's figures are an H100's, these an {gpu}'s; both after an L2 flush; the "
                "≥ 2× target is judged on the H100 page)")
    w(f"# Decode attention on the {gpu}: grouped and split-k kernels\n")
    w(f"Device: {g['device']} ({g['num_sms']} SMs, L2 {g['l2_bytes'] >> 20} MiB), driver {g['driver']}; "
      f"measured {g['date']} at commit {g.get('commit') or '?'}; PyTorch {s.get('torch', '?')} for SDPA in the same run.")
    w(f"Device-to-device copy bandwidth measured in the run: **{bw / 1e12:.2f} TB/s** (bytes read + written).\n")
    w("bf16, page size 16, block tables a random permutation of physical pages, one query token per sequence, "
      "every sequence at `ctx` tokens. Times are medians of "
      f"{g['iters']} CUDA-event-timed runs after {g['warmup']} warm-up runs, inputs rotated among copies "
      "totalling at least 4× L2, a 50 µs GPU spin queued before each run so that the host stays ahead. "
      "%BW = KV bytes / time / copy bandwidth (a read-only kernel can pass 100%).\n")
    w("Columns: *grouped* = `DecodeGrouped` (grid (sequence, KV head), or the persistent grouped kernel "
      "where the commit runs it); *split-k* = the best of a sweep of partition sizes "
      "(64…8192 tokens) with its partition count; *plan* = what `attention.Plan` chose with this device's "
      "inputs and *ours* its time (`CUDAKernels.Decode`); *SDPA* = `scaled_dot_product_attention` on a "
      "contiguous cache; *flushed* = ours with zeros written over a 256 MiB buffer before each call instead of "
      "the spin, the way `triton.testing.do_bench` flushes L2 (`cache.zero_()`, a kernel of vector stores; ours writes them the same way since round 18), which is how the vLLM Triton figures "
      "(../../../shared/bench/attention-peers-h100.md) were taken, on an H100, so the vLLM gap compares those two"
      + (".\n" if gpu == "H100" else f", across two GPUs: this page's is an {gpu}, not an H100, so its vLLM gap "
         "is not like for like (on a faster memory it overstates ours) and the issue's 2× target is judged on the "
         "H100 page only.\n"))
    w("| shape | B | ctx | Hq | Hkv | KV MB | grouped µs | split-k µs (parts) | plan | ours µs | %BW | SDPA µs "
      "| ours/SDPA | flushed µs | vLLM Triton µs | vLLM / ours |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    out.extend(rows)
    w("")
    w("## Targets (issue 6)\n")
    w(f"- ≥ 90% of copy bandwidth at every shape with KV ≥ 256 MB: {bw_ok}/{bw_n}.")
    w(f"- Faster than vLLM's Triton kernel: {beat}/{len(gaps_vllm)} shapes; geometric-mean speed-up "
      f"**{geo:.2f}×** {like}, {geo_clean:.2f}× from our clean-L2 times."
      + (f" For scale: SDPA on a contiguous cache, flushed the same way, is {sdpa_geo:.2f}× "
         f"vLLM's figures, so 2× like for like would need a paged kernel {100 * (2 / sdpa_geo - 1):.0f}% faster "
         "than contiguous SDPA on average; on the large shapes vLLM already reaches 92-97% of the bandwidth."
         if gpu == "H100" else ""))
    w(f"- No slower than SDPA (contiguous) at ≥ 256 MB: {big_ok}/{big_n}; within 1.3× below 256 MB: "
      f"{small_ok}/{small_n}.")
    w(f"- Dispatcher within 5% of the faster kernel: {within5}/{len(g['results'])} shapes (target ≥ 90%).")
    if len(sys.argv) > 4:
        w("")
        out.append(open(sys.argv[4]).read().rstrip())
    if len(sys.argv) > 5:
        w("")
        out.extend(variants(sys.argv[5]))
    print("\n".join(out))


if __name__ == "__main__":
    main()
