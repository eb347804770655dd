/* A Chrome trace-event JSON writer (opens in Perfetto and chrome://tracing):
 * complete events ("ph":"X") streamed to a file, one process per rank
 * (pid = rank), thread 0 = compute, thread 1 = communication, thread 2 =
 * the host beside a device that runs the compute (named in the file only
 * once a span is written there).
 *
 * The file, as `ddprun diagnose` reads it:
 *
 *   {"displayTimeUnit":"ms",
 *    "otherData":{"ddprun":{"source":"train","rank":R,"world":W,
 *                           "backend":"cpu"|"nccl","clock_offset_us":X}},
 *    "traceEvents":[
 *   {"name":"thread_name","ph":"M",...}, ...,
 *   {"name":"step 3","ph":"X","pid":R,"tid":0,"ts":T,"dur":D},
 *   {"name":"allreduce bucket 2 (1.00 MiB)","ph":"X","pid":R,"tid":1,
 *    "ts":T,"dur":D,"args":{"bucket":2,"bytes":1048576,"ready_us":T0}},
 *   {"name":"cpu ms","ph":"C","pid":R,"ts":T,
 *    "args":{"compute":12.5,"comm":3.25}},
 *   ...
 *   ]}
 *
 * clock_offset_us is there only when the caller gives one (server time =
 * this host's time + offset).
 *
 * Times. Callers pass CLOCK_MONOTONIC microseconds (dr_mono_us, the
 * reducer's and the process group's clocks), which measure durations
 * well but mean nothing on another host. The file holds CLOCK_REALTIME
 * microseconds since the epoch, as PyTorch's profiler writes them, so
 * that the traces of several hosts (and an offset measured against the
 * rendezvous server) line up on one clock: at open the writer takes one
 * base, realtime minus monotonic, and adds it to every time it writes
 * (ts, and ready_us). One base for the whole file: durations and the
 * order of events stay exactly those the monotonic clock measured; a
 * step of the wall clock (NTP) during the run does not move them.
 *
 * Every event is complete in the file before the next: events are kept in
 * memory and written, each time followed by the closing "]}", at
 * dr_trace_flush, when 64 KiB have gathered, and at dr_trace_close; the
 * next write starts over that closing. So a process that dies (a signal,
 * SIGKILL) leaves a valid JSON file of what it flushed, unless it dies
 * inside that one write(). One thread at a time.
 */
#ifndef DR_TRACE_H
#define DR_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dr_trace dr_trace_t;

enum { DR_TRACE_COMPUTE = 0, DR_TRACE_COMM = 1, DR_TRACE_HOST = 2 };

/* What otherData.ddprun says. Strings are borrowed for the call. */
typedef struct {
  const char *source;      /* "train" */
  uint32_t rank, world;
  const char *backend;     /* "cpu" or "nccl" */
  int has_clock_offset;    /* write clock_offset_us */
  int64_t clock_offset_us;
} dr_trace_meta_t;

/* Opens the trace of meta->rank: "{rank}" in path is replaced by the
 * rank; else with world > 1 ".rank<N>" is inserted before the extension.
 * Writes the header (and its closing). 0 or -errno; the path used is
 * written to used (may be NULL). Caller owns *out: dr_trace_close. */
int dr_trace_open(const char *path, const dr_trace_meta_t *meta,
                  dr_trace_t **out, char *used, size_t used_len);

/* A span on thread tid, t0_us .. t1_us monotonic. Names are JSON-escaped
 * (up to 127 bytes kept). t may be NULL (no trace): nothing happens. */
void dr_trace_span(dr_trace_t *t, int tid, const char *name, uint64_t t0_us,
                   uint64_t t1_us);

/* A bucket's all-reduce on the communication thread, named
 * "allreduce bucket I (X.XX MiB)", t0_us .. t1_us (monotonic) the
 * communication itself, with args bucket, bytes (n_bytes) and ready_us
 * (ready_us monotonic, written on the file's clock; 0 = unknown, left
 * out). */
void dr_trace_allreduce(dr_trace_t *t, size_t bucket, uint64_t n_bytes,
                        uint64_t ready_us, uint64_t t0_us, uint64_t t1_us);

/* A counter event ("ph":"C") at ts_us (monotonic): series keys[i] with
 * value vals[i], i < n (keys are written as given: plain names). A
 * counter holds its values until its next event; Perfetto draws one
 * track per name, its series stacked. */
void dr_trace_counter(dr_trace_t *t, const char *name, uint64_t ts_us,
                      const char *const *keys, const double *vals,
                      size_t n);

/* Writes what is kept. 0 or the first write error (-errno); after one,
 * nothing more is written and the file keeps its last complete state. */
int dr_trace_flush(dr_trace_t *t);

/* Flushes, closes the file, frees, sets *t to NULL. 0 or -errno of the
 * first failure. */
int dr_trace_close(dr_trace_t **t);

/* The file's time of monotonic us (realtime us since the epoch). */
int64_t dr_trace_file_us(const dr_trace_t *t, uint64_t mono_us);

/* Parses a clock offset: an optional sign and decimal digits only, no
 * spaces, within int64 microseconds. 0, or -EINVAL (*out untouched). */
int dr_trace_parse_offset(const char *s, int64_t *out);

#endif /* DR_TRACE_H */
