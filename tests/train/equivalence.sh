#!/usr/bin/env bash
# Data parallelism changes nothing but the speed: after 20 steps,
#  - 4 ranks of --batch 16 hold the weights of 1 rank of --batch 64 (SGD
#    and AdamW; one bucket, many small buckets, and a bucket per weight);
#  - 2 ranks of --batch 32 too, and with --no-overlap bit for bit the same
#    weights as with overlap;
#  - --grad-accum 4 of --batch 16 on 1 rank those of --batch 64;
#  - text data (embedding + MLP) on 2 ranks those of 1 rank.
# "The same" is a relative L2 difference under 1e-5 between --dump-weights
# files (summation order differs), and bit-identical where the order is the
# same. Every run must exit 0, which means its ranks agreed on the final
# checksum; the checksum train prints must be the CRC-32 of the dump.
#
# Usage: equivalence.sh DDPRUN TRAIN TRAIN_CHECK_PY
set -u
name=equivalence
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: equivalence.sh DDPRUN TRAIN TRAIN_CHECK_PY}
train=${2:?}
check=${3:?}
need_python

bound=1e-5
# Every setting that matters is explicit: the defaults may change.
model="--layers 2 --width 128 --input-dim 32 --classes 8 --samples 4096
       --eval-samples 512 --steps 20 --log-every 5 --warmup 10
       --min-lr-frac 0.1 --momentum 0.9 --weight-decay 0 --seed 1234
       --first-bucket-mb 1 --bucket-cap-mb 25"

# job TAG WORLD ARGS...: train on WORLD ranks (1 without ddprun), weights in
# $tmp/TAG.bin; exit 0 and a checksum equal to the dump's.
job() {
  local tag=$1 world=$2
  shift 2
  if [ "$world" -eq 1 ]; then
    run 60 "$tag" env -u RANK -u WORLD_SIZE -u LOCAL_RANK "$train" $model \
      --dump-weights "$tmp/$tag.bin" "$@"
  else
    run 60 "$tag" "$ddprun" --standalone --nproc-per-node "$world" \
      --log-level warn "$train" $model --dump-weights "$tmp/$tag.bin" "$@"
  fi
  [ "$rc" -eq 0 ] || { show "$tag"; fail "$tag: exited $rc (world $world: $*)"; }
  [ "$(final "$tag" world)" = "$world" ] ||
    { show "$tag"; fail "$tag: no final line of world $world"; }
  local crc dump
  crc=$(final "$tag" weights_crc32)
  dump=$(python3 "$check" crc "$tmp/$tag.bin") || fail "$tag: no dump"
  [ "$crc" = "$dump" ] ||
    { show "$tag"; fail "$tag: weights_crc32=$crc, the dump's CRC-32 is $dump"; }
  echo "$tag: world $world $*: loss=$(final "$tag" loss) crc=$crc"
}

# same A B: relative difference under the bound.
same() {
  echo -n "$1 vs $2: "
  python3 "$check" reldiff "$tmp/$1.bin" "$tmp/$2.bin" "$bound" ||
    fail "$1 and $2 differ"
}

for opt in sgd adamw; do
  o="--optimizer $opt --lr 0.05"
  [ "$opt" = adamw ] && o="--optimizer $opt --lr 0.003"
  job "w1_$opt" 1 $o --batch 64
  for cap in 25 0.01 0.0001; do
    job "w4_${opt}_$cap" 4 $o --batch 16 --bucket-cap-mb "$cap" \
      --first-bucket-mb "$cap"
    same "w1_$opt" "w4_${opt}_$cap"
  done
  job "ga_$opt" 1 $o --batch 16 --grad-accum 4
  same "w1_$opt" "ga_$opt"
done

# A gradient bucket per weight (0.0001 MiB) gives 6 buckets here; the
# summary line says how many there were.
grep -q "6 buckets" "$tmp/w4_sgd_0.0001.err" ||
  { show w4_sgd_0.0001; fail "--bucket-cap-mb 0.0001 did not make 6 buckets"; }

few="--bucket-cap-mb 0.01 --first-bucket-mb 0.01"
job w2_overlap 2 --optimizer sgd --lr 0.05 --batch 32 $few --comm-schedule thread
job w2_no_overlap 2 --optimizer sgd --lr 0.05 --batch 32 $few --no-overlap
same w1_sgd w2_overlap
nb=$(sed -n 's/.*\[rank0\]:train: rank 0: .* \([0-9]*\) buckets:.*/\1/p' \
     "$tmp/w2_overlap.err")
[ "${nb:-0}" -ge 4 ] ||
  { show w2_overlap; fail "w2_overlap: expected at least 4 buckets, got '$nb'"; }
a=$(final w2_overlap weights_crc32)
b=$(final w2_no_overlap weights_crc32)
[ "$a" = "$b" ] || fail "overlap gives $a, --no-overlap $b: not bit-identical"
cmp -s "$tmp/w2_overlap.bin" "$tmp/w2_no_overlap.bin" ||
  fail "the dumps of overlap and --no-overlap differ"

text=/usr/share/common-licenses/GPL-3
if [ ! -r "$text" ]; then
  text=$tmp/text.txt
  i=0
  while [ "$i" -lt 300 ]; do
    echo "line $i: every rank holds the full model and a shard of the data."
    i=$((i + 1))
  done >"$text"
fi
tmodel="--data text:$text --width 64 --context 8 --embed-dim 8
        --eval-frac 0.1 --optimizer sgd --lr 0.05"
job text_w1 1 $tmodel --batch 32
job text_w2 2 $tmodel --batch 16 $few
same text_w1 text_w2

no_leftovers
echo "PASS: $name"
