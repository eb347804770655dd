/* Sending a checkpoint: its plan (a directory's entries, walked without
 * following links) and its frames, hashed and paced (ckpt_stream.h). */
#include "ckpt_stream.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "grow.h"
#include "mono.h"

/* ---- the plan ----------------------------------------------------------- */

static int add_entry(dr_ckpt_src_t *src, const char *path, uint32_t kind,
                     uint64_t n_bytes) {
  if (src->n >= DR_CKPT_ENTRIES_MAX)
    return DR_EBADARG;
  dr_ckpt_ent_t *e = dr_grow(src->e, &src->cap, src->n + 1, sizeof(*e), 64);
  if (e == NULL)
    return -ENOMEM;
  src->e = e;
  if ((e[src->n].path = strdup(path)) == NULL)
    return -ENOMEM;
  e[src->n].kind = kind;
  e[src->n].n_bytes = n_bytes;
  src->n++;
  src->total += n_bytes;
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory fd, sorted: *names malloc'd, each strdup'd. */
static int read_names(int fd, char ***names, size_t *n) {
  *names = NULL;
  *n = 0;
  int d_fd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = d_fd >= 0 ? fdopendir(d_fd) : NULL;
  if (d == NULL) {
    int e = -errno;
    if (d_fd >= 0)
      close(d_fd);
    return e;
  }
  char **a = NULL;
  size_t cap = 0, k = 0;
  int rc = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    char **g = k < DR_CKPT_ENTRIES_MAX
                   ? dr_grow(a, &cap, k + 1, sizeof(*a), 16)
                   : NULL;
    if (g == NULL || (g[k] = strdup(de->d_name)) == NULL) {
      rc = k < DR_CKPT_ENTRIES_MAX ? -ENOMEM : DR_EBADARG;
      if (g != NULL)
        a = g;
      break;
    }
    a = g;
    k++;
  }
  closedir(d);
  if (k > 1)
    qsort(a, k, sizeof(*a), by_name);
  *names = a;
  *n = k;
  return rc;
}

static void free_names(char **a, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(a[i]);
  free(a);
}

/* The entries under directory fd, whose path is prefix ("" at the top);
 * the path check bounds the recursion to DR_CKPT_DEPTH_MAX levels. */
static int plan_dir(dr_ckpt_src_t *src, int fd, const char *prefix,
                    char *why, size_t why_len) {
  char **names;
  size_t n;
  int rc = read_names(fd, &names, &n);
  for (size_t i = 0; i < n && rc == 0; i++) {
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "",
                 names[i]) >= (int)sizeof(path) ||
        dr_ckpt_path_check((const uint8_t *)path, strlen(path), NULL) != 0) {
      snprintf(why, why_len, "its entry '%.200s' cannot be sent (a name "
               "with a control byte, or deeper than %d levels)", path,
               DR_CKPT_DEPTH_MAX);
      rc = DR_EBADARG;
      break;
    }
    if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue; /* gone meanwhile */
    if (S_ISREG(st.st_mode)) {
      rc = add_entry(src, path, DR_CKPT_FILE, (uint64_t)st.st_size);
    } else if (S_ISDIR(st.st_mode)) {
      rc = add_entry(src, path, DR_CKPT_DIR, 0);
      int sub = rc == 0 ? openat(fd, names[i], O_RDONLY | O_DIRECTORY |
                                                   O_NOFOLLOW | O_CLOEXEC)
                        : -1;
      if (rc == 0 && sub < 0)
        rc = -errno;
      if (rc == 0) {
        rc = plan_dir(src, sub, path, why, why_len);
        close(sub);
      }
    }
    if (rc == DR_EBADARG && why[0] == '\0')
      snprintf(why, why_len, "it has more than %u entries",
               DR_CKPT_ENTRIES_MAX);
  }
  free_names(names, n);
  return rc;
}

int dr_ckpt_src_open(dr_ckpt_store_t *s, const char *name, dr_ckpt_src_t *src,
                     char *why, size_t why_len) {
  memset(src, 0, sizeof(*src));
  why[0] = '\0';
  int rc = dr_ckpt_store_open_item(s, name, &src->fd, &src->is_dir);
  if (rc != 0) {
    src->fd = -1;
    return rc;
  }
  struct stat st;
  if (!src->is_dir) {
    if (fstat(src->fd, &st) != 0)
      rc = -errno;
    else
      src->total = (uint64_t)st.st_size;
  } else {
    rc = plan_dir(src, src->fd, "", why, why_len);
  }
  if (rc != 0)
    dr_ckpt_src_close(src);
  return rc;
}

void dr_ckpt_src_close(dr_ckpt_src_t *src) {
  if (src->fd >= 0)
    close(src->fd);
  src->fd = -1;
  for (size_t i = 0; i < src->n; i++)
    free(src->e[i].path);
  free(src->e);
  src->e = NULL;
  src->n = src->cap = 0;
}

/* ---- the frames ---------------------------------------------------------- */

/* A file of a directory checkpoint: each component opened without
 * following a link. */
static int open_rel(int root, const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s", path);
  int at = root, rc;
  char *save = NULL, *part = strtok_r(tmp, "/", &save);
  for (;;) {
    char *next = strtok_r(NULL, "/", &save);
    int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW |
                (next != NULL ? O_DIRECTORY : O_NONBLOCK);
    rc = openat(at, part, flags);
    if (rc < 0)
      rc = -errno;
    if (at != root)
      close(at);
    if (rc < 0 || next == NULL)
      break;
    at = rc;
    part = next;
  }
  struct stat st;
  if (rc >= 0 && (fstat(rc, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(rc);
    return DR_ENOTREG; /* replaced by something else since the plan */
  }
  if (rc >= 0)
    fcntl(rc, F_SETFL, fcntl(rc, F_GETFL) & ~O_NONBLOCK);
  return rc;
}

/* The frame the peer sent while this side sends: its ERROR, or a
 * protocol error. */
static int peer_spoke(dr_ckpt_conn_t *c, char *why, size_t why_len) {
  dr_msg_t m;
  dr_error_t e;
  int rc = dr_ckpt_recv(c, &m);
  if (rc == 0 && dr_msg_error(&m, &e) == 0) {
    snprintf(why, why_len, "%.*s", (int)e.message.len,
             (const char *)e.message.p);
    return e.code != 0 ? e.code : DR_EREMOTE;
  }
  snprintf(why, why_len, "the peer broke off the transfer (%s)",
           dr_strerror(rc != 0 ? rc : DR_ESEQUENCE));
  return rc != 0 ? rc : DR_ESEQUENCE;
}

static int pending(const dr_ckpt_conn_t *c) {
  struct pollfd p = {c->fd, POLLIN, 0};
  return c->rlen > c->rskip || poll(&p, 1, 0) > 0;
}

/* n_bytes of fd as DATA frames, hashed. */
static int send_bytes(dr_ckpt_conn_t *c, int fd, uint64_t n_bytes,
                      crypto_generichash_state *h, dr_tbucket_t *pace,
                      uint8_t *chunk, uint32_t req, char *why,
                      size_t why_len) {
  uint64_t left = n_bytes;
  while (left > 0) {
    size_t want = left < DR_CKPT_CHUNK ? (size_t)left : DR_CKPT_CHUNK;
    size_t got = 0;
    while (got < want) {
      ssize_t k = read(fd, chunk + got, want - got);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0) {
        snprintf(why, why_len, "it %s while it was sent",
                 k == 0 ? "shrank" : "could not be read");
        return k == 0 ? -EIO : -errno;
      }
      got += (size_t)k;
    }
    if (pending(c))
      return peer_spoke(c, why, why_len);
    if (pace != NULL) {
      int rc = dr_ckpt_pause(c->stop_fd,
                             dr_tbucket_take(pace, got, dr_mono_ns()));
      if (rc != 0)
        return rc;
    }
    crypto_generichash_update(h, chunk, got);
    dr_bytes_t b = {chunk, (uint32_t)got};
    int rc = dr_enc_ckpt_data(&c->out, req, b);
    if (rc == 0)
      rc = dr_ckpt_send(c);
    if (rc != 0)
      return rc;
    left -= got;
  }
  return 0;
}

/* What the checksum covers of a directory entry before its bytes. */
static void hash_entry(crypto_generichash_state *h, const dr_ckpt_ent_t *e) {
  uint8_t tail[10];
  tail[0] = 0;
  tail[1] = (uint8_t)e->kind;
  for (int i = 0; i < 8; i++) /* big-endian */
    tail[2 + i] = (uint8_t)(e->n_bytes >> (56 - 8 * i));
  crypto_generichash_update(h, (const uint8_t *)e->path, strlen(e->path));
  crypto_generichash_update(h, tail, sizeof(tail));
}

int dr_ckpt_stream_out(dr_ckpt_conn_t *c, dr_ckpt_src_t *src,
                       dr_tbucket_t *pace, uint32_t req, char *why,
                       size_t why_len) {
  why[0] = '\0';
  crypto_generichash_state h;
  crypto_generichash_init(&h, NULL, 0, DR_CKPT_SUM_LEN);
  uint8_t *chunk = malloc(DR_CKPT_CHUNK);
  if (chunk == NULL)
    return -ENOMEM;
  int rc = 0;
  if (!src->is_dir)
    rc = send_bytes(c, src->fd, src->total, &h, pace, chunk, req, why,
                    why_len);
  for (size_t i = 0; src->is_dir && i < src->n && rc == 0; i++) {
    const dr_ckpt_ent_t *e = &src->e[i];
    hash_entry(&h, e);
    dr_ckpt_entry_t ent = {dr_str(e->path), e->kind, e->n_bytes};
    if ((rc = dr_enc_ckpt_entry(&c->out, req, &ent)) == 0)
      rc = dr_ckpt_send(c);
    if (rc != 0 || e->kind != DR_CKPT_FILE)
      continue;
    int fd = open_rel(src->fd, e->path);
    if (fd < 0) {
      snprintf(why, why_len, "its file '%.200s' cannot be opened (%s)",
               e->path, dr_strerror(fd));
      rc = fd;
      continue;
    }
    rc = send_bytes(c, fd, e->n_bytes, &h, pace, chunk, req, why, why_len);
    close(fd);
  }
  free(chunk);
  uint8_t sum[DR_CKPT_SUM_LEN];
  crypto_generichash_final(&h, sum, sizeof(sum));
  if (rc == 0) {
    dr_bytes_t b = {sum, sizeof(sum)};
    if ((rc = dr_enc_ckpt_end(&c->out, req, b)) == 0)
      rc = dr_ckpt_send(c);
  }
  if (rc != 0 && why[0] == '\0')
    snprintf(why, why_len, "%s", dr_strerror(rc));
  return rc;
}
