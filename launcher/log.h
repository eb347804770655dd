/* Logging for the launcher and the agent (proto/ never logs).
 *
 * DR_LOG checks the level before any formatting. Lines go to stderr as
 *   ddprun-rdzv 09:51:58.123 INFO  round 1 complete: ...
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
