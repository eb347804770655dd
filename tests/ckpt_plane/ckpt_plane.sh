#!/usr/bin/env bash
# The agent's checkpoint plane end to end, on 127.0.0.1: a standalone
# ddprun-rdzv (port 0, read from its log through a FIFO) and one ddprun per
# node, each with its own --ckpt-dir, 2 workers per node.
#
#   restore   train, writing a checkpoint every 5 steps on node 0, held at
#             step 15: node 1 holds byte-identical copies of steps 5 and 10,
#             which appeared in its directory by rename only; node 0's agent
#             and workers are SIGKILLed; a replacement ddprun with a fresh,
#             empty --ckpt-dir joins (the server waits for a replacement),
#             fetches step 10 from node 1 before its workers start, says so
#             in one line, and the job ends with the weights of an
#             uninterrupted run.
#   hostile   a job with a secret whose rank 0 writes file checkpoints
#             (ckworker.sh): peers that send garbage, a copy with a wrong
#             checksum, a wrong secret or another job's run id are refused,
#             named in a warning, and leave nothing in the directory; the
#             real copies arrive, and the job ends 0 without a restart.
#   dirckpt   rank 0 renames a directory checkpoint into its directory: the
#             next node holds the same tree, which appeared by rename.
#   baddir    --ckpt-dir under a regular file: exit 2 and one line, before
#             any worker starts.
#   persist   train with --ckpt-persist P (another directory, a copy at most
#             every second), held at step 15: node 0's agent has copied step
#             10 to P byte for byte, under a hidden name first; then every
#             ddprun and ddprun-rdzv is SIGKILLed and every --ckpt-dir
#             emptied (every node lost); the job started again restores step
#             10 from P on each node before the first JOIN (one line each),
#             resumes from it, ends with the weights of an uninterrupted run,
#             and leaves P holding its newest checkpoint and no more than
#             --ckpt-keep.
#   persistro --ckpt-persist under a regular file (shared storage gone): one
#             warning that names it and the reason, however many copies
#             fail, and the job ends 0.
#
# Usage: ckpt_plane.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL CKWATCH CKPEER
set -u
mode=${1:?usage: ckpt_plane.sh MODE DDPRUN-RDZV DDPRUN TRAIN RTOOL CKWATCH CKPEER}
rdzv=${2:?} ddprun=${3:?} train=${4:?} rtool=${5:?} ckwatch=${6:?}
ckpeer=${7:?}
here=$(cd "$(dirname "$0")" && pwd)
name=ckpt_plane_$mode
# shellcheck source=../recovery/lib.sh
. "$here/../recovery/lib.sh"
# shellcheck source=../recovery/job.sh
. "$here/../recovery/job.sh"

id=ckp_${mode}_$$
ckworker=$here/ckworker.sh

# port_of TAG: the checkpoint port its ddprun said it serves.
port_of() {
  wait_for "$wait_secs" "$tmp/$1.err" "peers served on port [0-9]" ||
    { show "$1"; fail "$1 did not say its checkpoint port"; }
  sed -n 's/.*peers served on port \([0-9]*\).*/\1/p' "$tmp/$1.err" |
    head -n 1
}
# node_of TAG GEN: the node rank its agent was assigned in GEN.
node_of() {
  events "$(ev "$1")" assign | grep "\"gen\":$2," | field node_rank
}
# watch_dir DIR TAG: ckwatch on DIR (made), its events in $tmp/TAG.watch.
watch_dir() {
  : >"$tmp/$2.watch"
  timeout -k 2 "$(bounded "$job_secs")" "$ckwatch" "$1" "$job_secs" \
    >>"$tmp/$2.watch" 2>&1 &
  bg_pids="$bg_pids $!"
  watch_pids="$watch_pids $!"
  wait_for "$wait_secs" "$tmp/$2.watch" '^ready$' ||
    fail "ckwatch did not start on $1"
}
watch_pids=
# stop_watches: the ckwatch processes end (before the check for leftovers).
stop_watches() {
  local p
  for p in $watch_pids; do
    kill -TERM "$p" 2>/dev/null
    { wait "$p"; } 2>/dev/null
  done
  watch_pids=
}
# renamed_only TAG NAME...: each NAME appeared by rename, none in place.
renamed_only() {
  local w=$tmp/$1.watch n
  shift
  for n in "$@"; do
    # The watcher reports inotify's event a moment after the rename.
    wait_for "$wait_secs" "$w" "^moved_to $n\$" ||
      fail "$n did not appear by rename: $(cat "$w")"
    ! grep -qx "create $n" "$w" || fail "$n was created in place: $(cat "$w")"
  done
}
# go: the ckworker ranks may exit.
go() { echo go >>"$tmp/go"; }

case $mode in
restore)
  # Nothing pruned, neither by train nor by the agents: every copy stays
  # to be compared at the end.
  train_args+=(--ckpt-keep 20)
  ref ref
  echo 30000@15 >"$tmp/hold"
  replace_secs=60
  server srv 2 0
  s=$srv_pid
  for n in n0 n1; do
    watch_dir "$tmp/ck.$n" "$n"
    # The workers find their directory in DDPRUN_CKPT_DIR.
    agent_opts=(--ckpt-dir "$tmp/ck.$n" --ckpt-keep 20 --log-level debug)
    agent $n 2 0 "${hold_wrapper[@]}" /bin/sh -c \
      'exec "$0" "$@" --ckpt-dir "$DDPRUN_CKPT_DIR"' \
      "$train" "${train_args[@]}"
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  w=$(holder 1 0 n0 n1) || exit 1 # the writer: rank 0's node
  o=n1
  [ "$w" = n1 ] && o=n0
  [ "$(node_of "$w" 1)" = 0 ] || fail "rank 0 is not on node 0"
  held_step=15 held n0 n1
  wait_for "$wait_secs" "$tmp/$o.err" \
    "received checkpoint ckpt-0000000010.bin (step 10, from node 0," ||
    { show "$o"; fail "$o did not receive the checkpoint of step 10"; }
  for st in 5 10; do
    f=$(printf 'ckpt-%010d.bin' $st)
    cmp "$tmp/ck.$w/$f" "$tmp/ck.$o/$f" ||
      fail "$o's copy of $f differs from $w's"
  done
  renamed_only "$o" ckpt-0000000005.bin ckpt-0000000010.bin
  [ "$(sed -n 's/^0 //p' "$tmp/ck.$o/.ddprun/origins" | sort | tr '\n' ' ')" = \
    "ckpt-0000000005.bin ckpt-0000000010.bin " ] ||
    fail "$o's origin index: $(cat "$tmp/ck.$o/.ddprun/origins")"
  # Node 0 dies, agent and workers, holding its checkpoint of step 15.
  rm -f "$tmp/hold"
  vw=${apid[$w]}
  vpid=$(child_of "$vw") || exit 1
  victims=$(events "$(ev $w)" spawn | field pid | tr '\n' ' ')
  kill -KILL "$vpid"
  finish "$vw"; expect_rc "$w" "$rc" 137
  # shellcheck disable=SC2086
  "$rtool" gone 10 $victims >/dev/null ||
    fail "the killed agent's workers still run"
  # A replacement with an empty directory that does not exist yet.
  agent_opts=(--ckpt-dir "$tmp/ck.n2/new" --ckpt-keep 20 --log-level debug)
  agent n2 2 0 /bin/sh -c 'exec "$0" "$@" --ckpt-dir "$DDPRUN_CKPT_DIR"' \
    "$train" "${train_args[@]}"
  apid[n2]=$agent_pid
  for n in "$o" n2; do
    finish "${apid[$n]}"; expect_rc "$n" "$rc" 0
  done
  finish "$s"; expect_rc srv "$rc" 0
  grep -q "^ddprun: restored checkpoint ckpt-0000000010.bin (step 10) from node $(node_of "$o" 2) (127.0.0.1:[0-9]*): [0-9]* bytes in [0-9.]* s$" \
    "$tmp/n2.err" || { show n2; fail "n2 did not say that it restored step 10"; }
  # Before its workers: the line comes before its first worker's.
  r=$(grep -n "restored checkpoint" "$tmp/n2.err" | head -n 1 | cut -d: -f1)
  b=$(grep -n "^ddprun: binding: local rank 0" "$tmp/n2.err" | head -n 1 |
    cut -d: -f1)
  [ -n "$b" ] && [ "$r" -lt "$b" ] || fail "n2 started workers before the restore"
  cmp "$tmp/ck.$w/ckpt-0000000010.bin" "$tmp/ck.n2/new/ckpt-0000000010.bin" ||
    fail "n2's restored checkpoint differs from the one node 0 wrote"
  [ "$(stat -c %a "$tmp/ck.n2/new")" = 700 ] ||
    fail "--ckpt-dir was not made with mode 0700"
  all "$o" n2
  # Rank 0 resumes from its own node's directory, whichever it is: both
  # hold step 10 now.
  r0=$(holder 2 0 "$o" n2) || exit 1
  d=$tmp/ck.$r0
  [ "$r0" = n2 ] && d=$tmp/ck.n2/new
  grep -q "resuming at step 10 of 40 .* from $d/" "$tmp/all" ||
    fail "rank 0 ($r0) did not resume at step 10 from $d"
  crc=$(crc_of "$tmp/all")
  [ "$crc" = "$ref_crc" ] ||
    fail "weights $crc after the restore differ from the uninterrupted $ref_crc"
  echo "restore: node 1 held steps 5 and 10, the replacement fetched step 10" \
    "before its workers started, and the job ended with $crc = $ref_crc"
  ;;

hostile)
  printf 'ckpt-plane-secret-%s\n' "$$" >"$tmp/secret"
  : >"$tmp/go"
  server srv 2 0 --secret-file "$tmp/secret"
  s=$srv_pid
  for n in n0 n1; do
    agent_opts=(--ckpt-dir "$tmp/ck.$n" --secret-file "$tmp/secret"
      --log-level debug)
    agent $n 2 0 "$ckworker" "$tmp/go" files 3 6
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  w=$(holder 1 0 n0 n1) || exit 1
  o=n1
  [ "$w" = n1 ] && o=n0
  wait_for "$wait_secs" "$tmp/$w.out" "rank 0 wrote its checkpoints" ||
    { show "$w"; fail "rank 0 did not write its checkpoints"; }
  # The real copies come through first: one still arriving would be a
  # legitimate file in incoming/ when the check below looks for leftovers.
  for st in 3 6; do
    f=$(printf 'ckpt-%010d.bin' $st)
    wait_for "$wait_secs" "$tmp/$o.err" "received checkpoint $f (step $st," ||
      { show "$o"; fail "$o did not receive $f"; }
  done
  for n in n0 n1; do
    p=$(port_of $n) || exit 1
    "$ckpeer" garbage 127.0.0.1 "$p" >"$tmp/garbage.$n" ||
      fail "$n did not refuse garbage: $(cat "$tmp/garbage.$n")"
    grep -q "^refused DR_EMAGIC" "$tmp/garbage.$n" ||
      fail "$n: $(cat "$tmp/garbage.$n")"
    "$ckpeer" badsum 127.0.0.1 "$p" "$id" ckpt-0000000099.bin \
      "$tmp/secret" >"$tmp/badsum.$n" ||
      fail "$n took a copy with a wrong checksum: $(cat "$tmp/badsum.$n")"
    grep -q "^refused DR_ECHECKSUM" "$tmp/badsum.$n" ||
      fail "$n: $(cat "$tmp/badsum.$n")"
    "$ckpeer" wrongsecret 127.0.0.1 "$p" "$id" >"$tmp/secret.$n" ||
      fail "$n did not refuse a wrong secret: $(cat "$tmp/secret.$n")"
    "$ckpeer" otherjob 127.0.0.1 "$p" "$id" >"$tmp/other.$n" ||
      fail "$n did not refuse another job: $(cat "$tmp/other.$n")"
    [ ! -e "$tmp/ck.$n/ckpt-0000000099.bin" ] ||
      fail "$n kept the copy with a wrong checksum"
    [ -z "$(ls -A "$tmp/ck.$n/.ddprun/incoming")" ] ||
      fail "$n left a partial copy: $(ls -A "$tmp/ck.$n/.ddprun/incoming")"
    for what in "dropped: first message is not HELLO" \
      "dropped: its copy of ckpt-0000000099.bin: checksum mismatch" \
      "refused: wrong shared secret" "refused: not of this job"; do
      grep -q "^ddprun: checkpoint peer 127.0.0.1:[0-9]* $what" \
        "$tmp/$n.err" || { show $n; fail "$n did not warn: $what"; }
    done
  done
  # The real copies are still whole after the hostile peers.
  for st in 3 6; do
    f=$(printf 'ckpt-%010d.bin' $st)
    cmp "$tmp/ck.$w/$f" "$tmp/ck.$o/$f" || fail "$o's copy of $f differs"
  done
  go
  for n in n0 n1; do
    finish "${apid[$n]}"; expect_rc $n "$rc" 0
  done
  finish "$s"; expect_rc srv "$rc" 0
  ! events "$(ev srv)" restart | grep -q . ||
    fail "the hostile peers cost a restart"
  echo "hostile: garbage, a wrong checksum, a wrong secret and another job" \
    "refused on both nodes; the real copies arrived; the job ended 0"
  ;;

dirckpt)
  : >"$tmp/go"
  server srv 2 0
  s=$srv_pid
  for n in n0 n1; do
    watch_dir "$tmp/ck.$n" "$n"
    agent_opts=(--ckpt-dir "$tmp/ck.$n" --log-level debug)
    agent $n 2 0 "$ckworker" "$tmp/go" dir 7
    apid[$n]=$agent_pid
  done
  started 1 n0 n1
  w=$(holder 1 0 n0 n1) || exit 1
  o=n1
  [ "$w" = n1 ] && o=n0
  wait_for "$wait_secs" "$tmp/$o.err" \
    "received checkpoint epoch1-step7 (step 7, from node 0," ||
    { show "$o"; fail "$o did not receive the directory checkpoint"; }
  diff -r "$tmp/ck.$w/epoch1-step7" "$tmp/ck.$o/epoch1-step7" ||
    fail "$o's copy of the directory checkpoint differs"
  [ -d "$tmp/ck.$o/epoch1-step7/empty" ] || fail "the empty directory is missing"
  renamed_only "$o" epoch1-step7
  renamed_only "$w" epoch1-step7
  go
  for n in n0 n1; do
    finish "${apid[$n]}"; expect_rc $n "$rc" 0
  done
  finish "$s"; expect_rc srv "$rc" 0
  echo "dirckpt: epoch1-step7 ($(find "$tmp/ck.$o/epoch1-step7" | wc -l)" \
    "entries) copied whole to $o, by rename"
  ;;

baddir)
  : >"$tmp/file"
  rc=0
  timeout 20 "$ddprun" --standalone --nproc-per-node 2 \
    --ckpt-dir "$tmp/file/ckpt" /bin/sh -c 'echo started' "$tmp/x" \
    >"$tmp/bad.out" 2>"$tmp/bad.err" || rc=$?
  [ "$rc" = 2 ] || fail "exit $rc, not 2: $(cat "$tmp/bad.err")"
  [ "$(wc -l <"$tmp/bad.err")" = 1 ] ||
    fail "not one line: $(cat "$tmp/bad.err")"
  grep -q "^ddprun: cannot create --ckpt-dir $tmp/file/ckpt (Not a directory)$" \
    "$tmp/bad.err" || fail "$(cat "$tmp/bad.err")"
  ! grep -q started "$tmp/bad.out" || fail "a worker started"
  echo "baddir: $(cat "$tmp/bad.err")"
  ;;

persist)
  ref ref
  echo 30000@15 >"$tmp/hold"
  p=$tmp/nfs/persist
  # train_cmd TAG...: train under each agent, in $DDPRUN_CKPT_DIR.
  persist_job() {
    local n d
    for n in "$@"; do
      d=$tmp/ck.${n/m/n}
      agent_opts=(--ckpt-dir "$d" --ckpt-persist "$p" --ckpt-persist-every 1
        --log-level debug)
      agent "$n" 2 0 "${hold_wrapper[@]}" /bin/sh -c \
        'exec "$0" "$@" --ckpt-dir "$DDPRUN_CKPT_DIR"' \
        "$train" "${train_args[@]}"
      apid[$n]=$agent_pid
    done
  }
  server srv 2 0
  s=$srv_pid
  persist_job n0 n1
  started 1 n0 n1
  w=$(holder 1 0 n0 n1) || exit 1
  [ "$(node_of "$w" 1)" = 0 ] || fail "rank 0 is not on node 0"
  held_step=15 held n0 n1
  f=ckpt-0000000010.bin
  wait_for "$wait_secs" "$tmp/$w.err" \
    "^ddprun: persisted checkpoint $f (step 10) to --ckpt-persist $p: " ||
    { show "$w"; fail "$w did not persist step 10"; }
  cmp "$tmp/ck.$w/$f" "$p/$f" || fail "the persisted $f differs"
  ! grep -q "persisted checkpoint" "$tmp/$([ "$w" = n0 ] && echo n1 ||
    echo n0).err" || fail "node 1 persisted checkpoints too"
  # Every node is lost at once: the server (first: it would end the job
  # when it sees a node go), agents and workers.
  victims=$(events "$(ev n0)" spawn | field pid | tr '\n' ' ')
  victims="$victims $(events "$(ev n1)" spawn | field pid | tr '\n' ' ')"
  for t in "$s" "${apid[n0]}" "${apid[n1]}"; do
    kill -KILL "$(child_of "$t")" || fail "cannot kill the child of $t"
  done
  for n in n0 n1; do
    finish "${apid[$n]}"; expect_rc "$n" "$rc" 137
  done
  finish "$s"; expect_rc srv "$rc" 137
  # shellcheck disable=SC2086
  "$rtool" gone 10 $victims >/dev/null || fail "the workers still run"
  rm -f "$tmp/hold"
  rm -rf "$tmp/ck.n0" "$tmp/ck.n1"
  # The job again, on nodes whose directories are empty.
  server srv2 2 0
  s=$srv_pid
  persist_job m0 m1
  for n in m0 m1; do
    finish "${apid[$n]}"; expect_rc "$n" "$rc" 0
  done
  finish "$s"; expect_rc srv2 "$rc" 0
  for n in m0 m1; do
    grep -q "^ddprun: restored checkpoint $f (step 10) from --ckpt-persist $p: [0-9.]* \(bytes\|KiB\|MiB\) in [0-9.]* s$" \
      "$tmp/$n.err" || { show $n; fail "$n did not restore step 10 from $p"; }
    # Before its first JOIN, which says it.
    r=$(grep -n "restored checkpoint" "$tmp/$n.err" | head -n 1 | cut -d: -f1)
    b=$(grep -n "^ddprun: binding: local rank 0" "$tmp/$n.err" | head -n 1 |
      cut -d: -f1)
    [ -n "$b" ] && [ "$r" -lt "$b" ] || fail "$n started workers before the restore"
    grep -q '"event":"join".*' "$(ev $n)" || fail "$n did not join"
  done
  all m0 m1
  r0=$(holder 1 0 m0 m1) || exit 1
  grep -q "resuming at step 10 of 40 .* from $tmp/ck.${r0/m/n}/" "$tmp/all" ||
    fail "rank 0 ($r0) did not resume at step 10"
  crc=$(crc_of "$tmp/all")
  [ "$crc" = "$ref_crc" ] ||
    fail "weights $crc after the loss of every node differ from the uninterrupted $ref_crc"
  # The end: P holds node 0's newest, whole, and at most --ckpt-keep (3).
  last=$(cd "$tmp/ck.${r0/m/n}" && ls -1 ckpt-*.bin | tail -n 1)
  cmp "$tmp/ck.${r0/m/n}/$last" "$p/$last" ||
    fail "P lacks the newest checkpoint $last at the end: $(ls -A "$p")"
  grep -q "^ddprun: \(persisted checkpoint $last (step [0-9]*) to --ckpt-persist $p at the job's end\|--ckpt-persist $p holds the newest checkpoint (step [0-9]*) at the job's end\)" \
    "$tmp/$r0.err" || { show "$r0"; fail "$r0 said nothing of the last copy"; }
  kept=$(ls -A "$p" | tr '\n' ' ')
  case $kept in
  *.ddprun-partial*) fail "a partial copy is left in P: $kept" ;;
  esac
  [ "$(ls -A "$p" | wc -l)" -le 3 ] || fail "P keeps more than 3: $kept"
  echo "persist: step 10 persisted, every node lost, restored from P on" \
    "both, and the job ended with $crc = $ref_crc; P holds $kept"
  ;;

persistro)
  : >"$tmp/go"
  : >"$tmp/file"
  p=$tmp/file/persist
  server srv 1 0
  s=$srv_pid
  agent_opts=(--ckpt-dir "$tmp/ck.n0" --ckpt-persist "$p"
    --ckpt-persist-every 1 --log-level debug)
  agent n0 1 0 "$ckworker" "$tmp/go" files 3 6
  apid[n0]=$agent_pid
  # A second copy that fails the same way, said in debug only.
  wait_for "$wait_secs" "$tmp/n0.err" "not persisted to --ckpt-persist $p: .* (as before)$" ||
    { show n0; fail "no second copy was tried"; }
  go
  finish "${apid[n0]}"; expect_rc n0 "$rc" 0
  finish "$s"; expect_rc srv "$rc" 0
  [ "$(grep -c "^ddprun: cannot persist checkpoint" "$tmp/n0.err")" = 1 ] ||
    { show n0; fail "not one warning"; }
  grep -q "^ddprun: cannot persist checkpoint ckpt-[0-9]*.bin (step [0-9]*) to --ckpt-persist $p: cannot open the directory (Not a directory); the job goes on" \
    "$tmp/n0.err" || { show n0; fail "the warning does not name $p and why"; }
  echo "persistro: $(grep "^ddprun: cannot persist" "$tmp/n0.err")"
  ;;

*)
  fail "unknown mode $mode"
  ;;
esac
stop_watches
expect_no_leftovers
