/* probe: a test worker for ddprun. It prints, on one line of stdout, the
 * environment contract it was started with:
 *
 *   PROBE rank=.. local_rank=.. world=.. local_world=.. group_rank=..
 *         group_world=.. role_rank=.. role_world=.. role=.. master=ADDR:PORT
 *         restart=.. max_restarts=.. run_id=.. agent_store=.. omp=.. pid=..
 *         port_free=0|1 gen=.. node_rank=.. nnodes=.. endpoint=..
 *         bootstrap=.. error_file=.. torch_error_file=..
 *
 * (one line; a variable that is not set prints as UNSET; bootstrap is a
 * 64-bit FNV-1a hash of DDPRUN_BOOTSTRAP in hex, so ranks can be compared
 * without printing the secret-length value). port_free binds MASTER_PORT
 * with SO_REUSEADDR and listens, as PyTorch's TCPStore server does; rank 0
 * only, the others print -1.
 *
 * Then it does what its options say:
 *   --exit-rank R --exit-code N  rank R exits N;
 *   --exit-on-usr1               ... once SIGUSR1 arrives, so that a test can
 *                                let every worker start first;
 *   --segv-rank R                rank R dies of SIGSEGV;
 *   (with either, the other ranks wait until killed, or --sleep-ms)
 *   --sleep-ms MS                wait MS, then exit 0;
 *   --lines N                    print N lines "rank=R seq=I PAYLOAD";
 *   --ignore-term                ignore SIGTERM and SIGINT, printing
 *                                "ignoring SIGTERM" when one arrives;
 *   --report-signal FILE         append "SIGTERM PID" to FILE on SIGTERM,
 *                                then exit 143 (unless --ignore-term);
 *   --marker STRING              ignored: lets a test find its processes
 *                                through /proc/PID/cmdline.
 * Without any of them it exits 0 after the PROBE line. A probe never waits
 * longer than DR_PROBE_MAX_WAIT_MS, so a launcher that fails to stop it
 * cannot leave it behind for long.
 *
 * Exit codes: as asked; 64 for a bad option.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DR_PROBE_MAX_WAIT_MS 120000
#define DR_PROBE_PAYLOAD                                                       \
  "payload-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOPQRSTUVWXYZ-"  \
  "end"

typedef struct {
  long exit_rank;
  int exit_code;
  long segv_rank;
  int ignore_term;
  int exit_on_usr1;
  long sleep_ms; /* -1: not given */
  long lines;
  const char *report_file;
} probe_opts_t;

/* Read by the signal handlers; set before they are installed. */
static const char *g_report_file;
static int g_ignore_term;

static const char *env_or_unset(const char *name) {
  const char *v = getenv(name);
  return v != NULL ? v : "UNSET";
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == '\0')
    return dflt;
  char *end = NULL;
  long r = strtol(v, &end, 10);
  return *end == '\0' ? r : dflt;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s != '\0'; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

/* 1 when MASTER_PORT can be bound and listened on, the way TCPStore's
 * server does it; 0 when not; -1 when MASTER_PORT is not a port. */
static int master_port_free(void) {
  long port = env_long("MASTER_PORT", -1);
  if (port <= 0 || port > 65535)
    return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return 0;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons((uint16_t)port);
  int ok =
      bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 16) == 0;
  close(fd);
  return ok;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return;
    p += w;
    n -= (size_t)w;
  }
}

/* Formats an unsigned number into buf (async-signal-safe); returns its
 * length. */
static size_t fmt_ulong(char *buf, unsigned long v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++)
    buf[i] = tmp[n - 1 - i];
  return n;
}

static void on_term_signal(int sig) {
  int saved = errno;
  if (sig == SIGTERM && g_report_file != NULL) {
    char line[64] = "SIGTERM ";
    size_t n = 8;
    n += fmt_ulong(line + n, (unsigned long)getpid());
    line[n++] = '\n';
    int fd =
        open(g_report_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_all(fd, line, n);
      close(fd);
    }
  }
  if (g_ignore_term) {
    const char *msg =
        sig == SIGTERM ? "ignoring SIGTERM\n" : "ignoring SIGINT\n";
    write_all(1, msg, strlen(msg));
    errno = saved;
    return;
  }
  _exit(128 + sig);
}

static int parse_long(const char *s, long *out) {
  if (s == NULL || s[0] == '\0')
    return -1;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0')
    return -1;
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, probe_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->exit_rank = -1;
  o->segv_rank = -1;
  o->sleep_ms = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n = 0;
    int takes_value = 1;
    if (strcmp(a, "--ignore-term") == 0) {
      o->ignore_term = 1;
      takes_value = 0;
    } else if (strcmp(a, "--exit-on-usr1") == 0) {
      o->exit_on_usr1 = 1;
      takes_value = 0;
    } else if (strcmp(a, "--marker") == 0) {
      if (v == NULL)
        goto bad;
    } else if (strcmp(a, "--report-signal") == 0) {
      if (v == NULL)
        goto bad;
      o->report_file = v;
    } else if (parse_long(v, &n) != 0) {
      goto bad;
    } else if (strcmp(a, "--exit-rank") == 0) {
      o->exit_rank = n;
    } else if (strcmp(a, "--exit-code") == 0) {
      o->exit_code = (int)n;
    } else if (strcmp(a, "--segv-rank") == 0) {
      o->segv_rank = n;
    } else if (strcmp(a, "--sleep-ms") == 0) {
      o->sleep_ms = n;
    } else if (strcmp(a, "--lines") == 0) {
      o->lines = n;
    } else {
      goto bad;
    }
    i += takes_value;
    continue;
  bad:
    fprintf(stderr, "probe: bad option '%s'%s%s\n", a, v != NULL ? " " : "",
            v != NULL ? v : "");
    return -1;
  }
  return 0;
}

static void print_contract(long rank) {
  int pf = rank == 0 ? master_port_free() : -1;
  const char *boot = getenv("DDPRUN_BOOTSTRAP");
  char boot_hash[24];
  if (boot != NULL)
    snprintf(boot_hash, sizeof(boot_hash), "%016" PRIx64, fnv1a(boot));
  else
    snprintf(boot_hash, sizeof(boot_hash), "UNSET");
  printf("PROBE rank=%s local_rank=%s world=%s local_world=%s group_rank=%s "
         "group_world=%s role_rank=%s role_world=%s role=%s master=%s:%s "
         "restart=%s max_restarts=%s run_id=%s agent_store=%s omp=%s pid=%ld "
         "port_free=%d gen=%s node_rank=%s nnodes=%s endpoint=%s "
         "bootstrap=%s error_file=%s torch_error_file=%s\n",
         env_or_unset("RANK"), env_or_unset("LOCAL_RANK"),
         env_or_unset("WORLD_SIZE"), env_or_unset("LOCAL_WORLD_SIZE"),
         env_or_unset("GROUP_RANK"), env_or_unset("GROUP_WORLD_SIZE"),
         env_or_unset("ROLE_RANK"), env_or_unset("ROLE_WORLD_SIZE"),
         env_or_unset("ROLE_NAME"), env_or_unset("MASTER_ADDR"),
         env_or_unset("MASTER_PORT"),
         env_or_unset("TORCHELASTIC_RESTART_COUNT"),
         env_or_unset("TORCHELASTIC_MAX_RESTARTS"),
         env_or_unset("TORCHELASTIC_RUN_ID"),
         env_or_unset("TORCHELASTIC_USE_AGENT_STORE"),
         env_or_unset("OMP_NUM_THREADS"), (long)getpid(), pf,
         env_or_unset("DDPRUN_GENERATION"), env_or_unset("DDPRUN_NODE_RANK"),
         env_or_unset("DDPRUN_NNODES"), env_or_unset("DDPRUN_RDZV_ENDPOINT"),
         boot_hash, env_or_unset("DDPRUN_ERROR_FILE"),
         env_or_unset("TORCHELASTIC_ERROR_FILE"));
  fflush(stdout);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int main(int argc, char **argv) {
  probe_opts_t o;
  if (parse_args(argc, argv, &o) != 0)
    return 64;
  long rank = env_long("RANK", -1);

  g_report_file = o.report_file;
  g_ignore_term = o.ignore_term;
  if (o.report_file != NULL || o.ignore_term) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    if (o.ignore_term)
      sigaction(SIGINT, &sa, NULL);
  }

  /* Blocked before the PROBE line: a SIGUSR1 sent once the test has seen
   * it cannot be lost. */
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  if (o.exit_on_usr1 && rank == o.exit_rank)
    sigprocmask(SIG_BLOCK, &usr1, NULL);

  print_contract(rank);

  for (long i = 0; i < o.lines; i++)
    printf("rank=%ld seq=%ld " DR_PROBE_PAYLOAD "\n", rank, i);
  if (o.lines > 0)
    fflush(stdout);

  if (rank == o.exit_rank) {
    if (o.exit_on_usr1) {
      struct timespec limit = {DR_PROBE_MAX_WAIT_MS / 1000, 0};
      while (sigtimedwait(&usr1, NULL, &limit) < 0 && errno == EINTR) {
      }
    }
    return o.exit_code;
  }
  if (rank == o.segv_rank) {
    /* No core file in the test's directory; the signal is what counts. */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    return 1;
  }
  int waits = o.exit_rank >= 0 || o.segv_rank >= 0 || o.ignore_term ||
              o.report_file != NULL;
  long ms = o.sleep_ms >= 0 ? o.sleep_ms : waits ? DR_PROBE_MAX_WAIT_MS : 0;
  if (ms > DR_PROBE_MAX_WAIT_MS)
    ms = DR_PROBE_MAX_WAIT_MS;
  if (ms > 0)
    sleep_ms(ms);
  return 0;
}
