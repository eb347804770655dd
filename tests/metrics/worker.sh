#!/bin/bash
# A worker for the metrics tests: appends "clock rank=R restart=N
# offset_us=O uncertainty_us=U" (its DDPRUN_CLOCK_* variables, "none" when
# unset), then "up rank=R restart=N pid=P", to the file $1; then waits
# without a child process (a read on a FIFO of its own) until SIGUSR1
# (exit 0) or SIGTERM (exit 143); 124 after 100 s.
up=$1
trap 'exit 0' USR1
trap 'exit 143' TERM
fifo=$(mktemp -u "$up.XXXXXX") || exit 1
mkfifo "$fifo" || exit 1
exec 3<>"$fifo"
rm -f "$fifo"
echo "clock rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT" \
  "offset_us=${DDPRUN_CLOCK_OFFSET_US-none}" \
  "uncertainty_us=${DDPRUN_CLOCK_UNCERTAINTY_US-none}" >>"$up"
echo "up rank=$RANK restart=$TORCHELASTIC_RESTART_COUNT pid=$$" >>"$up"
read -r -t 100 <&3
exit 124
