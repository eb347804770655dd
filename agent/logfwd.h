/* Worker output forwarding: whole lines, each prefixed with its rank, to
 * the console and/or a log file; the last lines kept for the failure
 * summary. Pure C over file descriptors (the agent feeds it what it reads
 * from the worker's pipes); never logs.
 *
 * Lines never mix: each write() carries only whole prefixed lines, and at
 * most DR_LOGFWD_ATOMIC bytes unless a single line is longer, so two
 * agents sharing a terminal or a pipe cannot interleave inside a line.
 */
#ifndef DR_LOGFWD_H
#define DR_LOGFWD_H

#include <stddef.h>

#define DR_LOGFWD_ATOMIC 4096  /* PIPE_BUF on Linux */
#define DR_LOGFWD_MAX_LINE (64 * 1024) /* longer lines are cut and continued */
#define DR_LOGFWD_TAIL_LINES 20
#define DR_LOGFWD_TAIL_LINE_MAX 512    /* bytes kept of each tail line */

typedef struct dr_logfwd dr_logfwd_t;

typedef struct {
  int console_fd;       /* 1, 2, or -1 for none */
  int file_fd;          /* an open log file, or -1; not closed by logfwd */
  const char *prefix;   /* copied; e.g. "[rank5]:" ("" for none) */
} dr_logfwd_opts_t;

/* Returns NULL when out of memory. */
dr_logfwd_t *dr_logfwd_new(const dr_logfwd_opts_t *o);

/* Writes every complete line in data (and earlier partial data) with the
 * prefix; keeps an incomplete last line until more arrives. A line longer
 * than DR_LOGFWD_MAX_LINE is written in pieces of DR_LOGFWD_MAX_LINE
 * bytes, each prefixed and newline-terminated. Write errors on one
 * destination (EPIPE, with SIGPIPE ignored by the caller; a full disk)
 * disable that destination only; EINTR and short writes are handled. A
 * non-blocking destination that stays full (EAGAIN) for 10 s is disabled
 * too. Lines complete in data are written before this returns; nothing
 * waits for a later call. */
void dr_logfwd_feed(dr_logfwd_t *f, const char *data, size_t n);

/* At end of stream: writes a pending partial line, newline-terminated. */
void dr_logfwd_flush(dr_logfwd_t *f);

/* Copies the last DR_LOGFWD_TAIL_LINES lines (without prefix, newline
 * separated, NUL-terminated, the newest last) into out; returns the
 * length. Includes a pending partial line. There is no newline after the
 * last line. Each line is its first DR_LOGFWD_TAIL_LINE_MAX bytes, with
 * "..." appended when it was longer; a piece of a cut line counts as a
 * line. When out is too small the oldest lines are left out first (a
 * newest line that alone does not fit is cut at the end). */
size_t dr_logfwd_tail(const dr_logfwd_t *f, char *out, size_t n);

/* The error that disabled each destination: 0 while it works (or was
 * never given), else -errno of the failed write. Either pointer may be
 * NULL. */
void dr_logfwd_errors(const dr_logfwd_t *f, int *console_err,
                      int *file_err);

void dr_logfwd_free(dr_logfwd_t **f);

/* Renders a prefix template: ${rank}, ${local_rank}, ${role_name} and
 * ${host} are replaced; other text is copied. NULL or "" template gives
 * "[rank<rank>]:". A NULL role or host renders as "". A '$' not followed
 * by '{' is copied. Returns 0 or DR_EBADARG for an unknown or unterminated
 * ${...} or an output that does not fit (out is then ""). */
int dr_log_prefix_render(const char *tmpl, int rank, int local_rank,
                         const char *role, const char *host, char *out,
                         size_t n);

#endif /* DR_LOGFWD_H */
