#!/usr/bin/env bash
# scripts/timeline-report.py on a hand-made timeline: one launch of 4 kernels whose critical
# path is known (A -> C -> D: C ends after B, so D waits on C), node ids of a graph numbered
# differently from the records' (the low 32 bits agree), a missing file, malformed files (a
# clear error, no traceback), and a timeline whose node ids match no graph (kernel totals only).
# usage: timeline_report_test.sh SOURCE_DIR
set -u
report=$1/scripts/timeline-report.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"
py=/usr/bin/python3
g=$((5 << 32)); n=$((1 << 32))
{
  echo "corr,node,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,name"
  echo "7,$g,1000,11000,1,1,1,32,\"void ds4::cuda::(anonymous namespace)::hc_norm_matvec_kernel<1u>(float const*)\""
  echo "7,$((g + 1)),11000,21000,8,1,1,256,\"ds4::cuda::(anonymous namespace)::kern_b(int)\""
  echo "7,$((g + 2)),6000,31000,4,1,1,256,\"ds4::cuda::(anonymous namespace)::kern_c(int)\""
  echo "7,$((g + 3)),31000,36000,2,1,1,64,\"ds4::cuda::(anonymous namespace)::kern_d(int)\""
} >"$tmp/t.kernels.csv"
{
  echo "row,graph,a,b,c"
  echo "node,0i,$n,0,\"void ds4::cuda::(anonymous namespace)::hc_norm_matvec_kernel<1u>(float const*)\""
  echo "node,0i,$((n + 1)),0,\"ds4::cuda::(anonymous namespace)::kern_b(int)\""
  echo "node,0i,$((n + 2)),0,\"ds4::cuda::(anonymous namespace)::kern_c(int)\""
  echo "node,0i,$((n + 3)),0,\"ds4::cuda::(anonymous namespace)::kern_d(int)\""
  echo "edge,0i,$n,$((n + 1)),1"
  echo "edge,0i,$n,$((n + 2)),0"
  echo "edge,0i,$((n + 1)),$((n + 3)),1"
  echo "edge,0i,$((n + 2)),$((n + 3)),0"
} >"$tmp/t.graph.csv"
expect 0 "corr 7: 4 kernels, step 35.0 us" -- $py "$report" "$tmp/t"
expect 0 "graph 0i: 4 of 4 kernels matched" -- $py "$report" "$tmp/t"
expect 0 "following corr 7 " -- $py "$report" "$tmp/t"
expect 0 "critical path 3 kernels: in kernels 40.0 us, in gaps before them -5.0 us" -- $py "$report" "$tmp/t"
out=$($py "$report" "$tmp/t" 2>&1)
grep -qE "^ +25\.0 +-5\.0 +1  kern_c" <<<"$out" && ok || bad "kern_c's path time and gap: $out"
grep -qE "kern_b" <<<"$(grep -A20 'path us' <<<"$out" | sed -n '2,4p')" && bad "kern_b is not on the path: $out" || ok
expect 0 "following corr 7 " -- $py "$report" "$tmp/t" --launch 0
expect 0 "following corr 7 " -- $py "$report" "$tmp/t" --launch 7  # a correlation id
expect 2 "--launch 5: 1 launch\(es\) here: an index -1..0 or a correlation id \(7\)" -- $py "$report" "$tmp/t" --launch 5
expect 1 "No such file" -- $py "$report" "$tmp/none"
cp "$tmp/t.graph.csv" "$tmp/bad.graph.csv"
printf 'a,b\n1,2\n' >"$tmp/bad.kernels.csv"  # a header without the timeline's columns
expect 1 "malformed timeline files \(KeyError" -- $py "$report" "$tmp/bad"
head -c 300 /dev/urandom >"$tmp/bad.kernels.csv"  # not text
expect 1 "malformed timeline files" -- $py "$report" "$tmp/bad"
sed -i 's/^node,0i,/node,0i,9/' "$tmp/t.graph.csv"  # node ids that match nothing
expect 0 "no critical path" -- $py "$report" "$tmp/t"
echo "timeline_report: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
