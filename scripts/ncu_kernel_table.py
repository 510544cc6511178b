#!/usr/bin/env python3
"""One line per profiled kernel from Nsight Compute's raw page: name, NVTX range, launch shape,
registers, shared memory, duration, DRAM / L2 throughput, occupancy, issue activity, and the
kernel's top warp stall reasons (per issued instruction). Columns a report lacks are skipped.

  ncu --import REP.ncu-rep --page raw --csv > raw.csv
  python3 scripts/ncu_kernel_table.py raw.csv [--stalls 4]
"""
import argparse
import csv

# (label, raw metric name) in print order.
WANTED = [
    ("grid", "launch__grid_size"),
    ("block", "launch__block_size"),
    ("regs", "launch__registers_per_thread"),
    ("smem dyn B", "launch__shared_mem_per_block_dynamic"),
    ("smem static B", "launch__shared_mem_per_block_static"),
    ("waves/SM", "launch__waves_per_multiprocessor"),
    ("us", "gpu__time_duration.sum"),
    ("DRAM %", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L2 %", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L2 hit %", "lts__t_sector_hit_rate.pct"),
    ("occ. theor %", "sm__maximum_warps_per_active_cycle_pct"),
    ("occ. achieved %", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("issue active %", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("warps/sched", "smsp__warps_active.avg.per_cycle_active"),
    ("eligible/sched", "smsp__warps_eligible.avg.per_cycle_active"),
]
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def number(text):
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw_csv")
    ap.add_argument("--stalls", type=int, default=4)
    args = ap.parse_args()
    with open(args.raw_csv, newline="") as f:
        rows = list(csv.reader(f))
    # The first rows may be ncu's own notes; the header is the row naming "Kernel Name".
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        print("no kernel rows in", args.raw_csv)
        return
    header, units, data = rows[start], rows[start + 1], rows[start + 2:]
    col = {name: i for i, name in enumerate(header)}
    nvtx_cols = [i for i, name in enumerate(header)
                 if "nvtx" in name.lower() or "push_pop" in name.lower()]
    stall_cols = [(name[len(STALL_PREFIX):-len(STALL_SUFFIX)], i) for name, i in col.items()
                  if name.startswith(STALL_PREFIX) and name.endswith(STALL_SUFFIX)
                  and "not_issued" not in name]
    for r in data:
        if len(r) != len(header):
            continue
        name = r[col["Kernel Name"]]
        nvtx = " ".join(r[i] for i in nvtx_cols if r[i])
        print(f"\n[{r[col.get('ID', 0)]}] {nvtx} {name[:150]}")
        parts = []
        for label, metric in WANTED:
            if metric in col:
                unit = units[col[metric]] if col[metric] < len(units) else ""
                value = r[col[metric]]
                if metric == "gpu__time_duration.sum" and unit in ("nsecond", "ns"):
                    value = f"{number(value) / 1e3:.2f}"
                elif metric == "gpu__time_duration.sum" and unit in ("msecond", "ms"):
                    value = f"{number(value) * 1e3:.2f}"
                parts.append(f"{label} {value}")
        print("   " + " | ".join(parts))
        stalls = sorted(((number(r[i]) or 0.0, s) for s, i in stall_cols), reverse=True)
        print("   stalls a issued instr: " +
              ", ".join(f"{s} {v:.2f}" for v, s in stalls[:args.stalls]))


if __name__ == "__main__":
    main()
