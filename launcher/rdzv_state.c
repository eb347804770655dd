/* The job's place in its life, kept in a file across server restarts
 * (ddprun-rdzv --state-file): its run id, its current generation, the
 * restarts it has used, and whether that generation runs (with how many
 * nodes and workers) or is forming. A server started again on the same
 * file for the same run id continues them: a generation that was running
 * is taken back when its nodes resume (rdzv_resume.c), so a crash of the
 * server (or its restart by systemd) costs no training step, resets no
 * restart budget and reuses no generation number; a file of another run id
 * is ignored. Version 1 files (no running line) load as forming. The job's end removes the
 * file. Each save writes a temporary file and renames it over the old one,
 * so a reader sees one whole state or the previous one. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "log.h"
#include "server_internal.h"

#define STATE_MAGIC "ddprun-rdzv-state 2"
#define STATE_MAGIC_V1 "ddprun-rdzv-state 1"

/* Writes the state whole: 0 or -errno. */
static int write_state(dr_server_t *s) {
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", s->state_file);
  FILE *f = fopen(tmp, "w");
  if (f == NULL)
    return -errno;
  const dr_rdzv_t *r = &s->rdzv;
  uint32_t world = 0;
  if (r->resuming)
    world = r->resume_world;
  else
    for (size_t i = 0; i < r->n_round; i++)
      world += r->round[i]->nproc;
  int ok = fprintf(f, STATE_MAGIC "\nrun_id %s\ngeneration %" PRIu64
                   "\nrestarts_used %u\n", s->run_id, r->gen,
                   r->restarts_used) > 0;
  if (r->state == DR_JOB_RUNNING) {
    ok = fprintf(f, "running %zu %u\n", r->n_round, world) > 0 && ok;
    for (size_t i = 0; i < r->n_round; i++) {
      /* One word: a host name the agent sent may hold anything. */
      char host[256];
      snprintf(host, sizeof(host), "%s", r->round[i]->host);
      for (char *c = host; *c != '\0'; c++)
        if (*c <= ' ' || *c > '~')
          *c = '?';
      ok = fprintf(f, "node %zu %u %s\n", i, r->round[i]->nproc,
                   host[0] != '\0' ? host : "?") > 0 && ok;
    }
  } else
    ok = fprintf(f, "forming\n") > 0 && ok;
  ok = fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  int e = errno;
  ok = fclose(f) == 0 && ok;
  if (ok && rename(tmp, s->state_file) == 0)
    return 0;
  e = errno != 0 ? errno : e;
  unlink(tmp);
  return -(e != 0 ? e : EIO);
}

int dr__state_load(dr_server_t *s, char *err, size_t errlen) {
  const char *path = s->state_file;
  if (path == NULL)
    return 0;
  FILE *f = fopen(path, "r");
  if (f == NULL && errno == ENOENT) {
    /* A fresh job: written now, so that a path it cannot write is said at
     * start rather than when the state matters. */
    int rc = write_state(s);
    if (rc != 0) {
      snprintf(err, errlen, "cannot write --state-file %s (%s)", path,
               strerror(-rc));
      return DR_EBADARG;
    }
    return 0;
  }
  if (f == NULL) {
    snprintf(err, errlen, "cannot read --state-file %s (%s)", path,
             strerror(errno));
    return DR_EBADARG;
  }
  char magic[64] = "", line[4200] = "", phase[64] = "", tail[64] = "";
  uint64_t gen = 0;
  uint32_t used = 0, nnodes = 0, world = 0;
  struct {
    uint32_t nproc;
    char host[256];
  } *nodes = NULL;
  int v1 = fgets(magic, sizeof(magic), f) != NULL &&
           strcmp(magic, STATE_MAGIC_V1 "\n") == 0;
  int ok = (v1 || strcmp(magic, STATE_MAGIC "\n") == 0) &&
           fgets(line, sizeof(line), f) != NULL &&
           strncmp(line, "run_id ", 7) == 0 && strchr(line, '\n') != NULL &&
           fscanf(f, "generation %" SCNu64 "\nrestarts_used %" SCNu32 "\n",
                  &gen, &used) == 2 &&
           gen >= 1;
  int running = 0;
  if (ok && !v1) {
    ok = fscanf(f, "%63s", phase) == 1;
    running = ok && strcmp(phase, "running") == 0;
    if (running)
      ok = fscanf(f, "%" SCNu32 " %" SCNu32, &nnodes, &world) == 2 &&
           nnodes >= 1 && nnodes <= s->cfg.max_nodes && world >= nnodes;
    if (running && ok) {
      nodes = calloc(nnodes, sizeof(*nodes));
      ok = nodes != NULL;
      for (uint32_t i = 0; ok && i < nnodes; i++) {
        uint32_t rank = 0;
        ok = fscanf(f, " node %" SCNu32 " %" SCNu32 " %255s", &rank,
                    &nodes[i].nproc, nodes[i].host) == 3 &&
             rank == i && nodes[i].nproc >= 1;
      }
    } else if (!running)
      ok = ok && strcmp(phase, "forming") == 0;
  }
  ok = ok && fscanf(f, "%63s", tail) != 1;
  char *run_id = line + 7;
  run_id[strcspn(run_id, "\n")] = '\0';
  fclose(f);
  if (!ok) {
    free(nodes);
    snprintf(err, errlen, "--state-file %s is not a state this server "
             "wrote; remove it to start the job afresh", path);
    return DR_EBADARG;
  }
  if (strcmp(run_id, s->run_id) != 0) {
    free(nodes);
    DR_INFO("--state-file %s is of job '%s', not '%s': starting afresh",
            path, run_id, s->run_id);
    return 0;
  }
  s->state_loaded = 1;
  s->rdzv.restarts_used = used;
  if (running) {
    if (dr__resume_expect(s, gen, nnodes, world) != 0) {
      free(nodes);
      snprintf(err, errlen, "out of memory");
      return -ENOMEM;
    }
    /* The places keep who held them: a RESUME must match, and a node that
     * never comes back is named by its host. */
    for (uint32_t i = 0; i < nnodes; i++) {
      s->rdzv.round[i]->nproc = nodes[i].nproc;
      snprintf(s->rdzv.round[i]->host, sizeof(s->rdzv.round[i]->host), "%s",
               nodes[i].host);
    }
    free(nodes);
    DR_WARN("job '%s' continues from %s: generation %" PRIu64 " was running "
            "on %u node%s (world size %u), restarts used %u of %u; waiting "
            "for its nodes to resume", s->run_id, path, gen, nnodes,
            nnodes == 1 ? "" : "s", world, used, s->cfg.max_restarts);
    return 0;
  }
  /* A generation that was forming: its nodes join again, into a new one. */
  s->rdzv.gen = gen + 1;
  DR_WARN("job '%s' continues from %s: generation %" PRIu64 ", restarts "
          "used %u of %u", s->run_id, path, s->rdzv.gen, used,
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
            strerror(-rc));
  s->state_warned = 1;
}

void dr__state_remove(dr_server_t *s) {
  if (s->state_file != NULL && unlink(s->state_file) != 0 && errno != ENOENT)
    DR_WARN("cannot remove --state-file %s (%s)", s->state_file,
            strerror(errno));
}
