# Sourced by the tests/cli scripts: pass/fail counters and the exit-code + output check.
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }
# expect RC PATTERN -- command...: exit code RC and combined output matching PATTERN (grep -E).
expect() {
  local rc=$1 pat=$2; shift 3
  local out; out=$("$@" 2>&1); local got=$?
  if [ "$got" -ne "$rc" ]; then bad "$* -> exit $got, expected $rc: ${out:0:300}"; return; fi
  if ! grep -qE -- "$pat" <<<"$out"; then bad "$* -> output lacks /$pat/: ${out:0:300}"; return; fi
  ok
}
