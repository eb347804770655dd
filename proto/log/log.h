/* The one logger of the server, the launcher and the agent (the wire
 * protocol's own code never logs), under one --log-level.
 *
 * Two forms, both checked against the level before any formatting:
 *   DR_INFO(...)            ddprun-rdzv 09:51:58.123 INFO  round 1 complete: ...
 *   DR_SAY(DR_LOG_INFO, ..) ddprun: [rank0] local rank 0 of 2, ...
 * The first is the server's log; the second is what the agent tells the
 * user who launched the job (binding, failures, restarts, the summary),
 * prefixed by the program's name alone. One write() per line.
 * dr_log_signal_safe() uses write() only, for signal context.
 */
#ifndef DR_LOG_H
#define DR_LOG_H

#include <stddef.h>

typedef enum {
  DR_LOG_ERROR = 0,
  DR_LOG_WARN = 1,
  DR_LOG_INFO = 2,
  DR_LOG_DEBUG = 3
} dr_log_level_t;

extern int dr_log_level;

/* Sets the program name shown on every line (borrowed; keep it alive). */
void dr_log_init(const char *prog, dr_log_level_t level);

/* Parses "error", "warn", "info", "debug"; -1 when unknown. */
int dr_log_parse_level(const char *s);

void dr_log_write(dr_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define DR_LOG(level, ...)                                                   \
  do {                                                                       \
    if ((int)(level) <= dr_log_level)                                        \
      dr_log_write((level), __VA_ARGS__);                                    \
  } while (0)

void dr_log_say(dr_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define DR_SAY(level, ...)                                                   \
  do {                                                                       \
    if ((int)(level) <= dr_log_level)                                        \
      dr_log_say((level), __VA_ARGS__);                                      \
  } while (0)

#define DR_ERROR(...) DR_LOG(DR_LOG_ERROR, __VA_ARGS__)
#define DR_WARN(...) DR_LOG(DR_LOG_WARN, __VA_ARGS__)
#define DR_INFO(...) DR_LOG(DR_LOG_INFO, __VA_ARGS__)
#define DR_DEBUG(...) DR_LOG(DR_LOG_DEBUG, __VA_ARGS__)

/* Writes msg to stderr with write() only. */
void dr_log_signal_safe(const char *msg);

/* Renders up to max_out-1 bytes of p as printable ASCII (others as \xNN),
 * for logging what a bad client sent. Returns out. */
char *dr_log_sample(const void *p, size_t n_bytes, char *out, size_t max_out);

#endif /* DR_LOG_H */
