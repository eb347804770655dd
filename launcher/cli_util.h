/* Small parsers and helpers shared by the command-line programs. Each
 * returns 0 or DR_EBADARG / -errno; none prints. */
#ifndef DR_CLI_UTIL_H
#define DR_CLI_UTIL_H

#include <stdint.h>

/* A decimal integer in [min, max], nothing else in the string. */
int dr_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);

/* "N" or "MIN:MAX" with 1 <= MIN <= MAX <= 1000000. */
int dr_parse_nnodes(const char *s, uint32_t *min, uint32_t *max);

/* Seconds with an optional fraction ("2", "0.5") into milliseconds, at
 * least min_ms and at most a day. */
int dr_parse_seconds_ms(const char *s, uint32_t min_ms, uint32_t *out_ms);

/* Writes "PORT\n" to path atomically (temporary file, then rename), so a
 * reader never sees a partial port. */
int dr_write_port_file(const char *path, uint16_t port);

/* A usage error of the command prog: prints "PROG: MESSAGE; see PROG
 * --help" on stderr and returns 2, the exit status for bad input. */
int dr_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* DR_CLI_UTIL_H */
