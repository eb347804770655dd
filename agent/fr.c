/* PyTorch's flight recorder dumps, read for a hang report (fr.h). */
#include "fr.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mono.h"

#define DUMP_MAX (16u << 20)

int dr_fr_request(const char *path) {
  char req[1200];
  if (snprintf(req, sizeof(req), "%s.request", path) >= (int)sizeof(req))
    return -ENAMETOOLONG;
  unlink(path);
  int fd = open(req, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  close(fd);
  return 0;
}

static const char *str_of(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static uint64_t num_of(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (json_is_integer(v))
    return (uint64_t)json_integer_value(v);
  if (json_is_string(v)) /* pg_status holds its numbers as strings */
    return (uint64_t)strtoll(json_string_value(v), NULL, 10);
  return 0;
}

int dr_fr_parse(const char *text, size_t len, dr_fr_rank_t *out) {
  memset(out, 0, sizeof(*out));
  json_error_t err;
  json_t *root = json_loadb(text, len, 0, &err);
  if (root == NULL) {
    snprintf(out->why, sizeof(out->why), "not JSON (%.100s)", err.text);
    return -1;
  }
  const char *e = str_of(root, "error");
  json_t *entries = json_object_get(root, "entries");
  if (e != NULL || !json_is_array(entries)) {
    snprintf(out->why, sizeof(out->why), "%s",
             e != NULL ? e : "no entries in the dump");
    json_decref(root);
    return -1;
  }
  /* The newest collective: the one the rank waits in, if any. */
  json_t *newest = NULL;
  uint64_t newest_id = 0;
  size_t i;
  json_t *x;
  json_array_foreach(entries, i, x) {
    json_t *p2p = json_object_get(x, "is_p2p");
    if (json_is_true(p2p))
      continue;
    uint64_t id = num_of(x, "record_id");
    if (newest == NULL || id >= newest_id) {
      newest = x;
      newest_id = id;
    }
  }
  if (newest == NULL) {
    snprintf(out->why, sizeof(out->why), "no collective recorded");
    json_decref(root);
    return -1;
  }
  out->have = 1;
  out->seq = num_of(newest, "collective_seq_id");
  snprintf(out->name, sizeof(out->name), "%s",
           str_of(newest, "profiling_name") != NULL
               ? str_of(newest, "profiling_name") : "?");
  snprintf(out->state, sizeof(out->state), "%s",
           str_of(newest, "state") != NULL ? str_of(newest, "state") : "?");
  json_t *pg = json_object_get(newest, "process_group");
  if (json_is_array(pg) && json_array_size(pg) == 2 &&
      json_is_string(json_array_get(pg, 1)))
    snprintf(out->pg, sizeof(out->pg), "%s",
             json_string_value(json_array_get(pg, 1)));
  out->done = strcmp(out->state, "completed") == 0;
  json_decref(root);
  return 0;
}

int dr_fr_collect(const char *path, uint64_t deadline_ms, dr_fr_rank_t *out) {
  memset(out, 0, sizeof(*out));
  for (;;) {
    FILE *f = fopen(path, "re");
    if (f != NULL) {
      char *buf = malloc(DUMP_MAX);
      size_t n = buf != NULL ? fread(buf, 1, DUMP_MAX, f) : 0;
      fclose(f);
      int rc = buf != NULL ? dr_fr_parse(buf, n, out) : -1;
      if (buf == NULL)
        snprintf(out->why, sizeof(out->why), "out of memory");
      free(buf);
      return rc == 0;
    }
    if (dr_mono_ms() >= deadline_ms) {
      snprintf(out->why, sizeof(out->why),
               "no dump (its Python skipped ddprun's start-up hook: "
               "python -E or -I, or DDPRUN_PYTHON_HOOKS=0)");
      return 0;
    }
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

void dr_fr_verdict(const dr_fr_rank_t *r, const uint32_t *ids, size_t n,
                   char *out, size_t len) {
  size_t o = 0;
  uint64_t hi = 0;
  int any = 0, differ = 0;
  const char *name = NULL;
  out[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    if (!r[i].have)
      continue;
    if (!any || r[i].seq > hi)
      hi = r[i].seq;
    any = 1;
  }
  if (!any)
    return;
  for (size_t i = 0; i < n && o < len; i++) {
    if (!r[i].have)
      continue;
    o += (size_t)snprintf(out + o, len - o, "%srank %u in #%llu %s", o ? ", " : "",
                          ids[i], (unsigned long long)r[i].seq, r[i].name);
    if (r[i].seq == hi) {
      if (name != NULL && strcmp(name, r[i].name) != 0)
        differ = 1;
      name = r[i].name;
    }
  }
  if (o >= len)
    return;
  if (differ) {
    snprintf(out + o, len - o, ": the ranks disagree at #%llu (one skipped "
             "or reordered a collective)", (unsigned long long)hi);
    return;
  }
  size_t lo = 0;
  char behind[200] = "";
  for (size_t i = 0; i < n; i++)
    if (r[i].have && r[i].seq < hi && lo < sizeof(behind))
      lo += (size_t)snprintf(behind + lo, sizeof(behind) - lo, "%s%u",
                             lo ? ", " : "", ids[i]);
  if (lo > 0)
    snprintf(out + o, len - o, ": rank%s %s never entered #%llu",
             strchr(behind, ',') != NULL ? "s" : "", behind,
             (unsigned long long)hi);
  else
    snprintf(out + o, len - o, ": every rank here waits in #%llu; the one "
             "missing from it is elsewhere", (unsigned long long)hi);
}
