/* A Chrome trace-event JSON writer (opens in Perfetto and chrome://tracing):
 * complete events ("ph":"X") streamed to a file, one process per rank,
 * thread 0 = compute, thread 1 = communication. */
#ifndef DR_TRACE_H
#define DR_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dr_trace dr_trace_t;

enum { DR_TRACE_COMPUTE = 0, DR_TRACE_COMM = 1 };

/* Opens the trace of rank: "{rank}" in path is replaced by the rank; else
 * with world > 1 ".rank<N>" is inserted before the extension. 0 or -errno;
 * the path used is written to used (may be NULL). */
int dr_trace_open(const char *path, uint32_t rank, uint32_t world,
                  dr_trace_t **out, char *used, size_t used_len);

/* A span on thread tid, monotonic microseconds. Names are JSON-escaped. */
void dr_trace_span(dr_trace_t *t, int tid, const char *name, uint64_t t0_us,
                   uint64_t t1_us);

/* Closes the JSON and the file. 0 or -errno of the last write. */
int dr_trace_close(dr_trace_t **t);

#endif /* DR_TRACE_H */
