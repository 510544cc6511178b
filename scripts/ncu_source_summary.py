#!/usr/bin/env python3
"""Summarises one kernel's Nsight Compute source page (per-SASS-line counters) on the build
machine: what the warps stall on, the instruction mix by opcode, the lines with the most stall
samples, and, given the number of work units the kernel ran (tiles, key blocks), the
instructions a unit and the lines that run once a unit.

The page comes from a device call:
  ncu --import REP.ncu-rep --page source --csv --print-source sass > source.csv
(one kernel per file: the first line names it, the second is the header).

  python3 scripts/ncu_source_summary.py source.csv [--units N] [--top 25] [--list-unit-lines]
"""
import argparse
import collections
import csv


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def opcode(source):
    words = source.split()
    if not words:
        return ""
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    parser.add_argument("--units", type=float, default=0.0,
                        help="work units the kernel ran (e.g. 16-key tiles x warps)")
    parser.add_argument("--top", type=int, default=25, help="lines with the most samples")
    parser.add_argument("--list-unit-lines", action="store_true",
                        help="print every line executed about once a unit (needs --units)")
    args = parser.parse_args()

    with open(args.csv, newline="") as f:
        kernel = f.readline().strip()
        rows = list(csv.DictReader(f))
    samples_key = "Warp Stall Sampling (All Samples)"
    executed_key = "Instructions Executed"
    reasons = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    total_samples = sum(number(r[samples_key]) for r in rows) or 1.0
    total_executed = sum(number(r[executed_key]) for r in rows) or 1.0
    print(kernel[:160])
    print(f"warp instructions executed {total_executed:.0f}, stall samples {total_samples:.0f}")

    by_reason = collections.Counter()
    for r in rows:
        for k in reasons:
            by_reason[k] += number(r[k])
    print("stall reasons (% of samples): " + ", ".join(
        f"{k[6:]} {100 * v / total_samples:.1f}" for k, v in by_reason.most_common(10)))

    executed = collections.Counter()
    sampled = collections.Counter()
    for r in rows:
        op = opcode(r["Source"].strip())
        executed[op] += number(r[executed_key])
        sampled[op] += number(r[samples_key])
    print("opcode: % of instructions, % of samples")
    for op, v in executed.most_common(24):
        print(f"  {op:12s} {100 * v / total_executed:5.1f} {100 * sampled[op] / total_samples:5.1f}")

    print(f"top {args.top} lines by samples (address, % of samples, source, two largest reasons)")
    for r in sorted(rows, key=lambda r: -number(r[samples_key]))[:args.top]:
        top2 = sorted(((k[6:], number(r[k])) for k in reasons), key=lambda x: -x[1])[:2]
        share = 100 * number(r[samples_key]) / total_samples
        print(f"  {r['Address'][-6:]} {share:5.2f} {r['Source'].strip()[:64]:64s} {top2}")

    if args.units > 0:
        print(f"instructions a unit: {total_executed / args.units:.1f}")
        per_rate = collections.Counter()
        for r in rows:
            n = number(r[executed_key])
            per_rate[round(n / args.units, 2)] += n
        print("executions a unit -> instructions a unit from lines run that often:")
        for rate, n in sorted(per_rate.items(), key=lambda x: -x[1])[:10]:
            print(f"  {rate:6.2f}: {n / args.units:7.1f}")
        if args.list_unit_lines:
            for r in rows:
                rate = number(r[executed_key]) / args.units
                if 0.85 <= rate <= 1.15:
                    print(f"  {r['Address'][-6:]} {rate:5.2f} {r['Source'].strip()[:90]}")


if __name__ == "__main__":
    main()
