# shellcheck shell=bash
# Helpers of the packaging tests (sourced): tests/lib/steps.sh, the
# project's version, and the checks that an installed ddprun must pass
# wherever it came from (wheel, .deb, image). The sourcing script sets
# `name` and `src` (the source tree) first.

# shellcheck source=../lib/steps.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/steps.sh"

# project(ddprun VERSION x.y.z), read as pyproject.toml's regex reads it.
version=$(sed -n 's/^project(ddprun VERSION \([0-9]*\.[0-9]*\.[0-9]*\).*/\1/p' \
  "$src/CMakeLists.txt")
[ -n "$version" ] || fail "no project(ddprun VERSION ...) in $src/CMakeLists.txt"

# check_versions BINDIR FEATURES: each program's --version is
# "NAME <version> (FEATURES)"; train's, with GPU code, has a second line
# "GPU code: ..." (whether it loads, and from where), left in
# $tmp/train_gpu_line.
check_versions() {
  local p got
  : >"$tmp/train_gpu_line"
  for p in ddprun ddprun-rdzv train; do
    got=$("$1/$p" --version 2>&1) || fail "$1/$p --version failed: $got"
    if [ "$p" = train ] && [ "$2" != "no GPU code" ]; then
      sed -n 2p <<<"$got" >"$tmp/train_gpu_line"
      grep -q '^GPU code: ' "$tmp/train_gpu_line" && [ "$(wc -l <<<"$got")" -eq 2 ] ||
        fail "$1/train --version has no second line 'GPU code: ...': $got"
      got=$(head -n 1 <<<"$got")
    fi
    [ "$got" = "$p $version ($2)" ] ||
      fail "$1/$p --version says '$got', not '$p $version ($2)'"
  done
}

# check_job TAG CMD...: a two-rank, 50-step train job run by CMD (a
# ddprun command line up to the program) ends with rank 0's final line.
check_job() {
  local tag=$1
  shift
  run 120 "$tag" "$@" --standalone --nproc-per-node 2 train --steps 50
  [ "$rc" -eq 0 ] || die "$tag" "the job exited $rc"
  grep -qE '^\[rank0\]:final loss=[0-9.]+ .*steps=50 .*world=2 ' "$tmp/$tag.out" ||
    die "$tag" "no final line of a 2-rank, 50-step job"
}

# check_progress TAG CMD...: a Python program that reports its steps with
# ddprun_progress runs under CMD (ddprun) on 2 ranks, and the steps land in
# the agent's progress file.
check_progress() {
  local tag=$1
  shift
  cp "$src/tests/package/progress_job.py" "$tmp/progress_job.py"
  run 120 "$tag" "$@" --standalone --nproc-per-node 2 "$tmp/progress_job.py"
  [ "$rc" -eq 0 ] || die "$tag" "the progress job exited $rc"
  local r
  for r in 0 1; do
    grep -q "^\[rank$r\]:progress: rank $r reported step 20 " "$tmp/$tag.out" ||
      die "$tag" "rank $r did not report its steps through ddprun_progress"
  done
}
