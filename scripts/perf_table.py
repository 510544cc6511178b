#!/usr/bin/env python3
"""Joins kvattn's GPU benchmark lines with the peers of the same run into one table.

usage: perf_table.py OUT_DIR
Reads OUT_DIR/gpu_*_bench.log (JSON lines printed by bench/gpu_*_bench), OUT_DIR/peers.json
(../shared/tools/peers_h200.py) and OUT_DIR/prefill_peers.json (bench/gpu_prefill_peers.py).
Where kvattn timed a shape several ways (cache-flush modes), the slowest time is used.
Ratios are peer time / kvattn time: > 1 means kvattn is faster.
"""
import glob, json, os, re, sys

out = sys.argv[1] if len(sys.argv) > 1 else "out"


def json_lines(path):
    rows = []
    for line in open(path, errors="replace"):
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


ours = []
for p in sorted(glob.glob(os.path.join(out, "gpu_*_bench.log"))):
    ours += json_lines(p)
peers = []
for name in ("peers.json", "prefill_peers.json"):
    p = os.path.join(out, name)
    if os.path.exists(p):
        peers += [r for r in json.load(open(p)) if "ms" in r]

copy_tbps = next((r["TB/s"] for r in peers if r["name"].startswith("ceiling: d2d")), None)
for r in ours:
    if r.get("op") == "ceiling":
        copy_tbps = r.get("TBps", copy_tbps)
gemm = next((r["TFLOP/s"] for r in peers if r["name"].startswith("ceiling: bf16 gemm")), None)


def slowest(rows, key):
    best = {}
    for r in rows:
        k = key(r)
        if k is None:
            continue
        if k not in best or r["us"] > best[k]["us"]:
            best[k] = r
    return best


def peer_us(pattern):
    found = [r["ms"] * 1e3 for r in peers if re.search(pattern, r["name"])]
    return min(found) if found else None


lines = []
hdr = f"{'kernel':44s} {'us':>9s} {'rate':>13s} {'ceiling':>8s} {'best peer us':>13s} {'ratio':>6s}"
lines.append(hdr)

store = slowest([r for r in ours if r.get("op") == "store_kv"],
                lambda r: tuple(map(int, re.findall(r"T=(\d+).*page (\d+)", r["shape"])[0])))
for (t, page), r in sorted(store.items()):
    pu = peer_us(rf"kvwrite seed-triton T={t} ")
    lines.append(f"{'store_kv T=%d page %d' % (t, page):44s} {r['us']:9.2f} {r['TBps']:8.2f} TB/s "
                 f"{r['TBps'] / copy_tbps if copy_tbps else 0:7.0%} {pu or 0:13.2f} "
                 f"{(pu / r['us']) if pu else 0:6.2f}")

dec = slowest([r for r in ours if r.get("op") in ("decode", "decode default")], lambda r: r["shape"])
for shape, r in sorted(dec.items()):
    m = re.match(r"(\d+)x(\d+)", shape)
    pu = peer_us(rf"^decode .*B={m.group(1)} L={m.group(2)}\b") if m else None
    lines.append(f"{'decode ' + shape:44s} {r['us']:9.2f} {r['TBps']:8.2f} TB/s "
                 f"{r['TBps'] / copy_tbps if copy_tbps else 0:7.0%} {pu or 0:13.2f} "
                 f"{(pu / r['us']) if pu else 0:6.2f}")

pre = {}
for r in ours:
    if r.get("bench") == "prefill" and "ms" in r and r.get("variant") in ("default", None):
        k = (r["shape"],)
        if k not in pre or r["ms"] > pre[k]["ms"]:
            pre[k] = r
for (shape,), r in sorted(pre.items()):
    b, lq, lk = r["batch"], r["lq"], r["lk"]
    # FA2 = the fastest of torch's FA2 forms timed in the run: aten's varlen kernel (both
    # peer scripts) and SDPA's flash backend (square shapes; the peers tool's prefix case).
    fa2_forms = [peer_us(rf"FA2 varlen causal B={b} q={lq} k={lk}\b"),
                 peer_us(rf"prefix-prefill aten FA2 varlen B={b} q={lq} k={lk}\b")]
    if lq == lk:
        fa2_forms += [peer_us(rf"prefill aten FA2 varlen causal B={b} S={lq}\b"),
                      peer_us(rf"prefill SDPA\[FLASH_ATTENTION\] causal B={b} S={lq}\b")]
    fa2_forms = [u for u in fa2_forms if u]
    fa2 = min(fa2_forms) if fa2_forms else None
    cudnn = peer_us(rf"prefill SDPA\[CUDNN_ATTENTION\] causal B={b} S={lq}\b") if lq == lk else None
    us = r["ms"] * 1e3
    lines.append(f"{'prefill ' + shape:44s} {us:9.1f} {r['tflops']:6.1f} TFLOP/s "
                 f"{r['tflops'] / gemm if gemm else 0:7.0%} {fa2 or 0:13.1f} "
                 f"{(fa2 / us) if fa2 else 0:6.2f}" + (f"  (cuDNN {cudnn:.1f} us, {cudnn / us:.2f}x)" if cudnn else ""))

print(f"ceilings (same run): copy {copy_tbps or 0:.2f} TB/s, bf16 GEMM {gemm or 0:.0f} TFLOP/s")
print("\n".join(lines))
