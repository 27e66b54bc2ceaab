#!/usr/bin/env python3
"""Summary of an Nsight Compute SASS source view exported as CSV.

  scripts/ncu-source-summary.py FILE [--top N]

FILE (optionally .gz) is `ncu --import REPORT --page source --print-source sass --csv` of one
kernel, with the SourceCounters section collected (scripts/device-check.sh's ncu step with
NCU_SOURCE=1, or .device/call1.sh's prefill gate). Prints the executed warp instructions and the
warp stall samples in all, each opcode's share of both, and the N SASS lines (default 40) with
the most stall samples. Standard library only.
"""
import argparse
import collections
import csv
import gzip
import signal
import sys


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def opcode(sass):
    words = sass.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    if args.top < 1:
        ap.error(f"--top must be at least 1, not {args.top}")
    opener = gzip.open if args.file.endswith(".gz") else open
    try:
        with opener(args.file, "rt", newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:  # unreadable, truncated .gz, not text
        sys.exit(f"{args.file}: cannot read it as a CSV ({type(e).__name__}: {e})")
    head = next((i for i, r in enumerate(rows) if r and r[0].lstrip("# ") == "Address"), None)
    if head is None:
        sys.exit(f"{args.file}: no 'Address' header row: not an ncu source-page CSV")
    hdr = rows[head]

    def column(prefix):
        return next((i for i, h in enumerate(hdr) if h.startswith(prefix)), None)

    c_src, c_exec = column("Source"), column("Instructions Executed")
    c_stall = column("Warp Stall Sampling (All")
    if c_src is None or c_exec is None or c_stall is None:
        sys.exit(f"{args.file}: the CSV lacks Source / Instructions Executed / Warp Stall Sampling columns")
    lines = [(r[0], r[c_src], number(r[c_exec]), number(r[c_stall])) for r in rows[head + 1:] if len(r) >= len(hdr)]
    total_exec = sum(x[2] for x in lines) or 1.0
    total_stall = sum(x[3] for x in lines) or 1.0
    print(f"{len(lines)} SASS lines, {total_exec:.4g} warp instructions executed, {total_stall:.4g} stall samples")
    by_exec, by_stall = collections.Counter(), collections.Counter()
    for _, sass, ex, st in lines:
        by_exec[opcode(sass)] += ex
        by_stall[opcode(sass)] += st
    print("opcode      executed %  stalls %")
    for op, ex in by_exec.most_common(25):
        print(f"  {op:10s} {100 * ex / total_exec:9.2f} {100 * by_stall[op] / total_stall:9.2f}")
    print(f"the {args.top} lines with the most stall samples (address, stalls %, executed, SASS):")
    for addr, sass, ex, st in sorted(lines, key=lambda x: -x[3])[: args.top]:
        print(f"  {addr} {100 * st / total_stall:6.2f} {ex:10.4g}  {sass}")


if __name__ == "__main__":
    main()
