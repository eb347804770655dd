/* The traces of a job, for `ddprun diagnose TRACE... | DIR`: every file
 * read (dr_dg_read, diag_trace.h), one entry per rank, on one clock per
 * source.
 *
 * Two files of one rank: PyTorch's tensorboard_trace_handler writes a file
 * per profiling cycle. They are combined, the steps of both in time order,
 * when they come from one process (the pid Kineto writes) and their steps
 * do not overlap in time. Otherwise (two runs in one directory, one trace
 * twice, and always for train, which writes one file per rank and run)
 * that is an error naming both files.
 *
 * Clocks: train writes each host's clock and, when its agent measured it,
 * the offset to the server's (clock_offset_us); the times are left as they
 * are. PyTorch writes ts relative to baseTimeNanoseconds, which Kineto
 * floors to a 3-month boundary: the ranks of a job almost always share it;
 * a rank whose base differs from the first rank's has its times moved onto
 * that one's (a whole number of seconds, exactly), and the set's note says
 * so.
 */
#ifndef DR_DIAG_READ_H
#define DR_DIAG_READ_H

#include <stddef.h>

#include "diag_trace.h"

/* The limit on one trace, in bytes: a file, or its text once inflated,
 * of this size or more is refused before that much is allocated (a gzip
 * bomb costs at most this much memory). The default holds the traces of
 * real jobs (PyTorch's of a few profiled steps: tens of MiB a rank) with
 * room to spare; `ddprun diagnose --max-trace-mib N` moves it, up to
 * DR_DG_LIMIT_MAX, where the lexer's 32-bit offsets end. */
#define DR_DG_LIMIT_DEFAULT ((size_t)256 << 20)
#define DR_DG_LIMIT_MAX ((size_t)2 << 30)

typedef struct {
  dr_dg_rank_t *ranks; /* ascending rank; ranks the trace does not say
                          (-1) last, in the order given */
  size_t n_ranks;
  char note[512];      /* files left out, ranks combined, clocks moved;
                          "; "-separated, "" when nothing */
} dr_dg_set_t;

/* The trace files in dir, not in its subdirectories: names ending in
 * ".json" or ".json.gz" (so also ".pt.trace.json[.gz]"), not starting with
 * '.', in strcmp order, each as "dir/name". Such a name that is not a
 * regular file (a FIFO, a socket, a device, a directory) is skipped, never
 * opened: *n_skipped counts them and skipped (may be NULL) says which
 * ("x.json, y.json", cut to fit). Caller frees with dr_dg_paths_free. 0,
 * or a negative code with a one-line err ("DIR: no trace files (*.json,
 * *.json.gz) in it"). */
int dr_dg_list_dir(const char *dir, char ***paths, size_t *n,
                   size_t *n_skipped, char *skipped, size_t skipped_len,
                   char *err, size_t errlen);
void dr_dg_paths_free(char **paths, size_t n);

/* Reads every path (a file, or a directory as dr_dg_list_dir lists it)
 * into *out, each file under the limit max_bytes (0: the default; see
 * DR_DG_LIMIT_DEFAULT). In a directory, a file that is neither source's
 * trace, and a name that is not a regular file, are left out (named in the
 * note); any other failure, or a named file that is not a trace or not a
 * regular file (a FIFO is refused at once, never waited on), is an error:
 * a negative code and one line in err naming the file. Caller frees *out
 * with dr_dg_set_free. */
int dr_dg_read_set(const char *const *paths, size_t n, size_t max_bytes,
                   dr_dg_set_t *out, char *err, size_t errlen);

/* dr_dg_read_set of one directory, under the default limit. */
int dr_dg_read_dir(const char *dir, dr_dg_set_t *out, char *err,
                   size_t errlen);

void dr_dg_set_free(dr_dg_set_t *s);

#endif /* DR_DIAG_READ_H */
