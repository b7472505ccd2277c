#!/usr/bin/env python3
"""Summarises an Nsight Compute SASS source page (ncu --page source --csv --print-source sass):
where the sampled warps stalled, by instruction (the top lines, with their stall reasons) and by
opcode, as shares of all samples. Usage: ncu_stalls.py F.sass.csv [top lines, default 30]."""
import csv
import re
import sys
from collections import defaultdict


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    head_at = next((i for i, r in enumerate(rows) if "Source" in r), None)
    if head_at is None:
        print(f"{path}: no SASS table found")
        return
    head = rows[head_at]
    body = [r for r in rows[head_at + 1:] if len(r) == len(head)]
    col = {h: i for i, h in enumerate(head)}
    total_key = next((h for h in head if h.startswith("Warp Stall Sampling (All")), None)
    if total_key is None:
        print(f"{path}: no stall sampling column; columns: {head}")
        return
    reasons = [h for h in head if h.startswith("stall_") or re.match(r"^Stall ", h)]
    exec_key = next((h for h in head if h.startswith("Instructions Executed")), None)
    total = sum(number(r[col[total_key]]) for r in body) or 1.0
    print(f"samples {total:.0f}, instructions {len(body)}")
    by_op = defaultdict(float)
    for r in body:
        words = r[col["Source"]].split() or ["?"]
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]  # past a guard
        by_op[op.split(".")[0]] += number(r[col[total_key]])
    print("by opcode: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in
                                    sorted(by_op.items(), key=lambda kv: -kv[1])[:14]))
    ranked = sorted(body, key=lambda r: -number(r[col[total_key]]))[:top]
    for r in ranked:
        s = number(r[col[total_key]])
        why = sorted(((number(r[col[k]]), k) for k in reasons), reverse=True)[:3]
        why_s = " ".join(f"{k.replace('stall_', '')}={100 * v / total:.2f}" for v, k in why if v)
        ex = f" exec={number(r[col[exec_key]]):.0f}" if exec_key else ""
        addr = r[col["Address"]] if "Address" in col else ""
        print(f"{100 * s / total:5.2f}% {addr} {r[col['Source']][:60]:60s}{ex} {why_s}")


if __name__ == "__main__":
    main()
