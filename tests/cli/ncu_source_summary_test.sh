#!/usr/bin/env bash
# scripts/ncu-source-summary.py on a hand-made source-page CSV: totals, each opcode's share of the
# executed instructions and of the stall samples (predicated and plain lines counted under one
# opcode, thousands separators read), the lines with the most stalls in order, a gzipped copy,
# and clear errors (exit 1, no traceback) for a missing file, a file that is not UTF-8 text, a
# truncated gzip stream, a CSV that is not a source page and one without the counters' columns;
# a --top that is not a positive integer is a usage error (exit 2).
# usage: ncu_source_summary_test.sh SOURCE_DIR
set -u
summary=$1/scripts/ncu-source-summary.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"
py=/usr/bin/python3
{
  echo '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"'
  echo '"0x10","IMAD R1, R2, R3, R4","10","6","1,000"'
  echo '"0x20","@P0 LDS.64 R2, [R4]","60","50","500"'
  echo '"0x30","IMMA.16832.S8.S8 R4, R8, R12, R4","20","0","250"'
  echo '"0x40","LDS R5, [R6+0x10]","10","8","250"'
} >"$tmp/s.csv"
expect 0 "^4 SASS lines, 2000 warp instructions executed, 100 stall samples" -- $py "$summary" "$tmp/s.csv"
out=$($py "$summary" "$tmp/s.csv" 2>&1)
grep -qE "^  LDS +37\.50 +70\.00$" <<<"$out" && ok || bad "LDS's shares (both lines, 750 of 2000, 70 of 100): $out"
grep -qE "^  IMAD +50\.00 +10\.00$" <<<"$out" && ok || bad "IMAD's shares: $out"
[ "$(grep -A1 'most stall samples' <<<"$out" | tail -1 | awk '{print $1}')" = 0x20 ] && ok || bad "0x20 first: $out"
expect 0 "the 2 lines" -- $py "$summary" "$tmp/s.csv" --top 2
[ "$($py "$summary" "$tmp/s.csv" --top 2 | grep -c '^  0x')" = 2 ] && ok || bad "--top 2 prints 2 lines"
gzip -c "$tmp/s.csv" >"$tmp/s.csv.gz"
expect 0 "^4 SASS lines, 2000 warp instructions" -- $py "$summary" "$tmp/s.csv.gz"
expect 1 "none.csv: cannot read it as a CSV \(FileNotFoundError: .*No such file" -- $py "$summary" "$tmp/none.csv"
printf '\xff\xfe\x00A\x00d\n' >"$tmp/utf16.csv"  # not UTF-8 text
expect 1 "utf16.csv: cannot read it as a CSV \(UnicodeDecodeError" -- $py "$summary" "$tmp/utf16.csv"
head -c 40 "$tmp/s.csv.gz" >"$tmp/cut.csv.gz"  # a truncated gzip stream
expect 1 "cut.csv.gz: cannot read it as a CSV \(EOFError" -- $py "$summary" "$tmp/cut.csv.gz"
for top in 0 -1; do expect 2 "--top must be at least 1, not $top" -- $py "$summary" "$tmp/s.csv" --top "$top"; done
printf 'a,b\n1,2\n' >"$tmp/other.csv"
expect 1 "no 'Address' header row: not an ncu source-page CSV" -- $py "$summary" "$tmp/other.csv"
printf '"Address","Source"\n"0x10","IMAD R1, R2, R3, R4"\n' >"$tmp/nocounters.csv"
expect 1 "lacks Source / Instructions Executed / Warp Stall Sampling columns" -- $py "$summary" "$tmp/nocounters.csv"
expect 2 "invalid int value" -- $py "$summary" "$tmp/s.csv" --top x
for f in other.csv utf16.csv cut.csv.gz nocounters.csv; do
  ! $py "$summary" "$tmp/$f" 2>&1 | grep -q Traceback && ok || bad "a traceback on $f"
done
echo "ncu_source_summary: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
