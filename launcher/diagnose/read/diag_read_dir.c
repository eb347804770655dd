/* A job's traces: directories listed, files read, ranks combined and put
 * on one clock (diag_read.h). */
#include "diag_read.h"
#include "diag_read_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "errors.h"
#include "grow.h"

/* More files than this in one directory is not a job's traces. */
#define MAX_FILES 65536

static int ends(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int by_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

void dr_dg_paths_free(char **paths, size_t n) {
  for (size_t i = 0; paths != NULL && i < n; i++)
    free(paths[i]);
  free(paths);
}

/* Appends name to the list of skipped names, ", "-separated; "..." once
 * when the next does not fit. */
static void list_skipped(char *out, size_t len, const char *name) {
  if (out == NULL || len == 0)
    return;
  size_t used = strlen(out);
  if (used >= 3 && strcmp(out + used - 3, "...") == 0)
    return;
  const char *sep = used > 0 ? ", " : "";
  if (used + strlen(sep) + strlen(name) + 6 <= len)
    snprintf(out + used, len - used, "%s%s", sep, name);
  else if (used + 6 <= len)
    snprintf(out + used, len - used, "%s...", sep);
}

int dr_dg_list_dir(const char *dir, char ***paths, size_t *n,
                   size_t *n_skipped, char *skipped, size_t skipped_len,
                   char *err, size_t errlen) {
  *paths = NULL;
  *n = 0;
  *n_skipped = 0;
  if (skipped != NULL && skipped_len > 0)
    skipped[0] = '\0';
  DIR *d = opendir(dir);
  if (d == NULL) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open the directory (%s)", dir,
             strerror(e));
    return -e;
  }
  char **v = NULL;
  size_t k = 0, cap = 0;
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const char *name = de->d_name;
    if (name[0] == '.' || !(ends(name, ".json") || ends(name, ".json.gz")))
      continue;
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p == NULL) {
      rc = -ENOMEM;
      break;
    }
    snprintf(p, len, "%s/%s", dir, name);
    /* stat() never blocks on a FIFO; only a regular file is opened (and
     * that again without blocking: one swapped in meanwhile is refused). */
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) {
      free(p);
      (*n_skipped)++;
      list_skipped(skipped, skipped_len, name);
      continue;
    }
    if (k == MAX_FILES) {
      free(p);
      snprintf(err, errlen, "%s: more than %d trace files; refused", dir,
               MAX_FILES);
      rc = -EFBIG;
      break;
    }
    char **q = dr_grow(v, &cap, k + 1, sizeof(*q), 16);
    if (q == NULL) {
      free(p);
      rc = -ENOMEM;
      break;
    }
    v = q;
    v[k++] = p;
  }
  closedir(d);
  if (rc == -ENOMEM)
    snprintf(err, errlen, "%s: out of memory", dir);
  if (rc == 0 && k == 0) {
    if (*n_skipped > 0 && skipped != NULL)
      snprintf(err, errlen, "%s: no trace files (*.json, *.json.gz) in it "
               "(%zu left out, not regular files: %s)", dir, *n_skipped,
               skipped);
    else
      snprintf(err, errlen, "%s: no trace files (*.json, *.json.gz) in it",
               dir);
    rc = -ENOENT;
  }
  if (rc != 0) {
    dr_dg_paths_free(v, k);
    return rc;
  }
  dr__sort(v, k, sizeof(*v), by_str);
  *paths = v;
  *n = k;
  return 0;
}

static void set_note(dr_dg_set_t *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_note(dr_dg_set_t *s, const char *fmt, ...) {
  size_t len = strlen(s->note);
  if (len + 3 >= sizeof(s->note))
    return;
  if (len > 0) {
    memcpy(s->note + len, "; ", 3);
    len += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->note + len, sizeof(s->note) - len, fmt, ap);
  va_end(ap);
}

static void shift(dr_dg_rank_t *r, double d) {
#define SH(x) ((x) = (x) >= 0 ? (x) + d : (x))
  for (size_t i = 0; i < r->n_steps; i++) {
    dr_dg_step_t *s = &r->steps[i];
    SH(s->t0_us);
    SH(s->t1_us);
    SH(s->fwd_t0_us);
    SH(s->fwd_t1_us);
    SH(s->bwd_t0_us);
    SH(s->bwd_t1_us);
    SH(s->opt_t0_us);
    SH(s->opt_t1_us);
    for (size_t k = 0; k < s->n_grad; k++)
      SH(s->grad_ready_us[k]);
    for (size_t k = 0; k < s->n_colls; k++) {
      SH(s->colls[k].ready_us);
      SH(s->colls[k].start_us);
      SH(s->colls[k].end_us);
    }
  }
#undef SH
}

static int by_step_t0(const void *a, const void *b) {
  const dr_dg_step_t *x = a, *y = b;
  return x->t0_us < y->t0_us ? -1 : x->t0_us > y->t0_us;
}

/* Moves b's steps into a (same rank, same source; pa and pb their
 * processes). 0, or -EINVAL/-ENOMEM with err. */
static int combine(dr_dg_rank_t *a, int64_t pa, dr_dg_rank_t *b, int64_t pb,
                   dr_dg_set_t *s, char *err, size_t errlen) {
  if (strcmp(a->source, "torch") != 0) {
    /* train writes one file per rank and run. */
    snprintf(err, errlen, "%s and %s both claim rank %d (two runs?)",
             a->path, b->path, a->rank);
    return -EINVAL;
  }
  if (pa >= 0 && pb >= 0 && pa != pb) {
    snprintf(err, errlen,
             "%s and %s both claim rank %d, from two processes (pid %lld "
             "and %lld: two runs?)",
             a->path, b->path, a->rank, (long long)pa, (long long)pb);
    return -EINVAL;
  }
  if (a->world != b->world || strcmp(a->backend, b->backend) != 0) {
    snprintf(err, errlen,
             "%s and %s both claim rank %d, from different jobs (%s, world "
             "%d, %s; %s, world %d, %s)",
             a->path, b->path, a->rank, a->source, a->world, a->backend,
             b->source, b->world, b->backend);
    return -EINVAL;
  }
  if (a->n_steps > 0 && b->n_steps > 0) {
    double a0 = a->steps[0].t0_us, a1 = a->steps[a->n_steps - 1].t1_us;
    double b0 = b->steps[0].t0_us, b1 = b->steps[b->n_steps - 1].t1_us;
    if (a0 <= b1 && b0 <= a1) {
      snprintf(err, errlen,
               "%s and %s both claim rank %d, and their steps overlap in "
               "time (two runs, or one trace twice?)",
               a->path, b->path, a->rank);
      return -EINVAL;
    }
  }
  size_t n = a->n_steps + b->n_steps;
  dr_dg_step_t *v = realloc(a->steps, (n > 0 ? n : 1) * sizeof(*v));
  if (v == NULL) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  if (b->n_steps > 0)
    memcpy(v + a->n_steps, b->steps, b->n_steps * sizeof(*v));
  dr__sort(v, n, sizeof(*v), by_step_t0);
  a->steps = v;
  a->n_steps = n;
  free(b->steps);
  b->steps = NULL;
  b->n_steps = 0;
  a->no_shapes |= b->no_shapes;
  if (b->note[0] != '\0')
    dr__dg_note(a, "%s", b->note);
  set_note(s, "rank %d: %s and %s combined", a->rank, a->path, b->path);
  return 0;
}

/* The set's order: known ranks ascending, unknown ones after in the
 * order read (at: the place read). */
typedef struct {
  int rank;
  size_t at;
} order_t;

static int by_rank(const void *a, const void *b) {
  const order_t *x = a, *y = b;
  int ux = x->rank < 0, uy = y->rank < 0;
  if (ux != uy)
    return ux - uy;
  if (!ux && x->rank != y->rank)
    return (x->rank > y->rank) - (x->rank < y->rank);
  return (x->at > y->at) - (x->at < y->at);
}

/* Puts s's ranks in by_rank's order: one qsort of (rank, place) pairs,
 * then the ranks moved along the permutation's cycles (a rank is large:
 * no second array of them). 0 or -ENOMEM. */
static int sort_ranks(dr_dg_set_t *s) {
  size_t n = s->n_ranks;
  if (n < 2)
    return 0;
  order_t *o = malloc(n * sizeof(*o));
  if (o == NULL)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++)
    o[i] = (order_t){s->ranks[i].rank, i};
  qsort(o, n, sizeof(*o), by_rank);
  /* Place i takes the rank read at o[i].at; at set to n once done. */
  for (size_t i = 0; i < n; i++) {
    if (o[i].at == n || o[i].at == i)
      continue;
    dr_dg_rank_t held = s->ranks[i];
    size_t j = i;
    while (o[j].at != i) {
      size_t from = o[j].at;
      s->ranks[j] = s->ranks[from];
      o[j].at = n;
      j = from;
    }
    s->ranks[j] = held;
    o[j].at = n;
  }
  free(o);
  return 0;
}

/* Which of the set's ranks holds a known rank: open addressing, a slot
 * the rank's place + 1 (0: empty), at most half full. */
typedef struct {
  size_t *slot;
  size_t cap; /* a power of 2, or 0 */
} rank_index_t;

static size_t rank_hash(int rank, size_t cap) {
  return (size_t)(((uint64_t)(unsigned)rank * 0x9E3779B97F4A7C15ull) >> 32) &
         (cap - 1);
}

/* The place of rank among ranks[], or SIZE_MAX. */
static size_t index_find(const rank_index_t *ix, const dr_dg_rank_t *ranks,
                         int rank) {
  if (ix->cap == 0)
    return SIZE_MAX;
  for (size_t j = rank_hash(rank, ix->cap);; j = (j + 1) & (ix->cap - 1)) {
    if (ix->slot[j] == 0)
      return SIZE_MAX;
    if (ranks[ix->slot[j] - 1].rank == rank)
      return ix->slot[j] - 1;
  }
}

/* Adds ranks[at] (a known rank, not in yet); n_known: how many are. 0 or
 * -ENOMEM. */
static int index_add(rank_index_t *ix, const dr_dg_rank_t *ranks,
                     size_t n_known, size_t at) {
  if ((n_known + 1) * 2 > ix->cap) {
    size_t cap = ix->cap > 0 ? ix->cap * 2 : 64;
    size_t *slot = calloc(cap, sizeof(*slot));
    if (slot == NULL)
      return -ENOMEM;
    for (size_t i = 0; i < ix->cap; i++) {
      if (ix->slot[i] == 0)
        continue;
      size_t j = rank_hash(ranks[ix->slot[i] - 1].rank, cap);
      while (slot[j] != 0)
        j = (j + 1) & (cap - 1);
      slot[j] = ix->slot[i];
    }
    free(ix->slot);
    ix->slot = slot;
    ix->cap = cap;
  }
  size_t j = rank_hash(ranks[at].rank, ix->cap);
  while (ix->slot[j] != 0)
    j = (j + 1) & (ix->cap - 1);
  ix->slot[j] = at + 1;
  return 0;
}

typedef struct {
  dr_dg_set_t *s;
  int64_t *pid; /* each rank's process, as the set's ranks */
  size_t cap;
  int64_t base_ns; /* the first PyTorch trace's */
  int have_base;
  size_t max_bytes; /* as dr_dg_read_set's */
  rank_index_t index;
  size_t n_known;   /* ranks in index */
} acc_t;

/* One file read and added. in_dir: a file that is not a trace, or not a
 * regular file any more, is noted and left out. */
static int add_file(acc_t *a, const char *path, int in_dir, char *err,
                    size_t errlen) {
  dr_dg_set_t *s = a->s;
  const char *slash = strrchr(path, '/');
  const char *base_name = slash ? slash + 1 : path;
  char *buf;
  size_t n;
  int rc = dr__dg_load(path, a->max_bytes, &buf, &n, err, errlen);
  if (rc == DR_ENOTREG && in_dir) {
    /* Replaced since the directory was listed. */
    set_note(s, "%s left out (not a regular file)", base_name);
    return 0;
  }
  if (rc != 0)
    return rc;
  dr_dg_rank_t r;
  dr__dg_meta_t meta;
  char why[600];
  rc = dr__dg_read_json(buf, n, path, &r, &meta, why, sizeof(why));
  int64_t base = meta.base_ns;
  free(buf);
  if (rc != 0) {
    /* Any other JSON (a config file beside the traces) is left out; a
     * broken one is not. */
    if (in_dir && (strstr(why, ": not a trace ddprun diagnose reads") != NULL ||
                   strstr(why, ": not a Chrome trace: ") != NULL)) {
      set_note(s, "%s left out (not a trace)", base_name);
      return 0;
    }
    snprintf(err, errlen, "%s", why);
    return rc;
  }
  if (strcmp(r.source, "torch") == 0 && base != 0) {
    if (!a->have_base) {
      a->base_ns = base;
      a->have_base = 1;
    } else if (base != a->base_ns) {
      double d = (double)(base - a->base_ns) / 1000.0;
      shift(&r, d);
      set_note(s, "%s: times moved by %.0f s onto the first trace's clock "
                  "(its baseTimeNanoseconds differs)",
               r.path, d / 1e6);
    }
  }
  size_t i = r.rank >= 0 ? index_find(&a->index, s->ranks, r.rank) : SIZE_MAX;
  if (i != SIZE_MAX) {
    dr_dg_rank_t *o = &s->ranks[i];
    if (strcmp(o->source, r.source) != 0) {
      snprintf(err, errlen, "%s and %s both claim rank %d (a %s trace and a "
                            "%s trace)",
               o->path, r.path, r.rank, o->source, r.source);
      dr_dg_rank_free(&r);
      return -EINVAL;
    }
    rc = combine(o, a->pid[i], &r, meta.pid, s, err, errlen);
    dr_dg_rank_free(&r);
    return rc;
  }
  if (s->n_ranks > 0 && strcmp(s->ranks[0].source, r.source) != 0) {
    snprintf(err, errlen, "%s is a %s trace, %s a %s trace: one job's traces "
                          "come from one source",
             r.path, r.source, s->ranks[0].path, s->ranks[0].source);
    dr_dg_rank_free(&r);
    return -EINVAL;
  }
  if (s->n_ranks == a->cap) {
    size_t cap = a->cap > 0 ? a->cap * 2 : 8;
    dr_dg_rank_t *v = realloc(s->ranks, cap * sizeof(*v));
    if (v != NULL)
      s->ranks = v;
    int64_t *p = v != NULL ? realloc(a->pid, cap * sizeof(*p)) : NULL;
    if (p == NULL) {
      dr_dg_rank_free(&r);
      snprintf(err, errlen, "out of memory");
      return -ENOMEM;
    }
    a->pid = p;
    a->cap = cap;
  }
  a->pid[s->n_ranks] = meta.pid;
  s->ranks[s->n_ranks] = r;
  if (r.rank >= 0) {
    if (index_add(&a->index, s->ranks, a->n_known, s->n_ranks) != 0) {
      dr_dg_rank_free(&r);
      snprintf(err, errlen, "out of memory");
      return -ENOMEM;
    }
    a->n_known++;
  }
  s->n_ranks++;
  return 0;
}

int dr_dg_read_set(const char *const *paths, size_t n, size_t max_bytes,
                   dr_dg_set_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  acc_t a;
  memset(&a, 0, sizeof(a));
  a.s = out;
  a.max_bytes = max_bytes;
  int rc = 0;
  if (n == 0) {
    snprintf(err, errlen, "no traces given");
    return -EINVAL;
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    struct stat st;
    if (stat(paths[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      char **v;
      size_t k, n_skipped;
      char skipped[200];
      rc = dr_dg_list_dir(paths[i], &v, &k, &n_skipped, skipped,
                          sizeof(skipped), err, errlen);
      if (rc == 0 && n_skipped > 0)
        set_note(out, "%s: %zu left out, not regular files: %s", paths[i],
                 n_skipped, skipped);
      for (size_t j = 0; rc == 0 && j < k; j++)
        rc = add_file(&a, v[j], 1, err, errlen);
      dr_dg_paths_free(v, k);
    } else {
      rc = add_file(&a, paths[i], 0, err, errlen);
    }
  }
  free(a.pid);
  free(a.index.slot);
  if (rc == 0 && out->n_ranks == 0) {
    snprintf(err, errlen, "%s%s: no trace ddprun diagnose reads (%s)",
             paths[0], n > 1 ? " ..." : "", out->note);
    rc = -ENOENT;
  }
  if (rc == 0 && sort_ranks(out) != 0) {
    snprintf(err, errlen, "out of memory");
    rc = -ENOMEM;
  }
  if (rc != 0) {
    dr_dg_set_free(out);
    return rc;
  }
  return 0;
}

int dr_dg_read_dir(const char *dir, dr_dg_set_t *out, char *err,
                   size_t errlen) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    memset(out, 0, sizeof(*out));
    snprintf(err, errlen, "%s: not a directory", dir);
    return -ENOTDIR;
  }
  const char *p[1] = {dir};
  return dr_dg_read_set(p, 1, 0, out, err, errlen);
}

void dr_dg_set_free(dr_dg_set_t *s) {
  for (size_t i = 0; s->ranks != NULL && i < s->n_ranks; i++)
    dr_dg_rank_free(&s->ranks[i]);
  free(s->ranks);
  memset(s, 0, sizeof(*s));
}
