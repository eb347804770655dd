# shellcheck shell=bash
# Helpers of the deploy tests (sourced): tests/lib/steps.sh (a temporary
# directory, processes killed at exit, bounded runs and waits) and the
# final CRC of train. The sourcing script sets `name` first and may define
# `extra_cleanup`.

# shellcheck source=../lib/steps.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/steps.sh"

# The weights' CRC on the final line of rank 0 in FILE.
crc_of() {
  sed -n 's/^\(\[rank0\]:\)\{0,1\}final .*weights_crc32=\(0x[0-9a-f]*\).*$/\2/p' \
    "$1" | tail -n 1
}
