#!/usr/bin/env python3
"""Critical path of a decode step from DS4_CUDA_TIMELINE's files (src/backend/cuda/kernel_timeline.h).

  scripts/timeline-report.py PREFIX [--layer N]

PREFIX.kernels.csv holds every kernel of the last graph launches (CUPTI start / end, graph node
id); PREFIX.graph.csv the captured graphs' nodes and edges (0 full, 1 programmatic dependency).
For the last launch (--launch) the report gives the step time, the critical path (walking back from the
kernel that ends last, each kernel's gating predecessor being the one in the graph that ends
latest), what the path spends in each kernel family and in the gaps before them, and the
kernels of one layer in start order (on the path or not, with the stream of graph edges they
wait on). Standard library only.
"""
import argparse
import collections
import csv
import re
import signal
import sys


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"ds4::cuda::(\(anonymous namespace\)::)?", "", name)
    name = re.sub(r"\(.*\)$", "", name)  # the parameter list
    name = re.sub(r"<(.*)>", lambda m: "<" + m.group(1).replace(" ", "") + ">", name)
    return name[:70]


def family(name):
    s = short(name)
    m = re.match(r"([A-Za-z0-9_]+)(<[^,>]*)?", s)
    return (m.group(1) + (m.group(2) + ">" if m.group(2) else "")) if m else s


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a closed pipe (| head) ends the report quietly
    try:
        report()
    except (KeyError, ValueError, IndexError, UnicodeDecodeError, csv.Error) as e:
        sys.exit(f"timeline-report: malformed timeline files ({type(e).__name__}: {e}); expected "
                 "DS4_CUDA_TIMELINE's PREFIX.kernels.csv and PREFIX.graph.csv")


def report():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--layer", type=int, default=10, help="the layer whose kernels are listed (default 10)")
    ap.add_argument("--launch", type=int, default=-1,
                    help="which launch to follow: an index (0 the first, -1 the last: the default) or, "
                         "outside the indices, a correlation id as listed")
    ap.add_argument("--path-top", type=int, default=25, help="families listed for the critical path")
    args = ap.parse_args()
    try:
        krows = list(csv.DictReader(open(args.prefix + ".kernels.csv")))
        grows = list(csv.reader(open(args.prefix + ".graph.csv")))
    except OSError as e:
        sys.exit(f"timeline-report: {e}")
    if not krows:
        sys.exit("timeline-report: no kernels in " + args.prefix + ".kernels.csv")
    launches = collections.OrderedDict()
    for r in krows:
        launches.setdefault(int(r["corr"]), []).append(r)
    print(f"{len(launches)} graph launches:")
    for corr, ks in launches.items():
        t0 = min(int(k["start_ns"]) for k in ks)
        t1 = max(int(k["end_ns"]) for k in ks)
        busy = sum(int(k["end_ns"]) - int(k["start_ns"]) for k in ks)
        print(f"  corr {corr}: {len(ks)} kernels, step {(t1 - t0) / 1e3:.1f} us, kernel time summed {busy / 1e3:.1f} us")
    n = len(launches)
    if -n <= args.launch < n:
        corr = list(launches)[args.launch]
    elif args.launch in launches:
        corr = args.launch
    else:
        ap.exit(2, f"timeline-report: --launch {args.launch}: {n} launch(es) here: an index {-n}..{n - 1} "
                   f"or a correlation id ({', '.join(map(str, launches))})\n")
    ks = launches[corr]
    # Decode steps differ (the ratio-4 compressors emit on every 4th token): say which one this is.
    print(f"following corr {corr} (--launch N picks another; the steps' paths can differ)")
    t0 = min(int(k["start_ns"]) for k in ks)
    # Node ids are (graph id << 32) + the node's index in its graph: the instantiated graph's
    # records and the captured graph's nodes agree in the index (the low 32 bits).
    low = lambda v: str(int(v) & 0xFFFFFFFF)
    kern = {}
    for k in ks:
        kern[low(k["node"])] = dict(name=k["name"], s=int(k["start_ns"]) - t0, e=int(k["end_ns"]) - t0,
                               grid=(k["grid_x"], k["grid_y"], k["grid_z"]))
    # The graph holding these node ids: its edges, with non-kernel nodes (events, empty) passed through.
    preds = collections.defaultdict(list)
    graphs = collections.defaultdict(dict)  # label -> node index -> kernel name
    for row in grows[1:]:
        if row[0] == "node":
            graphs[row[1]][low(row[2])] = row[4]
    score = lambda g: sum(1 for n, k in kern.items() if graphs[g].get(n) == k["name"])
    label = max(graphs, key=score, default=None)
    matched = score(label) if label else 0
    print(f"graph {label}: {matched} of {len(kern)} kernels matched by node index and name")
    for row in grows[1:]:
        if row[0] == "edge" and row[1] == label:
            preds[low(row[3])].append((low(row[2]), int(row[4])))

    def kernel_preds(n):  # kernel predecessors of node n, through other node kinds
        out = []
        for p, typ in preds.get(n, []):
            if p in kern:
                out.append((p, typ))
            else:
                out.extend(kernel_preds(p))
        return out

    def gating(n):  # the predecessor (node, edge type) that ends last, or None
        ps = kernel_preds(n)
        return max(ps, key=lambda pt: kern[pt[0]]["e"]) if ps else None

    if matched < len(kern) // 2:
        print("node ids do not match the graph's: no critical path (kernel totals only)")
        tot = collections.Counter()
        for k in kern.values():
            tot[family(k["name"])] += k["e"] - k["s"]
        for f, v in tot.most_common(args.path_top):
            print(f"  {v / 1e3:9.1f} us  {f}")
        return
    last = max(kern, key=lambda n: kern[n]["e"])
    path = [last]
    while (gate := gating(path[-1])) is not None:
        path.append(gate[0])
    path.reverse()
    step = kern[last]["e"]
    on_path = set(path)
    fam_time = collections.Counter()
    fam_gap = collections.Counter()
    fam_n = collections.Counter()
    prev_end = 0
    for n in path:
        k = kern[n]
        f = family(k["name"])
        fam_time[f] += k["e"] - k["s"]
        fam_gap[f] += k["s"] - prev_end
        fam_n[f] += 1
        prev_end = k["e"]
    print(f"step {step / 1e3:.1f} us; critical path {len(path)} kernels: in kernels "
          f"{sum(fam_time.values()) / 1e3:.1f} us, in gaps before them {sum(fam_gap.values()) / 1e3:.1f} us "
          "(negative: started before the gating kernel ended, PDL)")
    print("  path us   gap us    n  family")
    for f, _ in sorted(fam_time.items(), key=lambda kv: -(kv[1] + fam_gap[kv[0]]))[: args.path_top]:
        print(f"  {fam_time[f] / 1e3:7.1f}  {fam_gap[f] / 1e3:7.1f}  {fam_n[f]:4d}  {f}")
    # One layer: from the (2 * layer + 1)-th HC projection start to the (2 * layer + 3)-th.
    hc = sorted((k["s"], n) for n, k in kern.items() if "hc_norm_matvec" in k["name"])
    if len(hc) > 2 * args.layer + 2:
        a, b = hc[2 * args.layer][0], hc[2 * args.layer + 2][0]
        print(f"layer {args.layer}: {(b - a) / 1e3:.1f} us; kernels by start (us from the layer's start), * on the path")
        print("     start      end    dur  wait-on (pred ends, type)  kernel")
        for n in sorted((n for n, k in kern.items() if a <= k["s"] < b), key=lambda n: kern[n]["s"]):
            k = kern[n]
            gate = gating(n)
            g = f"{(kern[gate[0]]['e'] - a) / 1e3:8.1f} {'P' if gate[1] else 'F'}" if gate else "         -"
            print(f"  {'*' if n in on_path else ' '}{(k['s'] - a) / 1e3:7.1f}  {(k['e'] - a) / 1e3:7.1f}  "
                  f"{(k['e'] - k['s']) / 1e3:5.1f}  {g}  {short(k['name'])} grid {'x'.join(k['grid'])}")


if __name__ == "__main__":
    main()
