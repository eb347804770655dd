#!/usr/bin/env bash
# train's settings and exit codes:
#  - a bad command line or INI file: exit 2, one line on stderr naming the
#    offending option, key or line, nothing on stdout; --precision bf16 or
#    fp16 with --device cpu is such an error, never ignored; a --batch (or a
#    --global-batch per rank) over the model's limit, 2^20, is refused
#    when the flag is read, naming the limit;
#  - --config INI: keys at the top level and in [train] are honoured
#    (dashes or underscores), and flags override the file; a FIFO or a
#    directory given as --config (or as --data text:PATH) is refused at
#    once, never waited on;
#  - a loss that becomes non-finite: exit 5 with a message naming the step
#    and the rank; under `ddprun --max-restarts 3` the job is not restarted
#    (ddprun exits 5 and every worker ran once, with
#    TORCHELASTIC_RESTART_COUNT=0), and neither is a job whose worker
#    exits 2;
#  - an allocation that fails (a batch whose activations exceed the
#    address space, ulimit -v): exit 7 with a line naming what was being
#    allocated.
#
# Usage: bad_input.sh DDPRUN TRAIN
set -u
name=bad_input
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: bad_input.sh DDPRUN TRAIN}
train=${2:?}

small="--layers 1 --width 16 --input-dim 32 --classes 8 --samples 512
       --eval-samples 64 --batch 8 --steps 4 --optimizer sgd --lr 0.05"

# refused PATTERN ARGS...: train ARGS exits 2 with one stderr line that
# matches PATTERN (grep -E) and prints nothing on stdout.
n_refused=0
refused() {
  local pattern=$1
  shift
  n_refused=$((n_refused + 1))
  local tag=refused$n_refused
  run 20 "$tag" env -u RANK -u WORLD_SIZE "$train" "$@"
  local lines
  lines=$(wc -l <"$tmp/$tag.err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || [ -s "$tmp/$tag.out" ] ||
      ! grep -Eq -- "$pattern" "$tmp/$tag.err"; then
    show "$tag"
    fail "train $*: expected exit 2 and one line matching '$pattern'; got exit $rc and $lines lines"
  fi
  echo "refused (exit 2): train $*: $(cat "$tmp/$tag.err")"
}

refused "unknown option '--bogus'" $small --bogus
refused "unknown option '--bogus'" $small --bogus=3
refused "unexpected argument 'stray'" $small stray
refused "--batch 'abc'" $small --batch abc
refused "--batch '0'" $small --batch 0
refused "--layers '2.5'" $small --layers 2.5
refused "--lr '-1'" $small --lr -1
refused "--lr 'nan'" $small --lr nan
refused "--optimizer 'adam'" $small --optimizer adam
refused "--data 'images'" $small --data images
refused "--no-overlap 'maybe'" $small --no-overlap=maybe
refused "--steps needs a value" $small --steps
refused "/nonexistent" $small --data text:/nonexistent/file.txt
refused "fewer than one step" $small --batch 1000
# The CPU computes in fp32 only: a two-byte precision there is refused, not
# ignored (GPU or not on this machine).
for p in bf16 fp16; do
  refused "^train: --precision $p needs --device cuda and a usable GPU \(the CPU model computes in fp32 only\); use --precision fp32 on the CPU$" \
    $small --device cpu --precision $p
done
# The model's limit, where the flag is read (up to 2^24 used to pass here
# and be refused by the model later).
limit="expected a whole number from 1 to 1048576 \(2\^20, the model's limit\)"
refused "^train: --batch '1048577': $limit$" $small --batch 1048577
refused "^train: --batch '16777216': $limit$" $small --batch 16777216
printf 'steps = 3\nbatch = 2000000\n' >"$tmp/big_batch.ini"
refused "big_batch.ini: --batch '2000000': $limit" --config "$tmp/big_batch.ini"
nobatch="--layers 1 --width 16 --input-dim 32 --classes 8 --samples 512
         --eval-samples 64 --steps 4"
refused "global-batch 4194304 over the world size 1 x --grad-accum 2 is 2097152 per rank, over 1048576 \(2\^20, the model's limit of --batch\)" \
  $nobatch --global-batch 4194304 --grad-accum 2

# The INI file.
cat >"$tmp/good.ini" <<'EOF'
; settings at the top level ...
layers = 1
input_dim = 32
classes = 8
samples = 512
eval-samples = 64
steps = 7

[train]
# ... and in [train]
width = 16
batch = 8
optimizer = sgd
lr = 0.25
warmup = 0
log_every = 1
EOF
printf 'steps = 3\nbogus_key = 1\n' >"$tmp/unknown_key.ini"
printf '[train]\nwidth = 16\n[model]\nwidth = 8\n' >"$tmp/unknown_section.ini"
printf 'steps = 3\nbatch = zero\n' >"$tmp/bad_value.ini"
printf 'steps = 3\nthis is not a setting\n' >"$tmp/bad_line.ini"
printf 'config = other.ini\n' >"$tmp/nested.ini"

refused "unknown_key.ini: unknown key 'bogus_key'" --config "$tmp/unknown_key.ini"
refused "unknown section \[model\]" --config "$tmp/unknown_section.ini"
refused "--batch 'zero'" --config "$tmp/bad_value.ini"
refused "bad_line.ini:2" --config "$tmp/bad_line.ini"
refused "unknown key 'config'" --config "$tmp/nested.ini"
refused "cannot read" --config "$tmp/missing.ini"
refused "--config needs a value" --config
# A FIFO without a writer (an open() for reading would wait for one until
# the bound) and a directory: refused before a byte is read.
mkfifo "$tmp/settings.fifo" || fail "mkfifo failed"
refused "^train: --config '$tmp/settings.fifo' is a FIFO, a device or a socket, not a file; give the path of an INI file$" \
  --config "$tmp/settings.fifo"
refused "^train: --config '$tmp' is a directory, not a file; give the path of an INI file$" \
  --config "$tmp"
refused "^train: cannot read $tmp/settings.fifo \(not a regular file" \
  $small --data "text:$tmp/settings.fifo"

# From the file alone: 1 layer of 16 on 32 inputs and 8 classes is
# 32*16+16 + 16*8+8 = 664 parameters; batch 8 on 1 rank; 7 steps.
run 30 ini env -u RANK -u WORLD_SIZE "$train" --config "$tmp/good.ini"
[ "$rc" -eq 0 ] || { show ini; fail "--config good.ini: exit $rc"; }
grep -q "model 664 parameters, .* batch 8 x 1 ranks x 1 accum = 8, 7 steps" \
  "$tmp/ini.err" || { show ini; fail "--config good.ini: not the settings of the file"; }
[ "$(final ini steps)" = 7 ] || { show ini; fail "--config good.ini: not 7 steps"; }
grep -q "^step 1/7 loss [0-9.]* lr 0.25 " "$tmp/ini.out" ||
  { show ini; fail "--config good.ini: not lr 0.25 with no warmup, logged every step"; }
# Flags win, before or after --config.
run 30 ini_flags env -u RANK -u WORLD_SIZE "$train" --steps 5 \
  --config "$tmp/good.ini" --width 24 --lr 0.125
[ "$rc" -eq 0 ] || { show ini_flags; fail "--config with flags: exit $rc"; }
# 32*24+24 + 24*8+8 = 992
grep -q "model 992 parameters, .* 5 steps" "$tmp/ini_flags.err" ||
  { show ini_flags; fail "flags did not override the file"; }
[ "$(final ini_flags steps)" = 5 ] || { show ini_flags; fail "not 5 steps"; }
grep -q "^step 1/5 loss [0-9.]* lr 0.125 " "$tmp/ini_flags.out" ||
  { show ini_flags; fail "--lr 0.125 did not override the file"; }
echo "--config honoured (top level and [train]); flags override it"

# SGD at the largest learning rate allowed (1000) makes the loss overflow
# to nan within a few steps (step 5 to 9 on 1 or 2 ranks).
blowup="--layers 2 --width 128 --input-dim 32 --classes 8 --samples 4096
        --eval-samples 64 --batch 64 --steps 50 --optimizer sgd
        --momentum 0.9 --lr 1000 --warmup 0 --seed 1234"
run 30 nonfinite env -u RANK -u WORLD_SIZE "$train" $blowup
if [ "$rc" -ne 5 ] ||
    ! grep -Eq "rank 0: the loss is -?(nan|inf) at step [0-9]+" "$tmp/nonfinite.err"; then
  show nonfinite
  fail "non-finite loss: expected exit 5 naming the rank and step, got exit $rc"
fi
grep -q '^final ' "$tmp/nonfinite.out" &&
  { show nonfinite; fail "a final line after a non-finite loss"; }
echo "non-finite loss: exit 5: $(grep 'the loss is' "$tmp/nonfinite.err")"

# Under ddprun with a restart budget: each worker says which attempt it is.
# Both ranks of the non-finite job train together, so both must have
# started; in the configuration job rank 0 may fail before rank 1 prints,
# and ddprun then stops rank 1. Either way no rank starts twice and no
# start has a restart count above 0.
wrapper='echo "attempt rank=$RANK restart_count=$TORCHELASTIC_RESTART_COUNT"; exec "$0" "$@"'
for case in nonfinite:5:2 config:2:1; do
  IFS=: read -r what want min_starts <<<"$case"
  args=$blowup
  [ "$what" = config ] && args="$small --bogus"
  run 60 "ddp_$what" "$ddprun" --standalone --nproc-per-node 2 \
    --max-restarts 3 --log-level warn sh -c "$wrapper" "$train" $args
  out=$tmp/ddp_$what.out
  n_starts=$(grep -c "attempt rank=" "$out")
  n_first=$(grep -Ec "^\[rank[01]\]:attempt rank=[01] restart_count=0$" "$out")
  n_ranks=$(sed -n 's/^\[rank[01]\]:attempt rank=\([01]\) .*/\1/p' "$out" |
            sort -u | wc -l)
  # ddprun's own line per worker start says "restart N of 3" too.
  n_later=$(grep -Ec "restart [1-9][0-9]* of 3" "$tmp/ddp_$what.err")
  if [ "$rc" -ne "$want" ] || [ "$n_starts" -lt "$min_starts" ] ||
      [ "$n_starts" -ne "$n_first" ] || [ "$n_starts" -ne "$n_ranks" ] ||
      [ "$n_later" -ne 0 ]; then
    show "ddp_$what"
    fail "ddprun --max-restarts 3, worker exits $want: expected ddprun to exit $want and each rank started at most once with restart count 0 (at least $min_starts); got exit $rc, $n_starts starts, $n_first with restart count 0, $n_ranks ranks, $n_later restarted"
  fi
  echo "ddprun --max-restarts 3, $what: exit $rc, $n_starts workers started once, not restarted"
done
grep -Eq "rank [01]: the loss is -?(nan|inf) at step [0-9]+" "$tmp/ddp_nonfinite.out" \
  "$tmp/ddp_nonfinite.err" ||
  { show ddp_nonfinite; fail "ddprun did not pass on the non-finite loss message"; }

# Out of memory: the activations of 2^20 rows of width 4096 (about 48 GiB)
# in a 4 GB address space. (An address-sanitizer build cannot start under
# such a limit: skipped there.)
vlimit=(bash -c 'ulimit -v 4000000 && exec "$@"' vlimit)
# (Not exec'd: a probe that aborts is reported by its own shell, silenced.)
if bash -c 'ulimit -v 4000000 && "$@"' probe "$train" --help >/dev/null 2>&1; then
  run 30 nomem "${vlimit[@]}" env -u RANK -u WORLD_SIZE "$train" --layers 1 \
    --width 4096 --input-dim 32 --classes 8 --samples 512 --eval-samples 64 \
    --batch 1048576 --steps 1
  if [ "$rc" -ne 7 ] || [ "$(wc -l <"$tmp/nomem.err")" -ne 1 ] ||
      ! grep -q "^train: rank 0: model: out of memory allocating the activations of a batch of 1048576 rows ([0-9.]* MiB) (exit 7: out of memory)$" \
        "$tmp/nomem.err"; then
    show nomem
    fail "an allocation failure: expected exit 7 and one line naming the activations; got exit $rc"
  fi
  echo "out of memory: exit 7: $(cat "$tmp/nomem.err")"
else
  echo "out of memory: not checked (train does not start under ulimit -v)"
fi

echo "PASS: $name ($n_refused refusals)"
