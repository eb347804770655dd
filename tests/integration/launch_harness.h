/* Harness for tests that run ddprun itself: it starts ddprun (and, through
 * harness.h, ddprun-rdzv) as child processes whose workers are `probe`,
 * captures their output in files, waits for them with deadlines, and makes
 * sure that no process of a test outlives it.
 *
 * Every test runs inside a fixture (dr_l_setup / dr_l_teardown) that owns a
 * private temporary directory, a marker unique to the test, the processes
 * it started, the server and any socket it holds. The marker goes on each
 * probe's command line (--marker), so every worker of the test can be found
 * in /proc even after its ddprun is gone. Teardown SIGKILLs what still
 * runs, then looks for processes carrying the marker: any it finds is
 * killed and fails the test, since ddprun should have stopped it. Children
 * get SIGKILL from the kernel when the test process dies.
 *
 * Waits are event-driven and bounded: process exits through pidfds, output
 * through inotify. Ports come from the kernel (port 0), never guesses.
 */
#ifndef DR_LAUNCH_HARNESS_H
#define DR_LAUNCH_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

#define DR_L_MAX_PROCS 16
#define DR_L_MAX_FDS 8

/* The binaries under test. */
const char *dr_l_ddprun_path(void);
const char *dr_l_probe_path(void);

/* ---- processes ----------------------------------------------------------- */

typedef struct {
  char name[32]; /* for messages and file names: "node0" */
  pid_t pid;
  int pidfd;
  int reaped;
  int status;     /* waitpid() status once reaped */
  double t_start; /* dr_h_now_ms() just before fork() */
  double t_end;   /* when the exit was seen */
  char out_path[320];
  char err_path[320];
  char *out; /* last dr_l_out()/dr_l_err() results; owned */
  char *err;
} dr_l_proc_t;

/* Waits up to timeout_ms for p to exit. 0, or -ETIMEDOUT. */
int dr_l_wait(dr_l_proc_t *p, int timeout_ms);
/* Waits up to timeout_ms for all n processes; each exit time is taken when
 * it happens. 0, or -ETIMEDOUT. */
int dr_l_wait_all(dr_l_proc_t *const *p, size_t n, int timeout_ms);
/* The exit code of a reaped process; 128+N when killed by signal N. */
int dr_l_code(const dr_l_proc_t *p);
/* Milliseconds from start to exit of a reaped process. */
double dr_l_elapsed_ms(const dr_l_proc_t *p);

/* The whole stdout / stderr captured so far, NUL-terminated. Owned by p,
 * valid until the next call of the same function on p. */
const char *dr_l_out(dr_l_proc_t *p);
const char *dr_l_err(dr_l_proc_t *p);

/* Waits up to timeout_ms until p's stdout (stream 1) or stderr (2) holds
 * needle at least count times. 0; -ETIMEDOUT; -ECHILD when p exited and
 * its output does not hold them. */
int dr_l_wait_output(dr_l_proc_t *p, int stream, const char *needle,
                     size_t count, int timeout_ms);

/* Prints the tails of p's stdout and stderr to stderr. */
void dr_l_dump(dr_l_proc_t *p);

/* ---- ports ----------------------------------------------------------------
 */

/* A port the kernel just gave to a socket bound on all addresses (port 0)
 * and closed again: free now. 0 on failure. */
uint16_t dr_l_free_port(void);

/* ---- /proc -----------------------------------------------------------------
 */

/* Fills pids with the processes (other than this one) one of whose
 * arguments equals marker; returns how many there are (may exceed max). */
size_t dr_l_marker_pids(const char *marker, pid_t *pids, size_t max);
/* Waits up to timeout_ms until no process carries marker. Returns 0, or
 * how many still do. */
size_t dr_l_wait_marker_gone(const char *marker, int timeout_ms);

/* ---- the fixture ------------------------------------------------------- */

typedef struct {
  char dir[256];
  char marker[64];
  dr_h_server_t *srv;
  dr_l_proc_t *procs[DR_L_MAX_PROCS];
  size_t n_procs;
  int fds[DR_L_MAX_FDS]; /* sockets the test holds; closed at teardown */
  size_t n_fds;
  int passed;
} dr_l_fixture_t;

int dr_l_setup(void **state);
/* Kills and reaps what still runs, stops the server, fails when a process
 * with the marker was left, when the server misbehaved, or when a ddprun
 * reported a sanitizer error; dumps the output of every process when the
 * test failed (so tests just fail_msg()). */
int dr_l_teardown(void **state);

#define DR_L_TEST(name)                                                        \
  static void name##_body(dr_l_fixture_t *fx);                                 \
  static void name(void **state) {                                             \
    dr_l_fixture_t *fx_ = *state;                                              \
    name##_body(fx_);                                                          \
    fx_->passed = 1;                                                           \
  }                                                                            \
  static void name##_body(dr_l_fixture_t *fx)

/* Starts ddprun-rdzv for the fixture (see dr_h_server_start; the log level
 * is warn unless args set one). Asserts success; returns its port. */
uint16_t dr_l_rdzv(dr_l_fixture_t *fx, const char *const *args);

/* Starts ddprun with args (NULL-terminated, without argv[0]) and env
 * ("K=V" entries added to a cleaned copy of the test's environment: no
 * PET_*, DDPRUN_*, TORCHELASTIC_* or contract variables). Its stdout and
 * stderr go to files in the fixture's directory named after name. Asserts
 * success; the process belongs to the fixture. */
dr_l_proc_t *dr_l_ddprun(dr_l_fixture_t *fx, const char *name,
                         const char *const *args, const char *const *env);

/* Holds a socket in the fixture until teardown: a listening one on a port
 * the kernel picked on all addresses. Returns the port (asserts). */
uint16_t dr_l_hold_listening_port(dr_l_fixture_t *fx);

/* Writes a file in the fixture's directory; returns its path (static
 * storage, valid until the next call). */
const char *dr_l_write_file(dr_l_fixture_t *fx, const char *name,
                            const char *content, int mode);
/* A path in the fixture's directory (static storage, as above). */
const char *dr_l_path(dr_l_fixture_t *fx, const char *name);

/* Asserts that p exits within timeout_ms with code (128+N for signal N). */
void dr_l_expect_exit(dr_l_proc_t *p, int code, int timeout_ms);

/* Runs the n tests, or only the one argv[1] names (one ctest per case);
 * a name that is no test's is an error, not an empty run. Returns main's
 * exit status. */
struct CMUnitTest;
int dr_l_main(const char *group, const struct CMUnitTest *tests, size_t n,
              int argc, char **argv);
#define DR_L_MAIN(group, tests, argc, argv)                                    \
  dr_l_main((group), (tests), sizeof(tests) / sizeof((tests)[0]), (argc),      \
            (argv))

/* Number of lines in s that are not empty. */
size_t dr_l_count_lines(const char *s);

#endif /* DR_LAUNCH_HARNESS_H */
