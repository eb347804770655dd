#!/usr/bin/env bash
# `ddprun diagnose`'s command line: --help, and every bad option or
# operand answered with one line on stderr, nothing on stdout, exit 2.
# Usage: diag_cli.sh DIAG_CLI (the command alone, readers stubbed out)
set -u
cli=${1:?usage: diag_cli.sh DIAG_CLI}
fail() {
  echo "FAIL: diag_cli: $*" >&2
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/diag_cli.XXXXXX") || fail "mktemp -d failed"
trap 'rm -rf "$tmp"' EXIT

"$cli" diagnose --help >"$tmp/out" 2>"$tmp/err" || fail "--help exited $?"
grep -q '^usage: ddprun diagnose \[--json\] \[--merge OUT.json\] \[--steps A:B\]' \
  "$tmp/out" || fail "--help: no usage line"
[ -s "$tmp/err" ] && fail "--help wrote on stderr"

# bad ARGS... EXPECTED: one line matching EXPECTED, exit 2, empty stdout.
bad() {
  local want=${!#}
  local args=("${@:1:$#-1}")
  "$cli" diagnose "${args[@]}" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "${args[*]}: exited $rc, want 2"
  [ -s "$tmp/out" ] && fail "${args[*]}: wrote on stdout"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "${args[*]}: not one line: $(cat "$tmp/err")"
  grep -q -- "$want" "$tmp/err" || fail "${args[*]}: '$(cat "$tmp/err")' lacks '$want'"
}
bad "ddprun diagnose: no trace given"
bad --bogus trace.json "unknown option '--bogus'; see ddprun diagnose --help"
bad -x trace.json "unknown option '-x'"
bad trace.json --steps "--steps needs a value"
bad --merge "--merge needs a value"
bad --merge "" trace.json "--merge needs a file name"
bad --max-trace-mib "--max-trace-mib needs a value"
for v in 0 2049 x 1.5 -3; do
  bad --max-trace-mib "$v" trace.json "--max-trace-mib '$v': expected MiB, 1 to 2048"
done
for s in x 5:3 : -1:2 1:2:3 1-2 12345678901234567890:; do
  bad --steps "$s" trace.json "--steps '$s'"
done
bad "$tmp/absent.json" "$tmp/absent.json: cannot open (No such file or directory)"
mkdir "$tmp/empty"
touch "$tmp/empty/notes.txt"
bad "$tmp/empty" "empty: no trace files (\*.json, \*.json.gz) in it"

# Good options, a JSON that is not a trace: named in one line, no report.
echo '{}' >"$tmp/r0.json"
"$cli" diagnose --json --steps 3: -- "$tmp/r0.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "an unreadable trace: exited $rc, want 2"
[ -s "$tmp/out" ] && fail "an unreadable trace: wrote on stdout"
[ "$(wc -l <"$tmp/err")" -eq 1 ] &&
  grep -q "r0.json: not a Chrome trace: no traceEvents array" "$tmp/err" \
  || fail "an unreadable trace is not named in one line: $(cat "$tmp/err")"
echo "ok: diag_cli"
