/* Rate-limited warnings for events that a peer can repeat at will (bad
 * clients, connections refused at the descriptor limit), so that a flood
 * costs a few log lines instead of one per event.
 *
 * Events are counted in windows of interval_ms that open at the first event.
 * The first `burst` events of a window are logged in full; later ones are
 * held: counted by kind, with the text of the first of each kind kept as a
 * sample. When the window closes with events held, one summary line says
 *   "N more WHAT in the last 10.0 s: 39990 malformed (first: ...), ..."
 * and until a whole interval has passed without a summary, new windows log
 * nothing in full (a flood that goes on is one summary line per interval).
 *
 * Not thread-safe: each limiter belongs to one loop. Logs through log.h at
 * WARN; nothing is formatted when WARN is off.
 */
#ifndef DR_RATELIMIT_H
#define DR_RATELIMIT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define DR_RL_MAX_KINDS 16
#define DR_RL_SAMPLE_LEN 256

typedef struct {
  /* configuration, see dr_rl_init */
  const char *what;
  const char *const *kinds;
  size_t n_kinds;
  uint32_t burst;
  uint32_t interval_ms;
  /* the current window */
  int open;
  uint64_t start_ms;
  uint32_t logged;          /* events logged in full in this window */
  uint32_t allowed;         /* of burst: 0 while a flood goes on */
  uint64_t quiet_from_ms;   /* the burst applies again from then */
  uint64_t n_held;
  uint64_t held[DR_RL_MAX_KINDS];
  char sample[DR_RL_MAX_KINDS][DR_RL_SAMPLE_LEN];
} dr_ratelimit_t;

/* what: the events in the plural ("connections refused or dropped");
 * kinds[0..n_kinds) their kinds ("malformed", ...), n_kinds at most
 * DR_RL_MAX_KINDS. Both borrowed: keep them alive (static strings). */
void dr_rl_init(dr_ratelimit_t *rl, const char *what,
                const char *const *kinds, size_t n_kinds, uint32_t burst,
                uint32_t interval_ms);

/* Reports n events (n >= 1, one line) of kind at now_ms: logs the line in
 * full, or holds it for the summary. A kind out of range counts as the
 * last kind. */
void dr_rl_warn(dr_ratelimit_t *rl, uint64_t now_ms, size_t kind, uint64_t n,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void dr_rl_vwarn(dr_ratelimit_t *rl, uint64_t now_ms, size_t kind,
                 uint64_t n, const char *fmt, va_list ap);

/* Logs the summary of a window whose interval has passed. Call it from a
 * periodic timer, so that the summary of a flood that stopped appears. */
void dr_rl_tick(dr_ratelimit_t *rl, uint64_t now_ms);

/* Logs the summary of what is held now, interval passed or not (at
 * shutdown, so that nothing counted is lost). */
void dr_rl_flush(dr_ratelimit_t *rl, uint64_t now_ms);

#endif /* DR_RATELIMIT_H */
