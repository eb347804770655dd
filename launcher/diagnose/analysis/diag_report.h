/* `ddprun diagnose`'s reports of an analysis (diag_analyze.h): a short
 * text for people, JSON for programs. Both return 0 or -EIO.
 *
 * The text: a summary line; notes on what is missing; the per-rank table
 * of medians; one line per pattern with its numbers and what to try; the
 * bucket table; the candidate bucket sizes with the model's predicted
 * step, the cap in use predicted beside the measured step, and the one to
 * use (or why there is none: without record_shapes, what to change); the
 * backward pass's slowest ops (dr_dg_backward_t), or one line saying the
 * traces have none.
 *
 * The JSON, one object (schema version 1; times in ms; a number the traces
 * do not give is null; keys are only ever added):
 *
 *   {"version": 1, "source": "torch", "backend": "nccl",
 *    "world": 8, "ranks_given": 6, "ranks_used": 6, "missing_ranks": [3, 7],
 *    "steps": {"count": 10, "first": 5, "last": 14},
 *    "summary": STATS,                       (the job; see diag_analyze.h)
 *    "ranks": [STATS + {"rank": 0, "path": "...", "trace_steps": 12}, ...],
 *    "buckets": [{"index": 0, "bucket": 3, "mib": 1.0, "ready_ms": .,
 *                 "start_ms": ., "end_ms": ., "queue_ms": .,
 *                 "duration_ms": ., "samples": 60}, ...],
 *    "patterns": [{"name": "late_start" | "backlog" | "tail" |
 *                  "all_hidden" | "slow_rank", "text": "...",
 *                  "ms": ., "frac": ., "cause": "...", "cause_ms": .,
 *                  "share": ., "count": ., "rank": .,
 *                  "data_excess_ms": ., "compute_excess_ms": .,
 *                  "whatif_step_ms": ., "whatif_frac": .}, ...],
 *                 (the meaning of each number per name: dr_dg_pattern_t;
 *                  numbers a pattern does not use are null)
 *    "recommendation": {"available": true, "reason": null,
 *        "fit": {"alpha_ms": ., "bandwidth_mib_per_ms": ., "samples": .,
 *                "sizes": ., "weak": false},
 *        "forward_ms": ., "backward_ms": ., "optimizer_ms": .,
 *        "first_bucket_mib": 1, "gradients": .,
 *        "candidates": [{"bucket_mib": 1, "buckets": ., "allreduce_ms": .,
 *                        "comm_ms": ., "finish_ms": ., "exposed_ms": .,
 *                        "hidden_frac": ., "step_ms": .}, ...],
 *        "best_bucket_mib": 10, "how": "pass bucket_cap_mb=10 to ...",
 *        "change": true,          (the best beats the cap in use by
 *                                  DR_DG_GAIN_FRAC; else keep it)
 *        "in_use": {"largest_bucket_mib": ., "buckets": .,
 *                   "predicted_step_ms": ., "measured_step_ms": .}},
 *        (without a recommendation: "available": false, "reason": "...",
 *         "fit" when the sizes allowed one, else null; nothing else)
 *    "backward_ops": {"rank": 1, "path": "...", "steps": 8,
 *        "backward_ms": ., "ops_ms": ., "kinds": 12,
 *        "top": [{"name": "AddmmBackward0", "total_ms": ., "ms_per_step": .,
 *                 "share": ., "runs": 32}, ...]},
 *        (dr_dg_backward_t: the rank with the longest backward pass and
 *         its 5 largest ops; null when the traces have no backward ops)
 *    "notes": ["..."]}
 *
 * STATS = {"step_ms", "data_ms", "forward_ms", "backward_ms",
 *          "optimizer_ms", "comm_ms", "hidden_ms", "exposed_ms",
 *          "arrival_ms", "wait_ms"}.
 */
#ifndef DR_DIAG_REPORT_H
#define DR_DIAG_REPORT_H

#include <stdio.h>

#include "diag_analyze.h"

int dr_dg_report_text(FILE *f, const dr_dg_analysis_t *a);
int dr_dg_report_json(FILE *f, const dr_dg_analysis_t *a);

#endif /* DR_DIAG_REPORT_H */
