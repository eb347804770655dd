#!/usr/bin/env bash
# A real Slurm cluster on this machine: munged, slurmctld and three slurmd
# (nodes n1, n2 and n3, all on localhost with their own ports, spool, pid
# and log files), all from a private slurm.conf in a temporary directory.
#
#   run      deploy/slurm/ddprun.sbatch on 2 nodes x 2 workers trains the
#            synthetic task to completion: world size 4, and the weights'
#            CRC of the same job run directly with two ddprun.
#   preempt  the same job, sent SIGUSR1 mid-run as `#SBATCH --signal=B:USR1`
#            would (scancel --signal=USR1 --batch): every rank stops after
#            one step with a checkpoint, ddprun exits 75, the batch script
#            requeues the job (Restarts=1), and the requeued job resumes
#            from that checkpoint to the same CRC.
#   early    the same signal as soon as the batch script starts, before
#            srun has started ddprun (or while it does): the script sends
#            it again until srun ends; requeued, resumed, the same CRC.
#   nodeloss a job of 3 nodes x 1 worker with --nnodes 2:3: the ddprun that
#            hosts the rendezvous server and its worker are SIGKILLed
#            mid-run; the others move the rendezvous to a standby (term 2),
#            go on from the checkpoint on world 2 and train to the end.
#   preempt, early: no worker failed before the stop. The script signals ddprun
#   alone, which holds the signal until its workers handle it; a signal
#   that reached the workers directly would kill one still starting.
#
# Needs root; installs Debian's slurmctld, slurmd, slurm-client and munge
# with apt-get when they are missing, and is skipped (exit 77) with the
# reason where they cannot be installed. Everything it starts is stopped.
#
# Usage: slurm_cluster.sh SBATCH_SCRIPT TRAIN DDPRUN FREE_PORTS
set -u
name=deploy_slurm
sbatch_script=${1:?usage: slurm_cluster.sh SBATCH_SCRIPT TRAIN DDPRUN FREE_PORTS}
train=${2:?} ddprun=${3:?} free_ports=${4:?}

# Before lib.sh: a skip must not leave a temporary directory behind.
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: $name: needs root (slurmd, munged)"
  exit 77
fi
need=()
for p in slurmctld slurmd slurm-client munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "$name: installing ${need[*]}"
  if ! { timeout 120 apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive timeout 180 apt-get install -y -qq \
           --no-install-recommends "${need[@]}"; } >/dev/null 2>&1; then
    echo "SKIP: $name: cannot install ${need[*]} with apt-get"
    exit 77
  fi
fi

. "$(dirname "$0")/lib.sh"

# On a failure, also what Slurm says of the job and its daemons' last lines.
die() {
  show "$1"
  if [ -n "${job:-}" ]; then
    echo "--- scontrol show job $job" >&2
    scontrol show job "$job" >&2 2>&1
  fi
  tail -n 25 "$tmp/slurmctld.log" "$tmp"/slurmd-n1.log "$tmp"/slurmd-n2.log >&2 2>/dev/null
  fail "$2"
}

daemons=
jobs_submitted=
extra_cleanup() {
  for j in $jobs_submitted; do
    scancel "$j" 2>/dev/null
  done
  if [ -n "$jobs_submitted" ]; then
    local deadline=$((SECONDS + 15))
    while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.2
    done
  fi
  for p in $daemons; do
    kill -TERM "$p" 2>/dev/null
  done
  for p in $daemons; do
    local deadline=$((SECONDS + 10))
    while kill -0 "$p" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.1
    done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  # Step daemons of a job cut short (they leave slurmd's process tree);
  # only this cluster's (its SLURM_CONF in their environment): another
  # test cluster on the machine has the same job ids.
  for j in $jobs_submitted; do
    for p in $(pgrep -f "^slurmstepd: \[$j\." 2>/dev/null); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
        grep -qxF "SLURM_CONF=${SLURM_CONF:-}" && kill -KILL "$p" 2>/dev/null
    done
  done
}

# daemon TAG CMD...: a daemon in the foreground of a background job.
daemon() {
  local tag=$1
  shift
  "$@" >"$tmp/$tag.out" 2>"$tmp/$tag.err" &
  daemons="$daemons $!"
}

# --- the cluster --------------------------------------------------------
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool/n1" "$tmp/spool/n2" \
  "$tmp/spool/n3" ||
  fail "mkdir failed"
chmod 755 "$tmp" "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 2>/dev/null &&
  chmod 400 "$tmp/munge/munge.key" || fail "cannot write the munge key"
daemon munged munged -F -f --socket="$tmp/munge/sock" \
  --key-file="$tmp/munge/munge.key" --log-file="$tmp/munge/log" \
  --pid-file="$tmp/munge/pid" --seed-file="$tmp/munge/seed"
wait_for 10 "$tmp/munged.err" 'Created [0-9]+ work threads' ||
  { cat "$tmp/munged.err" >&2; fail "munged did not start"; }

# Slurm's daemons need fixed ports (0 is refused): ports that were free a
# moment ago, from free_ports.
mapfile -t ports < <("$free_ports" 5) || fail "free_ports failed"
[ ${#ports[@]} -eq 5 ] || fail "free_ports gave ${#ports[@]} ports"
export SLURM_CONF=$tmp/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=ddprun-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=${ports[0]}
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/sock
CryptoType=crypto/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
JobRequeue=1
ReturnToService=2
MinJobAge=600
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[1]} CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[2]} CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=n3 NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[4]} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP
EOF
daemon slurmctld slurmctld -D -c -f "$SLURM_CONF"
daemon slurmd-n1 slurmd -D -N n1 -f "$SLURM_CONF"
daemon slurmd-n2 slurmd -D -N n2 -f "$SLURM_CONF"
daemon slurmd-n3 slurmd -D -N n3 -f "$SLURM_CONF"
deadline=$((SECONDS + 30))
until [ "$(sinfo -h -N -o %t 2>/dev/null | grep -c '^idle')" -eq 3 ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    sinfo -N >&2
    tail -n 20 "$tmp/slurmctld.log" "$tmp/slurmd-n1.log" "$tmp"/*.err >&2
    fail "the three nodes are not idle after 30 s"
  fi
  sleep 0.2
done
echo "$name: cluster up: slurmctld on ${ports[0]}, slurmd n1 on ${ports[1]}," \
  "n2 on ${ports[2]}, n3 on ${ports[4]}"

# --- the job ------------------------------------------------------------
export OMP_NUM_THREADS=1
train_args=(--data synthetic --layers 4 --width 512 --input-dim 64
            --classes 16 --batch 32 --steps 400 --log-every 20)

# The same job run directly: two ddprun of 2 workers on loopback.
rdzv_port=${ports[3]}
start 120 direct0 "$ddprun" --nnodes 2 --nproc-per-node 2 --node-rank 0 \
  --rdzv-endpoint "127.0.0.1:$rdzv_port" --rdzv-id direct "$train" "${train_args[@]}"
d0=$bg
start 120 direct1 "$ddprun" --nnodes 2 --nproc-per-node 2 --node-rank 1 \
  --rdzv-endpoint "127.0.0.1:$rdzv_port" --rdzv-id direct "$train" "${train_args[@]}"
d1=$bg
finish "$d0"
[ "$rc" -eq 0 ] || die direct0 "the direct run's node 0 exited $rc"
finish "$d1"
[ "$rc" -eq 0 ] || die direct1 "the direct run's node 1 exited $rc"
want=$(crc_of "$tmp/direct0.out")
[ -n "$want" ] || die direct0 "the direct run printed no final line"
grep -q "world=4 " "$tmp/direct0.out" || die direct0 "the direct run is not world 4"

# submit TAG: submits the batch script for 2 nodes; the job id in $job.
# The rendezvous endpoint is given (PET_RDZV_ENDPOINT): n1 is a Slurm node
# name, not a host name this machine resolves; ddprun still takes nnodes,
# node rank and run id from Slurm.
submit() {
  local tag=$1 port
  port=$("$free_ports" 1) || fail "free_ports failed"
  job=$(DDPRUN="$ddprun" DDPRUN_NPROC_PER_NODE=2 DDPRUN_JOB_DIR="$tmp/$tag" \
        PET_RDZV_ENDPOINT="127.0.0.1:$port" \
        sbatch --parsable --nodes 2 --output="$tmp/$tag.out" \
        --error="$tmp/$tag.err" "$sbatch_script" "$train" "${train_args[@]}" \
        --ckpt-dir '{job_dir}/ckpt') || fail "sbatch failed"
  jobs_submitted="$jobs_submitted $job"
}
# job_field NAME: the value of NAME= in scontrol show job $job.
job_field() {
  scontrol show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1
}
# wait_state SECS STATE TAG: until the job is in STATE.
wait_state() {
  local deadline=$((SECONDS + $1)) st
  while st=$(job_field JobState); [ "$st" != "$2" ]; do
    case "$st" in FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)
      die "$3" "job $job is $st, waiting for $2";;
    esac
    [ "$SECONDS" -lt "$deadline" ] ||
      die "$3" "job $job is ${st:-unknown} after $1 s, waiting for $2"
    sleep 0.2
  done
}

submit run
wait_state 120 COMPLETED run
[ "$(job_field ExitCode)" = "0:0" ] || die run "job $job ended with $(job_field ExitCode)"
grep -q "world=4 " "$tmp/run.out" || die run "the Slurm job is not world 4"
grep -q "^ddprun: Slurm: nnodes 2, node rank 1, rendezvous 127.0.0.1:[0-9]*, run id $job$" \
  "$tmp/run.err" || die run "ddprun did not take its settings from Slurm"
got=$(crc_of "$tmp/run.out")
[ "$got" = "$want" ] || die run "weights_crc32 $got under Slurm, $want run directly"
echo "run: job $job completed, world 4, weights_crc32=$got as run directly"

# preempt_and_resume TAG: SIGUSR1 to the batch script of $job as
# #SBATCH --signal=B:USR1 would send it; the job must be requeued once,
# and (started at once) complete after the batch script said it requeued.
preempt_and_resume() {
  local tag=$1 deadline
  scancel --signal=USR1 --batch "$job" || die "$tag" "scancel --signal failed"
  deadline=$((SECONDS + 60))
  until [ "$(job_field Restarts)" = 1 ] && [ "$(job_field JobState)" = PENDING ]; do
    [ "$SECONDS" -lt "$deadline" ] ||
      die "$tag" "job $job was not requeued ($(job_field JobState), Restarts=$(job_field Restarts))"
    sleep 0.2
  done
  # Slurm makes a requeued batch job eligible two minutes later
  # (EligibleTime); start it now instead of waiting, once both nodes are
  # done with the job's first run (idle again) and the clock has moved to
  # a new second: slurmd refuses a launch whose credential is of the same
  # second as the job's kill ("Job N already killed, do not launch batch
  # job"; its times are whole seconds), and the job fails.
  local t_requeued
  t_requeued=$(date +%s)
  deadline=$((SECONDS + 60))
  until [ "$(sinfo -h -N -o %t 2>/dev/null | grep -c '^idle')" -eq 3 ] &&
        [ "$(date +%s)" -gt "$t_requeued" ]; do
    [ "$SECONDS" -lt "$deadline" ] ||
      die "$tag" "the nodes are not idle 60 s after the requeue: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')"
    sleep 0.2
  done
  scontrol update JobId="$job" StartTime=now || die "$tag" "scontrol update failed"
  wait_state 120 COMPLETED "$tag"
  grep -q "requeueing job $job" "$tmp/$tag.out" ||
    die "$tag" "the batch script did not requeue on exit 75"
  # The signal reached the workers only through ddprun, once they handle
  # it: none died of it (every failure is an exit 75, none restarted).
  local ev=$tmp/$tag/logs/requeue-0/$job/events.jsonl bad
  grep -q '"event":"stop".*"exit_code":75' "$ev" ||
    die "$tag" "events.jsonl has no stop with exit code 75"
  bad=$(grep -E '"event":"(failure|restart)"' "$ev" |
        grep -v '"event":"failure".*"exit_code":75,"signal":0,')
  [ -z "$bad" ] || die "$tag" "a worker failed before the stop: $bad"
}

submit preempt
wait_for 60 "$tmp/preempt.out" '^\[rank0\]:step 40/' ||
  die preempt "rank 0 never logged step 40"
preempt_and_resume preempt
ckpts=$(ls "$tmp/preempt/ckpt")
[ "$(echo "$ckpts" | wc -l)" -eq 1 ] || die preempt "checkpoints: $ckpts"
step=$((10#$(echo "$ckpts" | sed 's/ckpt-\([0-9]*\)\.bin/\1/')))
[ "$step" -ge 40 ] && [ "$step" -lt 400 ] || die preempt "checkpoint at step $step"
cat "$tmp/preempt.out" "$tmp/preempt.err" |
  grep -q "SIGUSR1 on [1-4] rank(s): stopping after step $step with its checkpoint" ||
  die preempt "rank 0 did not report the stop at step $step"
cat "$tmp/preempt.out" "$tmp/preempt.err" | grep -q "resuming at step $step " ||
  die preempt "the requeued job did not resume at step $step"
grep -q "requeue 1, directory" "$tmp/preempt.out" ||
  die preempt "the requeued job did not run as requeue 1"
got=$(crc_of "$tmp/preempt.out")
[ "$got" = "$want" ] || die preempt "weights_crc32 $got after requeue, $want without"
echo "preempt: job $job stopped after step $step, requeued (Restarts=1), resumed to weights_crc32=$got"

# The same signal as soon as the batch script runs, before srun has
# started ddprun on the nodes (or while it does): the script sends it
# again until srun ends, so the job is still requeued and resumes.
submit early
wait_for 60 "$tmp/early.out" "^ddprun.sbatch: job $job on " ||
  die early "the batch script never started"
preempt_and_resume early
got=$(crc_of "$tmp/early.out")
[ "$got" = "$want" ] || die early "weights_crc32 $got after requeue, $want without"
again=$(grep -c "srun still runs: SIGUSR1 again" "$tmp/early.out")
echo "early: job $job signalled as it started, requeued, resumed to" \
  "weights_crc32=$got (SIGUSR1 sent again $again time(s))"
# The rendezvous outlives its host: 3 nodes x 1 worker, --nnodes 2:3, the
# ddprun that hosts the server (it listens on the endpoint's port) and its
# worker SIGKILLed at once mid-run, as a node that dies takes them. The job
# ends FAILED in Slurm's eyes (srun reports its killed task); what counts is
# that the others moved the rendezvous and trained to the end on world 2.
port=$("$free_ports" 1) || fail "free_ports failed"
job=$(DDPRUN="$ddprun" DDPRUN_NPROC_PER_NODE=1 DDPRUN_JOB_DIR="$tmp/nodeloss" \
      PET_RDZV_ENDPOINT="127.0.0.1:$port" \
      DDPRUN_ARGS="--nnodes 2:3 --rdzv-conf heartbeat_timeout=2,last_call_timeout=1" \
      sbatch --parsable --nodes 3 --output="$tmp/nodeloss.out" \
      --error="$tmp/nodeloss.err" "$sbatch_script" "$train" "${train_args[@]}" \
      --ckpt-dir '{job_dir}/ckpt' --ckpt-every 20) || fail "sbatch failed"
jobs_submitted="$jobs_submitted $job"
wait_for 60 "$tmp/nodeloss.out" '^\[rank0\]:step 40/' ||
  die nodeloss "rank 0 never logged step 40"
host_pid=$(ss -Hltnp "sport = :$port" 2>/dev/null |
  sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1)
[ -n "$host_pid" ] || die nodeloss "no process listens on the endpoint's port $port"
# shellcheck disable=SC2046
kill -KILL "$host_pid" $(pgrep -P "$host_pid") ||
  die nodeloss "cannot kill the hosting ddprun $host_pid"
deadline=$((SECONDS + 120))
while case $(job_field JobState) in PENDING|RUNNING|COMPLETING) true ;;
      *) false ;; esac; do
  [ "$SECONDS" -lt "$deadline" ] || die nodeloss "job $job still runs after 120 s"
  sleep 0.2
done
grep -q "serves the job now (term 2" "$tmp/nodeloss.err" ||
  die nodeloss "no node took the rendezvous over"
grep -q "the rendezvous moved from 127.0.0.1:$port to .* during the job" \
  "$tmp/nodeloss.err" || die nodeloss "no summary says the rendezvous moved"
grep -q "^\[rank0\]:done: 400 steps" "$tmp/nodeloss.out" ||
  die nodeloss "rank 0 did not train to step 400 after the loss"
grep -q "^\[rank0\]:final loss=.* world=2 " "$tmp/nodeloss.out" ||
  die nodeloss "the job did not end on world 2"
echo "nodeloss: job $job lost its server's node (pid $host_pid); the others" \
  "moved the rendezvous and trained to step 400 on world 2"
echo "PASS: $name"
