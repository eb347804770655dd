/* Small parsers and helpers shared by the command-line programs. Each
 * returns 0 or DR_EBADARG / -errno; none prints. */
#ifndef DR_CLI_UTIL_H
#define DR_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The most nodes a job may have: --nnodes of ddprun and ddprun-rdzv, and
 * what a scheduler's environment may say. */
#define DR_MAX_NODES 1000000u

/* The decimal digits s[0..len), nothing else (no sign, no blank): 0 and
 * *out; DR_EBADARG when it is not such a number (or len is 0); -ERANGE
 * when it is above max. The one parser of unsigned values: the others
 * below go through it. */
int dr_parse_uint(const char *s, size_t len, uint64_t max, uint64_t *out);

/* A decimal integer in [min, max], nothing else in the string. */
int dr_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);

/* "N" or "MIN:MAX" with 1 <= MIN <= MAX <= DR_MAX_NODES. On DR_EBADARG,
 * why (when not NULL) says what is wrong, for a message that quotes the
 * value: "MIN must not exceed MAX". */
int dr_parse_nnodes(const char *s, uint32_t *min, uint32_t *max);
int dr_parse_nnodes_why(const char *s, uint32_t *min, uint32_t *max, char *why,
                        size_t why_len);

/* Seconds with an optional fraction ("2", "0.5") into milliseconds, at
 * least min_ms and at most a day. */
int dr_parse_seconds_ms(const char *s, uint32_t min_ms, uint32_t *out_ms);

/* Writes "PORT\n" to path atomically (temporary file, then rename), so a
 * reader never sees a partial port. */
int dr_write_port_file(const char *path, uint16_t port);

/* A usage error of the command prog: prints "PROG: MESSAGE; see PROG
 * --help" on stderr and returns 2, the exit status for bad input. A
 * message that ends in that hint already (a parser's "unknown option")
 * does not get it twice. */
int dr_usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* DR_CLI_UTIL_H */
