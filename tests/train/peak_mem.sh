#!/usr/bin/env bash
# The ranks' peak resident memory in train's last lines, on 2 ranks:
#  - the final line keeps its fields in their order and ends with
#    peak_rss_mib= (rank 0's) peak_rss_max_mib= peak_rss_median_mib=, all
#    above 0, the maximum at least the median and rank 0's; the done line
#    and the per-rank line ("ranks, peak MiB RSS: 0:X 1:Y") say the same;
#    no line names rank 0 when the ranks are alike;
#  - with DDPRUN_MEM_TEST_RANK0_MIB=256 rank 0 touches 256 MiB more than
#    rank 1: its peak is the maximum, at least 230 MiB above rank 1's (the
#    baseline it touched them over is a little below its final one), and
#    one line names it: "train: rank 0 peaks at X MiB, Y% above the median
#    Z MiB of the ranks: rank 0 holds extra state (...)".
#
# Usage: peak_mem.sh DDPRUN TRAIN
set -u
name=peak_mem
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: peak_mem.sh DDPRUN TRAIN}
train=${2:?}

small="--layers 2 --width 64 --input-dim 16 --classes 4 --samples 1024
       --eval-samples 64 --batch 16 --steps 4 --optimizer sgd --lr 0.05"
keys="loss accuracy eval_loss steps median_step_ms samples_per_s comm_ms
      exposed_comm_ms hidden_frac world weights_crc32 peak_rss_mib
      peak_rss_max_mib peak_rss_median_mib"
note="rank 0 peaks at"

for tag in even heavy; do
  env=
  [ "$tag" = heavy ] && env=DDPRUN_MEM_TEST_RANK0_MIB=256
  run 60 "$tag" env $env "$ddprun" --standalone --nproc-per-node 2 \
    --log-level warn "$train" $small
  [ "$rc" -eq 0 ] || { show "$tag"; fail "$tag: ddprun exited $rc"; }
  line=$(grep '^\[rank0\]:final ' "$tmp/$tag.out" | tail -n 1)
  # Every field, in this order, and nothing after the last.
  got=$(echo "${line#\[rank0\]:final }" | tr ' ' '\n' | sed 's/=.*//' | xargs)
  [ "$got" = "$(echo $keys)" ] ||
    { show "$tag"; fail "$tag: final line fields '$got', expected '$(echo $keys)'"; }
  mine=$(final "$tag" peak_rss_mib)
  max=$(final "$tag" peak_rss_max_mib)
  med=$(final "$tag" peak_rss_median_mib)
  awk -v a="$mine" -v x="$max" -v m="$med" \
      'BEGIN { exit !(a > 0 && m > 0 && x >= m && x >= a) }' ||
    { show "$tag"; fail "$tag: implausible peaks: rank 0 $mine, max $max, median $med MiB"; }
  ranks=$(sed -n 's/^\[rank0\]:ranks, peak MiB RSS: \(0:[0-9.]* 1:[0-9.]*\)$/\1/p' \
          "$tmp/$tag.out")
  [ -n "$ranks" ] || { show "$tag"; fail "$tag: no per-rank peak line"; }
  r0=$(echo "$ranks" | sed 's/^0:\([0-9.]*\) .*/\1/')
  r1=$(echo "$ranks" | sed 's/.* 1:\([0-9.]*\)$/\1/')
  [ "$r0" = "$mine" ] ||
    { show "$tag"; fail "$tag: rank 0's peak is $r0 MiB per rank, $mine MiB in the final line"; }
  grep -q "^\[rank0\]:done: .*, peak RSS $mine MiB (ranks: max $max, median $med)$" \
    "$tmp/$tag.out" || { show "$tag"; fail "$tag: the done line lacks the peaks"; }
  n_note=$(grep -c "$note" "$tmp/$tag.err")
  if [ "$tag" = even ]; then
    [ "$n_note" -eq 0 ] ||
      { show "$tag"; fail "even: a line names rank 0 though the ranks are alike"; }
  else
    grep -q "test hook: touched 256 MiB" "$tmp/$tag.err" ||
      { show "$tag"; fail "heavy: rank 0 did not announce the 256 MiB"; }
    awk -v a="$mine" -v x="$max" -v b="$r1" \
        'BEGIN { exit !(a == x && a >= b + 230) }' ||
      { show "$tag"; fail "heavy: rank 0 at $mine MiB is not some 256 MiB above rank 1 ($r1), or not the maximum ($max)"; }
    re="^\[rank0\]:train: $note $mine MiB, [0-9]*% above the median $med MiB of the ranks: rank 0 holds extra state (checkpoint writing, evaluation, logging)"
    [ "$n_note" -eq 1 ] && grep -q "$re" "$tmp/$tag.err" ||
      { show "$tag"; fail "heavy: expected one line naming rank 0 ($n_note seen)"; }
  fi
  echo "$tag: ranks $ranks MiB; $(grep -h "$note" "$tmp/$tag.err" || echo 'no line names rank 0')"
done

no_leftovers
echo "PASS: $name"
