#!/usr/bin/env python3
"""Formats one device run of the decode-attention grid as the table and targets of docs/bench/attention-*.md.

    python3 scripts/bench/attention_report.py GRID.json SDPA.json ../shared/bench/attention-peers-h100.md

GRID.json comes from `gollm bench attention --json` and SDPA.json from sdpa_peer.py, both of the same device
call (scripts/bench/device-run.sh attention writes them as attention/grid-new-r1.json and attention/sdpa.json);
the vLLM Triton column is read from the peers' table (measured with triton.testing.do_bench on an H100, whose
L2 flush before each call our "flushed" column matches). On another GPU the text says that the vLLM gap is not
like for like. The output replaces the page's header, table and targets; the rest of the page is prose.
"""
import json
import math
import sys


def peers(path):
    rows = []
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[1].isdigit():
            rows.append(dict(b=int(cells[1]), ctx=int(cells[2]), hq=int(cells[3]), hkv=int(cells[4]),
                             vllm=float(cells[6]), sdpa=float(cells[8])))
    return rows


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
      "the spin, the way `triton.testing.do_bench` flushes L2 (`cache.zero_()`, a kernel of vector stores, which is how ours writes them too), which is how the vLLM Triton figures "
      "(../../../shared/bench/attention-peers-h100.md) were taken, on an H100, so the vLLM gap compares those two"
      + (".\n" if gpu == "H100" else f", across two GPUs: this page's is an {gpu}, not an H100, so its vLLM gap "
         "is not like for like (on a faster memory it overstates ours) and the 2× target is judged on the "
         "H100 page only.\n"))
    w("| shape | B | ctx | Hq | Hkv | KV MB | grouped µs | split-k µs (parts) | plan | ours µs | %BW | SDPA µs "
      "| ours/SDPA | flushed µs | vLLM Triton µs | vLLM / ours |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    out.extend(rows)
    w("")
    w("## Targets\n")
    w(f"- ≥ 90% of copy bandwidth at every shape with KV ≥ 256 MB: {bw_ok}/{bw_n}.")
    w(f"- Faster than vLLM's Triton kernel: {beat}/{len(gaps_vllm)} shapes; geometric-mean speed-up "
      f"**{geo:.3f}×** {like}, {geo_clean:.2f}× from our clean-L2 times."
      + (f" For scale: SDPA on a contiguous cache, flushed the same way, is {sdpa_geo:.2f}× "
         f"vLLM's figures, so 2× like for like would need a paged kernel {100 * (2 / sdpa_geo - 1):.0f}% faster "
         "than contiguous SDPA on average; on the large shapes vLLM already reaches 92-97% of the bandwidth."
         if gpu == "H100" else ""))
    w(f"- No slower than SDPA (contiguous) at ≥ 256 MB: {big_ok}/{big_n}; within 1.3× below 256 MB: "
      f"{small_ok}/{small_n}.")
    w(f"- Dispatcher within 5% of the faster kernel: {within5}/{len(g['results'])} shapes (target ≥ 90%).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
