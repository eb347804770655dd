#!/usr/bin/env bash
# A worker of the checkpoint plane's tests, under ddprun --ckpt-dir: rank 0
# writes checkpoints into $DDPRUN_CKPT_DIR the way a training program does
# (written under a hidden name in the directory, then renamed), then every
# rank waits until the file GO holds a line "go" (tail -F follows it by
# inotify) and exits 0; 124 when none comes within 60 s.
#
#   ckworker.sh GO files STEP...   one file checkpoint per step,
#                                  ckpt-<step, 10 digits>.bin, 1 MiB and a
#                                  little of random bytes
#   ckworker.sh GO dir STEP        one directory checkpoint, epoch1-step<STEP>,
#                                  with files, an empty file, a nested
#                                  directory and an empty one
set -eu
go=$1
kind=$2
shift 2
dir=${DDPRUN_CKPT_DIR:?no DDPRUN_CKPT_DIR}
if [ "$RANK" = 0 ]; then
  case $kind in
  files)
    for step in "$@"; do
      name=$(printf 'ckpt-%010d.bin' "$step")
      head -c 1049000 /dev/urandom >"$dir/.$name.partial"
      mv "$dir/.$name.partial" "$dir/$name"
    done
    ;;
  dir)
    t=$dir/.epoch1-step$1.partial
    mkdir -p "$t/shards/deep/er" "$t/empty"
    head -c 2500000 /dev/urandom >"$t/model.pt"
    head -c 70000 /dev/urandom >"$t/shards/rank0.pt"
    printf 'step %s\n' "$1" >"$t/shards/deep/er/meta.txt"
    : >"$t/shards/none.pt"
    mv "$t" "$dir/epoch1-step$1"
    ;;
  esac
  echo "rank 0 wrote its checkpoints: $(ls "$dir" | tr '\n' ' ')"
fi
exec {fd}< <(exec timeout 60 tail -n +1 -F "$go" 2>/dev/null)
tp=$!
r=0
grep -q -m 1 '^go$' <&"$fd" || r=124
kill "$tp" 2>/dev/null || true
exit "$r"
