/* One Chrome/Perfetto trace out of the per-rank traces of a job, the ranks
 * on one timeline: `ddprun diagnose --merge OUT`.
 *
 * Each input becomes one process: pid = its rank (the trace's; an input
 * whose rank is unknown gets 1000000 + its index), named "rank R (FILE)"
 * (FILE the input's base name) and sorted by rank. Every event of the
 * input is kept as it is written, except:
 *   - "pid" is the rank;
 *   - "ts" is moved by the input's offset (below);
 *   - "id" and "bind_id" (flow and async events) are made distinct per
 *     input: a number N below 2^32 becomes index * 2^32 + N, anything else
 *     the string "index:N", so one rank's arrows never join another's;
 *   - the input's own process_name, process_labels and process_sort_index
 *     metadata are replaced by the ones above.
 * Top-level keys other than traceEvents are dropped; the output says
 * "otherData": {"ddprun": {"source": "merge", "inputs": N}}, so that
 * dr_dg_read refuses it as one rank's trace.
 *
 * Offsets (us, added to ts): offset_us[i] when offset_us is not NULL;
 * else each input's clock_offset_us when every train input has one (the
 * server's clock), and PyTorch inputs moved onto the first one's
 * baseTimeNanoseconds (diag_read.h); otherwise 0.
 *
 * Streams: one input is in memory at a time (read twice: once for its
 * rank, once for its events), under the limit max_bytes (0: the default,
 * diag_read.h). Writes OUT.tmp and renames it over out_path when
 * complete. 0, or a negative code with one line in err.
 */
#ifndef DR_DIAG_MERGE_H
#define DR_DIAG_MERGE_H

#include <stddef.h>

int dr_dg_merge(const char *out_path, const char *const *paths, size_t n,
                const double *offset_us, size_t max_bytes, char *err,
                size_t errlen);

#endif /* DR_DIAG_MERGE_H */
