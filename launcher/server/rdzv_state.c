/* The job's place in its life, kept in a file across server restarts
 * (ddprun-rdzv --state-file): its run id, its current generation, the
 * restarts it has used, and whether that generation runs (with its resume
 * token, and which node held each place with how many workers) or is
 * forming. A server started again on the same file for the same run id
 * continues them: a generation that was running is taken back when its
 * nodes resume with its token (rdzv_resume.c), so a crash of the server
 * (or its restart by systemd) costs no training step, resets no restart
 * budget and reuses no generation number; a file of another run id is
 * ignored. Files of versions 1 and 2 (no token) load as forming: their
 * nodes join a new generation. The job's end removes the file.
 *
 * The file holds the token, so it is written 0600, into a fresh temporary
 * file of a random name in the same directory (never one a link or another
 * user prepared: O_EXCL), then renamed over the old one, so a reader sees
 * one whole state or the previous one. Reading refuses what is not a
 * regular file (a FIFO would block the server before it listens), a file
 * over the size a state of this job can take, and every value out of the
 * job's bounds. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "fs.h"
#include "log.h"
#include "server_internal.h"

#define STATE_MAGIC "ddprun-rdzv-state 3"
#define STATE_MAGIC_V2 "ddprun-rdzv-state 2"
#define STATE_MAGIC_V1 "ddprun-rdzv-state 1"
/* A node line: "node RANK NPROC HOST\n", the host at most 255 bytes. */
#define STATE_NODE_MAX 300u
#define STATE_HEAD_MAX 2048u

/* The state as text into a malloc'd buffer: its length, or -ENOMEM. */
static long render(const dr_server_t *s, char **out) {
  const dr_rdzv_t *r = &s->rdzv;
  size_t cap = STATE_HEAD_MAX + strlen(s->run_id) +
               (r->state == DR_JOB_RUNNING ? r->n_round * STATE_NODE_MAX : 0);
  char *b = malloc(cap);
  if (b == NULL)
    return -ENOMEM;
  uint32_t world = 0;
  if (r->resuming)
    world = r->resume_world;
  else
    for (size_t i = 0; i < r->n_round; i++)
      world += r->round[i]->nproc;
  size_t n = (size_t)snprintf(b, cap, STATE_MAGIC "\nrun_id %s\ngeneration %"
                              PRIu64 "\nrestarts_used %u\n", s->run_id,
                              r->gen, r->restarts_used);
  if (r->state == DR_JOB_RUNNING && r->token_known && r->n_round > 0) {
    n += (size_t)snprintf(b + n, cap - n, "running %zu %u\ntoken ",
                          r->n_round, world);
    for (size_t i = 0; i < sizeof(r->token); i++)
      n += (size_t)snprintf(b + n, cap - n, "%02x", r->token[i]);
    b[n++] = '\n';
    for (size_t i = 0; i < r->n_round; i++) {
      /* One word: a host name the agent sent may hold anything. */
      char host[256];
      snprintf(host, sizeof(host), "%s", r->round[i]->host);
      for (char *c = host; *c != '\0'; c++)
        if (*c <= ' ' || *c > '~')
          *c = '?';
      n += (size_t)snprintf(b + n, cap - n, "node %zu %u %s\n", i,
                            r->round[i]->nproc,
                            host[0] != '\0' ? host : "?");
    }
  } else {
    n += (size_t)snprintf(b + n, cap - n, "forming\n");
  }
  *out = b;
  return (long)n;
}

/* Writes the state whole: 0 or -errno. */
static int write_state(dr_server_t *s) {
  char *text = NULL;
  long len = render(s, &text);
  if (len < 0)
    return (int)len;
  size_t plen = strlen(s->state_file);
  char *tmp = malloc(plen + 8);
  if (tmp == NULL) {
    free(text);
    return -ENOMEM;
  }
  memcpy(tmp, s->state_file, plen);
  memcpy(tmp + plen, ".XXXXXX", 8);
  int rc = 0;
  int fd = mkostemp(tmp, O_CLOEXEC); /* O_EXCL, mode 0600 */
  if (fd < 0) {
    rc = -errno;
    goto out;
  }
  for (long off = 0; off < len && rc == 0;) {
    ssize_t w = write(fd, text + off, (size_t)(len - off));
    if (w > 0)
      off += w;
    else if (w < 0 && errno != EINTR)
      rc = -errno;
  }
  if (rc == 0 && fsync(fd) != 0)
    rc = -errno;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && rename(tmp, s->state_file) != 0)
    rc = -errno;
  if (rc != 0)
    unlink(tmp);
out:
  free(tmp);
  free(text);
  return rc;
}

/* ---- reading ----------------------------------------------------------- */

typedef struct {
  char *p; /* the next line */
  int ok;
} rd_t;

/* The next line, NUL-terminated in place; NULL at the end. */
static char *next_line(rd_t *x) {
  if (x->p == NULL || *x->p == '\0')
    return NULL;
  char *line = x->p, *nl = strchr(line, '\n');
  if (nl == NULL) {
    x->ok = 0; /* every line of a state ends with its newline */
    x->p = NULL;
    return NULL;
  }
  *nl = '\0';
  x->p = nl + 1;
  return line;
}

/* "KEY N" with N a decimal in [lo, hi]; 0 leaves x->ok unset. */
static uint64_t field(rd_t *x, const char *key, uint64_t lo, uint64_t hi) {
  char *line = next_line(x);
  size_t k = strlen(key);
  if (line == NULL || strncmp(line, key, k) != 0 || line[k] != ' ' ||
      line[k + 1] < '0' || line[k + 1] > '9') {
    x->ok = 0;
    return 0;
  }
  errno = 0;
  char *end;
  unsigned long long v = strtoull(line + k + 1, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi)
    x->ok = 0;
  return v;
}

static int unhex(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                               : -1;
}

typedef struct {
  int version;
  char run_id[1100];
  uint64_t gen;
  uint32_t used, nnodes, world;
  int running;
  uint8_t token[DR_RESUME_TOKEN_LEN];
  struct {
    uint32_t nproc;
    char host[256];
  } *nodes;
} state_t;

/* Parses text (NUL-terminated, changed in place) into st: 1 when it is a
 * whole state within the bounds of s's job. */
static int parse(const dr_server_t *s, char *text, state_t *st) {
  rd_t x = {text, 1};
  char *line = next_line(&x);
  st->version = line == NULL                       ? 0
                : strcmp(line, STATE_MAGIC) == 0    ? 3
                : strcmp(line, STATE_MAGIC_V2) == 0 ? 2
                : strcmp(line, STATE_MAGIC_V1) == 0 ? 1
                                                    : 0;
  line = next_line(&x);
  if (st->version == 0 || line == NULL || strncmp(line, "run_id ", 7) != 0 ||
      strlen(line + 7) >= sizeof(st->run_id))
    return 0;
  snprintf(st->run_id, sizeof(st->run_id), "%s", line + 7);
  st->gen = field(&x, "generation", 1, DR_MAX_GEN);
  st->used = (uint32_t)field(&x, "restarts_used", 0, UINT32_MAX);
  if (!x.ok)
    return 0;
  if (st->version == 1)
    return next_line(&x) == NULL && x.ok;
  line = next_line(&x);
  if (line != NULL && strcmp(line, "forming") == 0)
    return next_line(&x) == NULL && x.ok;
  if (line == NULL || strncmp(line, "running ", 8) != 0)
    return 0;
  unsigned long long nn = 0, w = 0;
  char *end;
  nn = strtoull(line + 8, &end, 10);
  if (*end != ' ')
    return 0;
  w = strtoull(end + 1, &end, 10);
  if (*end != '\0' || nn == 0 || nn > s->cfg.max_nodes || w < nn ||
      w > DR_MAX_WORLD)
    return 0;
  st->nnodes = (uint32_t)nn;
  st->world = (uint32_t)w;
  if (st->version == 3) {
    line = next_line(&x);
    if (line == NULL || strncmp(line, "token ", 6) != 0 ||
        strlen(line + 6) != 2 * DR_RESUME_TOKEN_LEN)
      return 0;
    for (size_t i = 0; i < DR_RESUME_TOKEN_LEN; i++) {
      int hi = unhex(line[6 + 2 * i]), lo = unhex(line[7 + 2 * i]);
      if (hi < 0 || lo < 0)
        return 0;
      st->token[i] = (uint8_t)(hi << 4 | lo);
    }
  }
  st->nodes = calloc(st->nnodes, sizeof(*st->nodes));
  if (st->nodes == NULL)
    return 0;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < st->nnodes; i++) {
    line = next_line(&x);
    unsigned rank = 0, nproc = 0;
    int used_chars = 0;
    if (line == NULL ||
        sscanf(line, "node %u %u %255s%n", &rank, &nproc, st->nodes[i].host,
               &used_chars) != 3 ||
        line[used_chars] != '\0' || rank != i || nproc == 0 ||
        nproc > DR_MAX_NPROC)
      return 0;
    st->nodes[i].nproc = nproc;
    sum += nproc;
  }
  st->running = 1;
  return sum == st->world && next_line(&x) == NULL && x.ok;
}

/* Reads the file at path whole (at most cap bytes) into a NUL-terminated
 * malloc'd buffer: 0, -errno, DR_ENOTREG, or -EFBIG. */
static int slurp(const char *path, size_t cap, char **out) {
  int fd = dr_open_regular(path);
  if (fd < 0)
    return fd;
  int rc = 0;
  struct stat sb;
  char *b = NULL;
  if (fstat(fd, &sb) != 0) {
    rc = -errno;
    goto out;
  }
  if ((uint64_t)sb.st_size > cap) {
    rc = -EFBIG;
    goto out;
  }
  b = malloc((size_t)sb.st_size + 1);
  if (b == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  size_t n = 0;
  while (n < (size_t)sb.st_size) {
    ssize_t r = read(fd, b + n, (size_t)sb.st_size - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      rc = r < 0 ? -errno : -EIO; /* shrank while read */
      goto out;
    }
    n += (size_t)r;
  }
  b[n] = '\0';
  if (strlen(b) != n)
    rc = -EINVAL; /* a NUL byte: not text this server wrote */
out:
  close(fd);
  if (rc != 0)
    free(b);
  else
    *out = b;
  return rc;
}

int dr__state_load(dr_server_t *s, char *err, size_t errlen) {
  const char *path = s->state_file;
  if (path == NULL)
    return 0;
  char *text = NULL;
  size_t cap = STATE_HEAD_MAX + strlen(s->run_id) +
               (size_t)s->cfg.max_nodes * STATE_NODE_MAX;
  int rc = slurp(path, cap, &text);
  if (rc == -ENOENT) {
    /* A fresh job: written now, so that a path it cannot write is said at
     * start rather than when the state matters. */
    rc = write_state(s);
    if (rc != 0) {
      snprintf(err, errlen, "cannot write --state-file %s (%s)", path,
               dr_strerror(rc));
      return DR_EBADARG;
    }
    return 0;
  }
  if (rc == -EFBIG || rc == -EINVAL) {
    snprintf(err, errlen, "--state-file %s is not a state this server "
             "wrote (%s); remove it to start the job afresh", path,
             rc == -EFBIG ? "larger than a state of this job" : "binary");
    return DR_EBADARG;
  }
  if (rc != 0) {
    snprintf(err, errlen, "cannot read --state-file %s (%s)%s", path,
             dr_strerror(rc), rc == DR_ENOTREG || rc == -EISDIR
                                  ? "; give the path of a regular file"
                                  : "");
    return DR_EBADARG;
  }
  state_t st;
  memset(&st, 0, sizeof(st));
  int ok = parse(s, text, &st);
  free(text);
  if (!ok) {
    free(st.nodes);
    snprintf(err, errlen, "--state-file %s is not a state this server "
             "wrote; remove it to start the job afresh", path);
    return DR_EBADARG;
  }
  if (strcmp(st.run_id, s->run_id) != 0) {
    free(st.nodes);
    DR_INFO("--state-file %s is of job '%s', not '%s': starting afresh",
            path, st.run_id, s->run_id);
    return 0;
  }
  if (st.used > s->cfg.max_restarts) {
    DR_WARN("--state-file %s says %u restarts used, over this server's "
            "budget of %u: the budget is spent", path, st.used,
            s->cfg.max_restarts);
    st.used = s->cfg.max_restarts;
  }
  const char **hosts = NULL;
  uint32_t *nprocs = NULL;
  int running = st.running && st.version == 3;
  if (running) {
    hosts = calloc(st.nnodes, sizeof(*hosts));
    nprocs = calloc(st.nnodes, sizeof(*nprocs));
    for (uint32_t i = 0; hosts != NULL && nprocs != NULL && i < st.nnodes;
         i++) {
      hosts[i] = st.nodes[i].host;
      nprocs[i] = st.nodes[i].nproc;
    }
  }
  dr_rdzv_saved_t sv = {st.gen, st.used, running, st.nnodes, st.world, {0},
                        hosts, nprocs};
  memcpy(sv.token, st.token, sizeof(sv.token));
  int rc2 = running && (hosts == NULL || nprocs == NULL)
                ? -ENOMEM
                : dr_rdzv_restore(&s->rdzv, &sv, dr__now_ms(s));
  free(hosts);
  free(nprocs);
  free(st.nodes);
  if (rc2 != 0) {
    snprintf(err, errlen, "out of memory");
    return rc2;
  }
  if (running)
    DR_WARN("job '%s' continues from %s: generation %" PRIu64 " was running "
            "on %u node%s (world size %u), restarts used %u of %u; waiting "
            "for its nodes to resume", s->run_id, path, st.gen, st.nnodes,
            st.nnodes == 1 ? "" : "s", st.world, st.used,
            s->cfg.max_restarts);
  else
    DR_WARN("job '%s' continues from %s: generation %" PRIu64 ", restarts "
            "used %u of %u", s->run_id, path, s->rdzv.gen, st.used,
            s->cfg.max_restarts);
  return 0;
}

void dr__state_save(dr_server_t *s) {
  if (s->state_file == NULL)
    return;
  int rc = write_state(s);
  if (rc == 0) {
    s->state_warned = 0;
    return;
  }
  if (!s->state_warned)
    DR_WARN("cannot save the job's state to %s (%s); a restarted server "
            "would start the restart budget afresh", s->state_file,
            dr_strerror(rc));
  s->state_warned = 1;
}

void dr__state_remove(dr_server_t *s) {
  if (s->state_file != NULL && unlink(s->state_file) != 0 && errno != ENOENT)
    DR_WARN("cannot remove --state-file %s (%s)", s->state_file,
            strerror(errno));
}
