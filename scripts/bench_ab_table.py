#!/usr/bin/env python3
"""One table of a benchmark's rows timed by several builds (an A/B of binaries in one call).

usage: bench_ab_table.py OP LABEL=LOG[,LOG...] [LABEL=LOG...]
Reads the JSON lines of bench/gpu_*_bench logs, keeps the rows whose "op" is OP, and prints per
(shape, flush note) each label's times (us, one per log: rounds) and the change of each label's
best time against the first label's best; then, per label, each shape's best time over its
" fp8" twin's where the logs hold both (gpu_decode_bench --only fp8: fp8 / bf16 speed).
"""
import json
import sys


def rows(path):
    for line in open(path, errors="replace"):
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                pass


op = sys.argv[1]
labels = []
times = {}  # (shape, note) -> label -> [us]
for arg in sys.argv[2:]:
    label, logs = arg.split("=", 1)
    labels.append(label)
    for log in logs.split(","):
        for r in rows(log):
            if r.get("op") != op:
                continue
            key = (r["shape"], r.get("note", "").split(", ")[-1])
            times.setdefault(key, {}).setdefault(label, []).append(r["us"])
print(f"{'shape':36s} {'flush':17s} " + " ".join(f"{lb:>24s}" for lb in labels))
for (shape, note), by in times.items():
    base = min(by.get(labels[0], [float("nan")]))
    cells = []
    for lb in labels:
        t = by.get(lb, [])
        best = min(t) if t else float("nan")
        change = "" if lb == labels[0] else f" {100 * (best / base - 1):+5.1f}%"
        cells.append(f"{','.join(f'{x:.1f}' for x in t)}{change}".rjust(24))
    print(f"{shape:36s} {note:17s} " + " ".join(cells))
for lb in labels:
    for (shape, note), by in times.items():
        twin = times.get((shape + " fp8", note), {})
        if lb in by and lb in twin:
            t16, t8 = min(by[lb]), min(twin[lb])
            print(f"{lb}: {shape} {note}: {t16:.1f} us / fp8 {t8:.1f} us = {t16 / t8:.3f}")
