/* The persist tier (agent/ckpt_copy.h, agent/ckpt_persist.h,
 * agent/ckpt_persister.h): the newest checkpoint of DIR copied to DIR2
 * byte for byte (a file, a directory tree), only when DIR2 lacks one as
 * new, DIR2's retention (its checkpoints only), a DIR2 that cannot be made
 * or written (a reason that reads the same for every checkpoint, nothing
 * left behind), a copy never visible under a checkpoint's name before it
 * is whole, partial copies of a killed agent removed, a cancelled copy;
 * the restore from DIR2 into an empty DIR; and the thread that runs them
 * for the agent's loop, with the last copy at the job's end. Each test
 * works in a fresh directory under TMPDIR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "ckpt_copy.h"
#include "ckpt_persist.h"
#include "ckpt_persister.h"
#include "ckpt_store.h"
#include "errors.h"
#include "wire.h"

#define HOST "node-a"

typedef struct {
  char root[256];
  char dir[300];  /* root/ckpt: --ckpt-dir */
  char dir2[300]; /* root/nfs/persist: --ckpt-persist, not made yet */
  dr_ckpt_store_t *s;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  const char *t = getenv("TMPDIR");
  snprintf(f->root, sizeof(f->root), "%s/test_ckpt_persist.XXXXXX",
           t != NULL && t[0] != '\0' ? t : "/tmp");
  if (mkdtemp(f->root) == NULL)
    return -1;
  snprintf(f->dir, sizeof(f->dir), "%s/ckpt", f->root);
  snprintf(f->dir2, sizeof(f->dir2), "%s/nfs/persist", f->root);
  char err[256];
  if (dr_ckpt_store_open(f->dir, 3, &f->s, err, sizeof(err)) != 0)
    return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_close(&f->s);
  assert_int_equal(dr_ckpt_rm_at(AT_FDCWD, f->root), 0);
  free(f);
  return 0;
}

/* Writes n bytes of a pattern that depends on seed at dir/name. */
static void put_file(const char *dir, const char *name, size_t n,
                     unsigned seed) {
  char p[4096];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  FILE *fp = fopen(p, "wb");
  assert_non_null(fp);
  for (size_t i = 0; i < n; i++)
    fputc((int)((i * 131u + seed) & 0xff), fp);
  assert_int_equal(fclose(fp), 0);
}

/* A checkpoint as the workers make one: written hidden, then renamed. */
static void put_ckpt(const fx_t *f, const char *name, size_t n,
                     unsigned seed) {
  char tmp[300], a[700], b[700];
  snprintf(tmp, sizeof(tmp), ".%s.partial", name);
  put_file(f->dir, tmp, n, seed);
  snprintf(a, sizeof(a), "%s/%s", f->dir, tmp);
  snprintf(b, sizeof(b), "%s/%s", f->dir, name);
  assert_int_equal(rename(a, b), 0);
}

static int same_file(const char *a, const char *b) {
  FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
  int same = x != NULL && y != NULL;
  while (same) {
    int c = fgetc(x), d = fgetc(y);
    same = c == d;
    if (c == EOF || d == EOF)
      break;
  }
  if (x != NULL)
    fclose(x);
  if (y != NULL)
    fclose(y);
  return same;
}

static int exists_in(const char *dir, const char *name) {
  char p[700];
  struct stat st;
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  return lstat(p, &st) == 0;
}

/* The entries of dir, but "." and "..", sorted and joined with ' '. */
static char *entries(const char *dir, char *out, size_t n) {
  char names[32][260];
  size_t k = 0;
  out[0] = '\0';
  DIR *d = opendir(dir);
  if (d == NULL)
    return out;
  for (struct dirent *de; (de = readdir(d)) != NULL && k < 32;)
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
      snprintf(names[k++], sizeof(names[0]), "%s", de->d_name);
  closedir(d);
  for (size_t i = 0; i < k; i++)
    for (size_t j = i + 1; j < k; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char t[260];
        memcpy(t, names[i], sizeof(t));
        memcpy(names[i], names[j], sizeof(t));
        memcpy(names[j], t, sizeof(t));
      }
  for (size_t i = 0; i < k; i++)
    snprintf(out + strlen(out), n - strlen(out), "%s%s", i > 0 ? " " : "",
             names[i]);
  return out;
}

static int copy_out(fx_t *f, uint32_t keep, const dr_ckpt_copy_io_t *io,
                    dr_persist_res_t *res) {
  return dr_persist_copy_out(f->s, f->dir2, keep, HOST, io, res);
}

/* ---- copies to DIR2 ------------------------------------------------------ */

/* The newest only, byte for byte, once; DIR2 made 0700; the newest `keep`
 * stay in DIR2, whatever else DIR2 holds is left alone. */
static void test_copy_out_and_retention(void **state) {
  fx_t *f = *state;
  dr_persist_res_t r;
  /* Nothing in DIR: nothing to copy, and DIR2 is not even made. */
  assert_int_equal(copy_out(f, 2, NULL, &r), 1);
  assert_string_equal(r.name, "");
  assert_false(exists_in(f->root, "nfs"));
  put_ckpt(f, "ckpt-0000000010.bin", 3000, 1);
  put_ckpt(f, "ckpt-0000000020.bin", 2500000, 2);
  assert_int_equal(copy_out(f, 2, NULL, &r), 0);
  assert_string_equal(r.name, "ckpt-0000000020.bin");
  assert_int_equal(r.step, 20);
  assert_int_equal(r.bytes, 2500000);
  struct stat st;
  assert_int_equal(stat(f->dir2, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  char a[700], b[700], list[2000];
  snprintf(a, sizeof(a), "%s/ckpt-0000000020.bin", f->dir);
  snprintf(b, sizeof(b), "%s/ckpt-0000000020.bin", f->dir2);
  assert_true(same_file(a, b));
  assert_string_equal(entries(f->dir2, list, sizeof(list)),
                      "ckpt-0000000020.bin");
  /* DIR2 holds the newest: nothing to do, DIR's newest named. */
  assert_int_equal(copy_out(f, 2, NULL, &r), 1);
  assert_int_equal(r.step, 20);
  /* What is not a checkpoint of the rule in DIR2 is never touched. */
  put_file(f->dir2, "notes.txt", 10, 0);
  put_file(f->dir2, ".hidden-5", 10, 0);
  snprintf(a, sizeof(a), "%s/ckpt-0000000001.bin", f->dir2);
  assert_int_equal(symlink("notes.txt", a), 0);
  for (int step = 30; step <= 50; step += 10) {
    char name[64];
    snprintf(name, sizeof(name), "ckpt-%010d.bin", step);
    put_ckpt(f, name, 1000 + (size_t)step, (unsigned)step);
    assert_int_equal(copy_out(f, 2, NULL, &r), 0);
    assert_string_equal(r.name, name);
  }
  assert_string_equal(entries(f->dir2, list, sizeof(list)),
                      ".hidden-5 ckpt-0000000001.bin ckpt-0000000040.bin "
                      "ckpt-0000000050.bin notes.txt");
  /* DIR2 newer than DIR (another run's): nothing is copied over it. */
  put_file(f->dir2, "ckpt-0000000099.bin", 10, 0);
  assert_int_equal(copy_out(f, 2, NULL, &r), 1);
}

/* A directory checkpoint: its tree (empty files and directories too),
 * links left out. */
static void test_copy_out_directory(void **state) {
  fx_t *f = *state;
  char p[1024], q[2048];
  snprintf(p, sizeof(p), "%s/.epoch1-step7.partial", f->dir);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(q, sizeof(q), "%s/shards", p);
  assert_int_equal(mkdir(q, 0700), 0);
  snprintf(q, sizeof(q), "%s/empty", p);
  assert_int_equal(mkdir(q, 0700), 0);
  put_file(p, "model.pt", 1500000, 3);
  snprintf(q, sizeof(q), "%s/shards", p);
  put_file(q, "rank0.pt", 7000, 4);
  put_file(q, "none.pt", 0, 0);
  snprintf(q, sizeof(q), "%s/shards/link", p);
  assert_int_equal(symlink("/etc/passwd", q), 0);
  snprintf(q, sizeof(q), "%s/epoch1-step7", f->dir);
  assert_int_equal(rename(p, q), 0);
  dr_persist_res_t r;
  assert_int_equal(copy_out(f, 3, NULL, &r), 0);
  assert_string_equal(r.name, "epoch1-step7");
  assert_int_equal(r.bytes, 1507000);
  char list[2000];
  snprintf(p, sizeof(p), "%s/epoch1-step7", f->dir2);
  assert_string_equal(entries(p, list, sizeof(list)),
                      "empty model.pt shards");
  snprintf(p, sizeof(p), "%s/epoch1-step7/shards", f->dir2);
  assert_string_equal(entries(p, list, sizeof(list)), "none.pt rank0.pt");
  snprintf(p, sizeof(p), "%s/epoch1-step7/model.pt", f->dir2);
  snprintf(q, sizeof(q), "%s/epoch1-step7/model.pt", f->dir);
  assert_true(same_file(p, q));
  snprintf(p, sizeof(p), "%s/epoch1-step7/shards/rank0.pt", f->dir2);
  snprintf(q, sizeof(q), "%s/epoch1-step7/shards/rank0.pt", f->dir);
  assert_true(same_file(p, q));
}

/* A DIR2 that cannot be made, opened or written: a failure whose reason
 * is the same from one checkpoint to the next (the agent warns once per
 * reason), with nothing left in DIR2. */
static void test_dir2_unwritable(void **state) {
  fx_t *f = *state;
  dr_persist_res_t r;
  char why[sizeof(r.why)];
  put_file(f->root, "file", 1, 0);
  snprintf(f->dir2, sizeof(f->dir2), "%s/file/persist", f->root);
  put_ckpt(f, "ckpt-0000000010.bin", 100, 1);
  assert_int_equal(copy_out(f, 3, NULL, &r), -ENOTDIR);
  assert_string_equal(r.name, "ckpt-0000000010.bin");
  assert_string_equal(r.why, "cannot open the directory (Not a directory)");
  snprintf(why, sizeof(why), "%s", r.why);
  put_ckpt(f, "ckpt-0000000020.bin", 100, 2);
  assert_int_equal(copy_out(f, 3, NULL, &r), -ENOTDIR);
  assert_string_equal(r.name, "ckpt-0000000020.bin");
  assert_string_equal(r.why, why);
  /* Gone: a mount point whose target went (a dangling link). */
  char p[700];
  snprintf(p, sizeof(p), "%s/mnt", f->root);
  assert_int_equal(symlink("gone/nfs", p), 0);
  snprintf(f->dir2, sizeof(f->dir2), "%s/mnt/persist", f->root);
  assert_int_equal(copy_out(f, 3, NULL, &r), -ENOENT);
  assert_string_equal(r.why, "cannot create the directory (No such file or "
                             "directory)");
  /* DIR2 full halfway through a file (the file-size limit stands in for
   * a full disk: the same write() that fails). */
  snprintf(f->dir2, sizeof(f->dir2), "%s/full", f->root);
  put_ckpt(f, "ckpt-0000000030.bin", 3u << 20, 3);
  struct rlimit was, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
  lim = was;
  lim.rlim_cur = 1u << 20;
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = copy_out(f, 3, NULL, &r);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_int_equal(rc, -EFBIG);
  assert_string_equal(r.why, "cannot write there (File too large)");
  char list[2000];
  assert_string_equal(entries(f->dir2, list, sizeof(list)), "");
  /* Read-only: only a user the mode binds (root writes anyway). */
  if (geteuid() != 0) {
    assert_int_equal(chmod(f->dir2, 0500), 0);
    assert_int_equal(copy_out(f, 3, NULL, &r), -EACCES);
    assert_string_equal(r.why, "cannot write there (Permission denied)");
    assert_int_equal(chmod(f->dir2, 0700), 0);
  }
}

/* While a copy is written, DIR2 shows it only under a hidden name: a
 * reader of DIR2 by the name rule never sees a part of a checkpoint. */
typedef struct {
  const fx_t *f;
  int calls, seen_partial, seen_name;
} peek_t;

static void peek(void *arg) {
  peek_t *k = arg;
  k->calls++;
  char list[2000];
  entries(k->f->dir2, list, sizeof(list));
  k->seen_partial += strncmp(list, ".ddprun-partial." HOST ".", 23) == 0;
  k->seen_name += strstr(list, "ckpt-0000000020.bin") != NULL;
  int fd = open(k->f->dir2, O_RDONLY | O_DIRECTORY);
  dr_ckpt_item_t *a;
  size_t n;
  assert_int_equal(dr_ckpt_list_at(fd, &a, &n), 0);
  close(fd);
  assert_int_equal(n, 1); /* the older one alone */
  assert_string_equal(a[0].name, "ckpt-0000000010.bin");
  free(a);
}

static void test_partial_never_visible(void **state) {
  fx_t *f = *state;
  dr_persist_res_t r;
  put_ckpt(f, "ckpt-0000000010.bin", 10, 1);
  assert_int_equal(copy_out(f, 3, NULL, &r), 0);
  put_ckpt(f, "ckpt-0000000020.bin", (7u << 20) / 2, 2);
  peek_t k = {f, 0, 0, 0};
  dr_ckpt_copy_io_t io = {NULL, 0, peek, &k};
  assert_int_equal(copy_out(f, 3, &io, &r), 0);
  assert_int_equal(k.calls, 4); /* 3.5 MiB in 1 MiB chunks */
  assert_int_equal(k.seen_partial, 4);
  assert_int_equal(k.seen_name, 0);
  char list[2000];
  assert_string_equal(entries(f->dir2, list, sizeof(list)),
                      "ckpt-0000000010.bin ckpt-0000000020.bin");
}

/* A cancelled copy, and one past its deadline, leave nothing; partial
 * copies that a killed agent of this host left go with the next copy,
 * those of live processes and of other hosts stay. */
static void test_cancel_and_stale_partials(void **state) {
  fx_t *f = *state;
  dr_persist_res_t r;
  put_ckpt(f, "ckpt-0000000010.bin", 3u << 20, 1);
  atomic_int cancel;
  atomic_init(&cancel, 1);
  dr_ckpt_copy_io_t io = {&cancel, 0, NULL, NULL};
  assert_int_equal(copy_out(f, 3, &io, &r), -ECANCELED);
  char list[2000];
  assert_string_equal(entries(f->dir2, list, sizeof(list)), "");
  atomic_store(&cancel, 0);
  io.deadline_ms = 1; /* long past */
  assert_int_equal(copy_out(f, 3, &io, &r), -ETIMEDOUT);
  assert_string_equal(entries(f->dir2, list, sizeof(list)), "");
  pid_t child = fork();
  if (child == 0)
    _exit(0);
  assert_int_equal(waitpid(child, NULL, 0), child);
  char dead[300], live[300], other[300], p[700];
  snprintf(dead, sizeof(dead), ".ddprun-partial." HOST ".%d.0", (int)child);
  snprintf(live, sizeof(live), ".ddprun-partial." HOST ".%d.0",
           (int)getppid());
  snprintf(other, sizeof(other), ".ddprun-partial.node-b.%d.0", (int)child);
  snprintf(p, sizeof(p), "%s/%s", f->dir2, dead);
  assert_int_equal(mkdir(p, 0700), 0);
  put_file(p, "x", 10, 0);
  put_file(f->dir2, live, 10, 0);
  put_file(f->dir2, other, 10, 0);
  assert_int_equal(copy_out(f, 3, NULL, &r), 0);
  assert_false(exists_in(f->dir2, dead));
  assert_true(exists_in(f->dir2, live));
  assert_true(exists_in(f->dir2, other));
  assert_true(exists_in(f->dir2, "ckpt-0000000010.bin"));
}

/* ---- the restore --------------------------------------------------------- */

/* An empty DIR gets DIR2's newest, whole, as this node's own (no line in
 * the origin index), renamed in as the store's copy (the watch can tell
 * it from the workers'); a DIR that holds one, a DIR2 that is missing or
 * empty: nothing. */
static void test_restore_into_empty_dir(void **state) {
  fx_t *f = *state;
  dr_persist_res_t r;
  assert_int_equal(dr_persist_restore(f->dir2, f->s, NULL, &r), 1);
  assert_int_equal(dr_ckpt_mkdirs(f->dir2), 0);
  assert_int_equal(dr_persist_restore(f->dir2, f->s, NULL, &r), 1);
  put_file(f->dir2, "ckpt-0000000010.bin", 5000, 1);
  put_file(f->dir2, "ckpt-0000000020.bin", 2200000, 2);
  put_file(f->dir2, ".ddprun-partial." HOST ".1.0", 10, 0);
  assert_int_equal(dr_persist_restore(f->dir2, f->s, NULL, &r), 0);
  assert_string_equal(r.name, "ckpt-0000000020.bin");
  assert_int_equal(r.step, 20);
  assert_int_equal(r.bytes, 2200000);
  assert_string_equal(r.why, "");
  char a[700], b[700], list[2000];
  snprintf(a, sizeof(a), "%s/ckpt-0000000020.bin", f->dir);
  snprintf(b, sizeof(b), "%s/ckpt-0000000020.bin", f->dir2);
  assert_true(same_file(a, b));
  assert_int_equal(dr_ckpt_store_newest(f->s), 20);
  assert_int_equal(dr_ckpt_store_origin(f->s, "ckpt-0000000020.bin"),
                   DR_CKPT_LOCAL);
  assert_int_equal(dr_ckpt_store_claim(f->s, "ckpt-0000000020.bin"), 0);
  snprintf(a, sizeof(a), "%s/.ddprun", f->dir);
  assert_string_equal(entries(a, list, sizeof(list)), "incoming lock");
  snprintf(a, sizeof(a), "%s/.ddprun/incoming", f->dir);
  assert_string_equal(entries(a, list, sizeof(list)), "");
  /* DIR holds one now. */
  assert_int_equal(dr_persist_restore(f->dir2, f->s, NULL, &r), 1);
}

/* A newest that cannot be read (a tree deeper than a checkpoint may be)
 * gives way to the next newest, and the restore says why. */
static void test_restore_falls_back(void **state) {
  fx_t *f = *state;
  dr_persist_res_t r;
  char p[1200];
  snprintf(p, sizeof(p), "%s/step_30", f->dir2);
  for (int i = 0; i <= DR_CKPT_DEPTH_MAX + 1; i++) {
    assert_int_equal(dr_ckpt_mkdirs(p), 0);
    strcat(p, "/d");
  }
  put_file(f->dir2, "step_20", 100, 2);
  assert_int_equal(dr_persist_restore(f->dir2, f->s, NULL, &r), 0);
  assert_string_equal(r.name, "step_20");
  assert_non_null(strstr(r.why, "cannot read step_30 there"));
  char list[2000];
  assert_string_equal(entries(f->dir, list, sizeof(list)),
                      ".ddprun step_20");
}

/* ---- the thread ---------------------------------------------------------- */

typedef struct {
  uv_loop_t loop;
  dr_persist_job_t got[8];
  int n;
} loop_fx_t;

static void on_done(void *arg, dr_persist_job_t *j) {
  loop_fx_t *l = arg;
  if (l->n < 8)
    l->got[l->n++] = *j;
  free(j);
}

static dr_persist_job_t *job(dr_persist_kind_t kind) {
  dr_persist_job_t *j = calloc(1, sizeof(*j));
  assert_non_null(j);
  j->kind = kind;
  return j;
}

/* Jobs in order, outcomes on the loop; the last copy at the end, after
 * what was queued before it, handed over first; no callback after stop. */
static void test_persister_thread(void **state) {
  fx_t *f = *state;
  loop_fx_t *l = calloc(1, sizeof(*l));
  assert_non_null(l);
  assert_int_equal(uv_loop_init(&l->loop), 0);
  dr_persist_cfg_t cfg = {f->s, f->dir2, HOST, 2};
  dr_persister_t *p;
  assert_int_equal(dr_ckpt_mkdirs(f->dir2), 0);
  put_file(f->dir2, "ckpt-0000000005.bin", 4000, 5);
  assert_int_equal(dr_persister_start(&l->loop, &cfg, on_done, l, &p), 0);
  dr_persister_submit(p, job(DR_PERSIST_RESTORE));
  dr_persister_submit(p, job(DR_PERSIST_COPY));
  while (l->n < 2)
    uv_run(&l->loop, UV_RUN_ONCE);
  assert_int_equal(l->got[0].kind, DR_PERSIST_RESTORE);
  assert_int_equal(l->got[0].rc, 0);
  assert_int_equal(l->got[0].res.step, 5);
  assert_int_equal(l->got[1].kind, DR_PERSIST_COPY);
  assert_int_equal(l->got[1].rc, 1); /* DIR2 holds it */
  put_ckpt(f, "ckpt-0000000010.bin", 3000000, 10);
  dr_persister_submit(p, job(DR_PERSIST_COPY));
  dr_persist_job_t last;
  assert_int_equal(dr_persister_last(p, 60000, &last), 0);
  /* The copy queued before it ran first, and was said first. */
  assert_int_equal(l->n, 3);
  assert_int_equal(l->got[2].kind, DR_PERSIST_COPY);
  assert_int_equal(l->got[2].rc, 0);
  assert_string_equal(l->got[2].res.name, "ckpt-0000000010.bin");
  assert_int_equal(last.rc, 1); /* DIR2 holds the newest already */
  assert_int_equal(last.res.step, 10);
  put_ckpt(f, "ckpt-0000000015.bin", 100, 15);
  assert_int_equal(dr_persister_last(p, 60000, &last), 0);
  assert_int_equal(last.rc, 0);
  assert_string_equal(last.res.name, "ckpt-0000000015.bin");
  assert_int_equal(l->n, 3);
  char list[2000];
  assert_string_equal(entries(f->dir2, list, sizeof(list)),
                      "ckpt-0000000010.bin ckpt-0000000015.bin");
  dr_persister_submit(p, job(DR_PERSIST_COPY));
  assert_int_equal(dr_persister_stop(&p), 0);
  assert_null(p);
  uv_run(&l->loop, UV_RUN_DEFAULT); /* the handle's close */
  assert_int_equal(l->n, 3);
  assert_int_equal(uv_loop_close(&l->loop), 0);
  free(l);
}

int main(void) {
#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_copy_out_and_retention),
      T(test_copy_out_directory),
      T(test_dir2_unwritable),
      T(test_partial_never_visible),
      T(test_cancel_and_stale_partials),
      T(test_restore_into_empty_dir),
      T(test_restore_falls_back),
      T(test_persister_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
