/* The agent's checkpoint directory and its rules (agent/ckpt_rules.h,
 * agent/ckpt_store.h): the name rule, the paths a peer may send, the
 * token bucket's pace with the time passed in, the origin index, the
 * copies renamed in, retention per origin, and removal that never follows
 * a link. Each test works in a fresh directory under TMPDIR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_index.h"
#include "ckpt_rules.h"
#include "ckpt_store.h"
#include "errors.h"
#include "wire.h"

/* ---- the name rule ---------------------------------------------------- */

static void test_name_rule_steps(void **state) {
  (void)state;
  static const struct {
    const char *name;
    uint64_t step;
  } yes[] = {
      {"ckpt-0000000190.bin", 190},
      {"step_190.pt", 190},
      {"epoch3-step190", 190},
      {"190", 190},
      {"model-7.tar.gz", 7},
      {"a1b22c", 22},
      {"ckpt-0.pt", 0},
      {"v2.step9", 2}, /* the part before the first '.' */
      {"x18446744073709551614", 18446744073709551614ull},
  };
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
    uint64_t step = 0;
    assert_int_equal(dr_ckpt_name_step(yes[i].name, &step), 1);
    assert_int_equal(step, yes[i].step);
    assert_int_equal(dr_ckpt_wire_name((const uint8_t *)yes[i].name,
                                       strlen(yes[i].name), &step),
                     1);
    assert_int_equal(step, yes[i].step);
  }
}

static void test_name_rule_not_checkpoints(void **state) {
  (void)state;
  static const char *const no[] = {
      "",
      ".ckpt-0000000190.bin",           /* hidden: a temporary name */
      ".ddprun",
      "ckpt-0000000190.bin.tmp",        /* ends in .tmp */
      "ckpt-0000000190.bin.tmp.4242",   /* train's temporary file */
      "step190.tmp",
      "latest",                         /* no digits */
      "ckpt.190",                       /* digits only after the first '.' */
      "x18446744073709551615",          /* DR_NONE is not a step */
      "x99999999999999999999999",       /* does not fit */
  };
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
    uint64_t step = 77;
    assert_int_equal(dr_ckpt_name_step(no[i], &step), 0);
    assert_int_equal(step, 77);
    assert_int_equal(
        dr_ckpt_wire_name((const uint8_t *)no[i], strlen(no[i]), &step), 0);
  }
  assert_int_equal(dr_ckpt_name_step(NULL, NULL), 0);
  /* Off the wire: no '/', no control byte, no NUL, at most 255 bytes. */
  static const char *const wire_no[] = {"a/ckpt-1", "../ckpt-1", "ckpt-1\n",
                                        "ckpt\x7f-1"};
  for (size_t i = 0; i < sizeof(wire_no) / sizeof(wire_no[0]); i++)
    assert_int_equal(dr_ckpt_wire_name((const uint8_t *)wire_no[i],
                                       strlen(wire_no[i]), NULL),
                     0);
  static const uint8_t nul[] = {'c', '1', 0, 'x'};
  assert_int_equal(dr_ckpt_wire_name(nul, sizeof(nul), NULL), 0);
  char long_name[300];
  memset(long_name, 'a', sizeof(long_name));
  long_name[0] = '1';
  assert_int_equal(dr_ckpt_wire_name((uint8_t *)long_name, 255, NULL), 1);
  assert_int_equal(dr_ckpt_wire_name((uint8_t *)long_name, 256, NULL), 0);
}

/* ---- paths inside a directory checkpoint ------------------------------ */

static int path_ok(const char *p, int *depth) {
  return dr_ckpt_path_check((const uint8_t *)p, strlen(p), depth);
}

static void test_path_checks(void **state) {
  (void)state;
  int depth = 0;
  assert_int_equal(path_ok("a", &depth), 0);
  assert_int_equal(depth, 1);
  assert_int_equal(path_ok("shards/rank0/part-1.pt", &depth), 0);
  assert_int_equal(depth, 3);
  assert_int_equal(path_ok(".hidden/..x/x..", &depth), 0);
  static const char *const bad[] = {
      "", "/", "/etc/passwd", "a/", "a//b", "./a", "a/.", "..", "a/../b",
      "a/..", "../../etc", "a\nb", "a\x01" "b",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_equal(path_ok(bad[i], NULL), DR_EBADARG);
  static const uint8_t nul[] = {'a', 0, 'b'};
  assert_int_equal(dr_ckpt_path_check(nul, sizeof(nul), NULL), DR_EBADARG);
  /* Depth: DR_CKPT_DEPTH_MAX components pass, one more does not. */
  char deep[200] = "";
  for (int i = 0; i < DR_CKPT_DEPTH_MAX; i++)
    strcat(deep, i == 0 ? "d" : "/d");
  assert_int_equal(path_ok(deep, &depth), 0);
  assert_int_equal(depth, DR_CKPT_DEPTH_MAX);
  strcat(deep, "/d");
  assert_int_equal(path_ok(deep, NULL), DR_EBADARG);
  /* A component of 256 bytes is over NAME_MAX. */
  char wide[300];
  memset(wide, 'w', sizeof(wide));
  assert_int_equal(dr_ckpt_path_check((uint8_t *)wide, 255, NULL), 0);
  assert_int_equal(dr_ckpt_path_check((uint8_t *)wide, 256, NULL),
                   DR_EBADARG);
}

/* ---- the token bucket ------------------------------------------------- */

#define S 1000000000ull

static void test_token_bucket(void **state) {
  (void)state;
  dr_tbucket_t tb;
  /* 1000 B/s, 500 saved up at most, full at t = 0. */
  dr_tbucket_init(&tb, 1000, 500, 10 * S);
  assert_int_equal(dr_tbucket_take(&tb, 500, 10 * S), 0);
  /* Empty: 250 more wait a quarter of a second. */
  assert_int_equal(dr_tbucket_take(&tb, 250, 10 * S), S / 4);
  /* Taken as told, at 10.25 s the debt is paid; 1000 more wait 1 s. */
  assert_int_equal(dr_tbucket_take(&tb, 1000, 10 * S + S / 4), S);
  /* A long idle span saves no more than the burst. */
  assert_int_equal(dr_tbucket_take(&tb, 500, 100 * S), 0);
  assert_int_equal(dr_tbucket_take(&tb, 1, 100 * S), S / 1000);
  /* Over any span, what was let through is at most rate x span + burst:
   * 1 MiB chunks at 64 MiB/s, sent when told, for 10 simulated seconds. */
  dr_tbucket_init(&tb, 64u << 20, 1u << 20, 0);
  uint64_t now = 0, sent = 0;
  while (now < 10 * S) {
    now += dr_tbucket_take(&tb, 1u << 20, now);
    sent += 1u << 20;
    assert_true(sent <= (64ull << 20) * now / S + (2u << 20));
  }
  assert_true(sent >= (64ull << 20) * 10 - (2u << 20));
  /* Rate 0: no cap. */
  dr_tbucket_init(&tb, 0, 0, 0);
  assert_int_equal(dr_tbucket_take(&tb, UINT64_MAX / 2, 0), 0);
  /* A clock that goes back (it does not, but) adds nothing. */
  dr_tbucket_init(&tb, 1000, 1000, 5 * S);
  assert_int_equal(dr_tbucket_take(&tb, 1000, 4 * S), 0);
  assert_int_equal(dr_tbucket_take(&tb, 100, 4 * S), S / 10);
}

/* ---- the directory ---------------------------------------------------- */

typedef struct {
  char root[256]; /* a fresh directory */
  char dir[300];  /* root/ckpt, the checkpoint directory */
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return -1;
  const char *t = getenv("TMPDIR");
  snprintf(f->root, sizeof(f->root), "%s/test_ckpt_store.XXXXXX",
           t != NULL && t[0] != '\0' ? t : "/tmp");
  if (mkdtemp(f->root) == NULL) {
    free(f);
    return -1;
  }
  snprintf(f->dir, sizeof(f->dir), "%s/a/b/ckpt", f->root);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  assert_int_equal(dr_ckpt_rm_at(AT_FDCWD, f->root), 0);
  free(f);
  return 0;
}

/* Writes a file of n bytes at dir/name (relative to the fixture's DIR). */
static void put_file(const fx_t *f, const char *name, size_t n) {
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", f->dir, name);
  FILE *fp = fopen(p, "wb");
  assert_non_null(fp);
  for (size_t i = 0; i < n; i++)
    fputc((int)(i & 0xff), fp);
  assert_int_equal(fclose(fp), 0);
}

static int exists(const fx_t *f, const char *name) {
  char p[600];
  struct stat st;
  snprintf(p, sizeof(p), "%s/%s", f->dir, name);
  return lstat(p, &st) == 0;
}

static void test_open_makes_private_dir(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_t *s;
  char err[256];
  assert_int_equal(dr_ckpt_store_open(f->dir, 3, &s, err, sizeof(err)), 0);
  struct stat st;
  assert_int_equal(stat(f->dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  assert_int_equal(dr_ckpt_store_newest(s), DR_NONE);
  /* A second agent on the same directory is refused, with the reason. */
  dr_ckpt_store_t *s2;
  assert_int_not_equal(dr_ckpt_store_open(f->dir, 3, &s2, err, sizeof(err)),
                       0);
  assert_null(s2);
  assert_non_null(strstr(err, "in use by another ddprun"));
  dr_ckpt_store_close(&s);
  assert_null(s);
  /* Not creatable: a path under a regular file. */
  char bad[400];
  snprintf(bad, sizeof(bad), "%s/file", f->root);
  fclose(fopen(bad, "w"));
  strcat(bad, "/ckpt");
  assert_int_equal(dr_ckpt_store_open(bad, 3, &s2, err, sizeof(err)),
                   -ENOTDIR);
  assert_non_null(strstr(err, "cannot create --ckpt-dir"));
  assert_non_null(strstr(err, bad));
}

/* The inventory: checkpoints by the rule, files and directories, never
 * links, FIFOs or hidden and temporary names; newest first. */
static void test_inventory(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_t *s;
  char err[256];
  assert_int_equal(dr_ckpt_store_open(f->dir, 3, &s, err, sizeof(err)), 0);
  put_file(f, "ckpt-0000000010.bin", 10);
  put_file(f, "ckpt-0000000030.bin.tmp.77", 10);
  put_file(f, ".ckpt-0000000040.bin", 10);
  put_file(f, "notes.txt", 10);
  char p[600];
  snprintf(p, sizeof(p), "%s/epoch1-step20", f->dir);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/ckpt-0000000050.bin", f->dir);
  assert_int_equal(symlink("ckpt-0000000010.bin", p), 0);
  snprintf(p, sizeof(p), "%s/ckpt-0000000060.bin", f->dir);
  assert_int_equal(mkfifo(p, 0600), 0);
  dr_ckpt_item_t *a;
  size_t n;
  assert_int_equal(dr_ckpt_store_list(s, &a, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(a[0].name, "epoch1-step20");
  assert_int_equal(a[0].step, 20);
  assert_true(a[0].is_dir);
  assert_string_equal(a[1].name, "ckpt-0000000010.bin");
  assert_false(a[1].is_dir);
  assert_int_equal(a[1].origin, DR_CKPT_LOCAL);
  free(a);
  assert_int_equal(dr_ckpt_store_newest(s), 20);
  char name[300];
  uint32_t origin;
  assert_int_equal(
      dr_ckpt_store_find_step(s, 10, name, sizeof(name), &origin), 0);
  assert_string_equal(name, "ckpt-0000000010.bin");
  assert_int_equal(dr_ckpt_store_find_step(s, 50, name, sizeof(name),
                                           &origin),
                   DR_ENOTFOUND);
  int fd, is_dir;
  assert_int_equal(dr_ckpt_store_open_item(s, "ckpt-0000000050.bin", &fd,
                                           &is_dir),
                   DR_ENOTFOUND);
  assert_int_equal(dr_ckpt_store_open_item(s, "ckpt-0000000060.bin", &fd,
                                           &is_dir),
                   DR_ENOTFOUND);
  assert_int_equal(dr_ckpt_store_open_item(s, "epoch1-step20", &fd, &is_dir),
                   0);
  assert_true(is_dir);
  close(fd);
  dr_ckpt_store_close(&s);
}

/* A copy from a peer: written under incoming/, renamed in with its origin
 * recorded, never over an existing name; the watch can tell it from the
 * workers' own. */
static void test_commit_and_claim(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_t *s;
  char err[256], tmp[64];
  assert_int_equal(dr_ckpt_store_open(f->dir, 3, &s, err, sizeof(err)), 0);
  int dfd;
  assert_int_equal(dr_ckpt_store_incoming(s, tmp, sizeof(tmp), &dfd), 0);
  int fd = openat(dfd, "ckpt-0000000005.bin", O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "abc", 3), 3);
  close(fd);
  close(dfd);
  assert_false(exists(f, "ckpt-0000000005.bin"));
  assert_int_equal(dr_ckpt_store_commit(s, tmp, "ckpt-0000000005.bin", 4), 0);
  assert_true(exists(f, "ckpt-0000000005.bin"));
  assert_int_equal(dr_ckpt_store_origin(s, "ckpt-0000000005.bin"), 4);
  /* The watch sees the rename: this store's own, not the workers'. */
  assert_int_equal(dr_ckpt_store_claim(s, "ckpt-0000000005.bin"), 0);
  /* The workers then write the same name: theirs now. */
  assert_int_equal(dr_ckpt_store_claim(s, "ckpt-0000000005.bin"), 1);
  assert_int_equal(dr_ckpt_store_origin(s, "ckpt-0000000005.bin"),
                   DR_CKPT_LOCAL);
  /* Never over an existing entry. */
  assert_int_equal(dr_ckpt_store_incoming(s, tmp, sizeof(tmp), &dfd), 0);
  fd = openat(dfd, "ckpt-0000000005.bin", O_WRONLY | O_CREAT, 0600);
  close(fd);
  close(dfd);
  assert_int_equal(dr_ckpt_store_commit(s, tmp, "ckpt-0000000005.bin", 2),
                   -EEXIST);
  assert_int_equal(dr_ckpt_store_origin(s, "ckpt-0000000005.bin"),
                   DR_CKPT_LOCAL);
  char p[600];
  struct stat st;
  snprintf(p, sizeof(p), "%s/ckpt-0000000005.bin", f->dir);
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_size, 3);
  /* Nothing is left under incoming/. */
  snprintf(p, sizeof(p), "%s/.ddprun/incoming/%s", f->dir, tmp);
  assert_int_not_equal(lstat(p, &st), 0);
  dr_ckpt_store_close(&s);
}

/* The index survives the agent: reopened, and from the file itself. */
static void test_index_persists(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_t *s;
  char err[256], tmp[64];
  assert_int_equal(dr_ckpt_store_open(f->dir, 3, &s, err, sizeof(err)), 0);
  int dfd;
  assert_int_equal(dr_ckpt_store_incoming(s, tmp, sizeof(tmp), &dfd), 0);
  assert_int_equal(mkdirat(dfd, "step_7", 0700), 0);
  close(dfd);
  assert_int_equal(dr_ckpt_store_commit(s, tmp, "step_7", 1), 0);
  dr_ckpt_store_close(&s);
  assert_int_equal(dr_ckpt_store_open(f->dir, 3, &s, err, sizeof(err)), 0);
  assert_int_equal(dr_ckpt_store_origin(s, "step_7"), 1);
  dr_ckpt_store_close(&s);
  char p[600];
  snprintf(p, sizeof(p), "%s/.ddprun", f->dir);
  int meta = open(p, O_RDONLY | O_DIRECTORY);
  assert_true(meta >= 0);
  dr_ckpt_index_t x;
  assert_int_equal(dr_ckpt_index_load(&x, meta), 0);
  assert_int_equal(x.n, 1);
  assert_int_equal(dr_ckpt_index_get(&x, "step_7"), 1);
  assert_int_equal(dr_ckpt_index_get(&x, "step_8"), DR_CKPT_LOCAL);
  /* Lines that are not "<rank> <checkpoint name>" are skipped. */
  FILE *fp = fopen(strcat(p, "/origins"), "a");
  fputs("x step_9\n4294967295 step_9\n3 ../step_9\n3 .hidden9\n5\n"
        "6 ckpt-9.bin\n", fp);
  fclose(fp);
  dr_ckpt_index_free(&x);
  assert_int_equal(dr_ckpt_index_load(&x, meta), 0);
  assert_int_equal(x.n, 2);
  assert_int_equal(dr_ckpt_index_get(&x, "ckpt-9.bin"), 6);
  assert_int_equal(dr_ckpt_index_drop(&x, "ckpt-9.bin"), 1);
  assert_int_equal(dr_ckpt_index_drop(&x, "ckpt-9.bin"), 0);
  assert_int_equal(dr_ckpt_index_save(&x, meta), 0);
  dr_ckpt_index_free(&x);
  assert_int_equal(dr_ckpt_index_load(&x, meta), 0);
  assert_int_equal(x.n, 1);
  dr_ckpt_index_free(&x);
  close(meta);
}

static void commit_from(dr_ckpt_store_t *s, const char *name,
                        uint32_t origin) {
  char tmp[64];
  int dfd;
  assert_int_equal(dr_ckpt_store_incoming(s, tmp, sizeof(tmp), &dfd), 0);
  int fd = openat(dfd, name, O_WRONLY | O_CREAT, 0600);
  assert_true(fd >= 0);
  close(fd);
  close(dfd);
  assert_int_equal(dr_ckpt_store_commit(s, tmp, name, origin), 0);
}

/* Retention: the newest K of each origin stay, whatever the others. */
static void test_retention_per_origin(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_t *s;
  char err[256], name[64];
  assert_int_equal(dr_ckpt_store_open(f->dir, 2, &s, err, sizeof(err)), 0);
  for (int st = 1; st <= 4; st++) {
    snprintf(name, sizeof(name), "ckpt-%010d.bin", st * 10);
    put_file(f, name, 4);
  }
  /* Node 1's steps 5..8 and node 2's step 1, received one by one. */
  for (int st = 5; st <= 8; st++) {
    snprintf(name, sizeof(name), "from1-%d", st);
    commit_from(s, name, 1);
  }
  commit_from(s, "from2-1", 2);
  assert_true(dr_ckpt_store_retain(s, UINT64_MAX) >= 0);
  static const char *const kept[] = {"ckpt-0000000040.bin",
                                     "ckpt-0000000030.bin", "from1-8",
                                     "from1-7", "from2-1"};
  static const char *const gone[] = {"ckpt-0000000020.bin",
                                     "ckpt-0000000010.bin", "from1-6",
                                     "from1-5"};
  for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
    assert_true(exists(f, kept[i]));
  for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
    assert_false(exists(f, gone[i]));
  /* The index forgot what was removed. */
  assert_int_equal(dr_ckpt_store_origin(s, "from1-5"), DR_CKPT_LOCAL);
  assert_int_equal(dr_ckpt_store_origin(s, "from1-8"), 1);
  dr_ckpt_store_close(&s);
}

/* A checkpoint later than the one just written (another run's, or one
 * damaged under a later name) neither goes nor counts: the job keeps the
 * newest K it can resume from. */
static void test_retention_upto(void **state) {
  fx_t *f = *state;
  dr_ckpt_store_t *s;
  char err[256], name[64];
  assert_int_equal(dr_ckpt_store_open(f->dir, 2, &s, err, sizeof(err)), 0);
  put_file(f, "step_9999.pt", 4);
  for (int st = 1; st <= 3; st++) {
    snprintf(name, sizeof(name), "ckpt-%010d.pt", st * 3);
    put_file(f, name, 4);
  }
  assert_int_equal(dr_ckpt_store_retain(s, 9), 1);
  assert_true(exists(f, "step_9999.pt"));
  assert_true(exists(f, "ckpt-0000000009.pt"));
  assert_true(exists(f, "ckpt-0000000006.pt"));
  assert_false(exists(f, "ckpt-0000000003.pt"));
  /* A commit retains up to its own step. */
  commit_from(s, "ckpt-0000000012.pt", DR_CKPT_LOCAL);
  commit_from(s, "ckpt-0000000015.pt", DR_CKPT_LOCAL);
  commit_from(s, "ckpt-0000000018.pt", DR_CKPT_LOCAL);
  assert_true(exists(f, "step_9999.pt"));
  assert_false(exists(f, "ckpt-0000000012.pt"));
  assert_true(exists(f, "ckpt-0000000015.pt"));
  assert_true(exists(f, "ckpt-0000000018.pt"));
  /* Without a bound the later one counts, as before. */
  assert_int_equal(dr_ckpt_store_retain(s, UINT64_MAX), 1);
  assert_true(exists(f, "step_9999.pt"));
  assert_true(exists(f, "ckpt-0000000018.pt"));
  assert_false(exists(f, "ckpt-0000000015.pt"));
  dr_ckpt_store_close(&s);
}

/* Removal of a directory checkpoint never follows a link out of it. */
static void test_rm_never_follows_links(void **state) {
  fx_t *f = *state;
  char p[700], outside[600];
  snprintf(outside, sizeof(outside), "%s/outside", f->root);
  assert_int_equal(mkdir(outside, 0700), 0);
  snprintf(p, sizeof(p), "%s/keep.txt", outside);
  fclose(fopen(p, "w"));
  snprintf(p, sizeof(p), "%s/victim", f->root);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/victim/sub", f->root);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(p, sizeof(p), "%s/victim/sub/link", f->root);
  assert_int_equal(symlink(outside, p), 0);
  snprintf(p, sizeof(p), "%s/victim/sub/file", f->root);
  fclose(fopen(p, "w"));
  int root = open(f->root, O_RDONLY | O_DIRECTORY);
  assert_int_equal(dr_ckpt_rm_at(root, "victim"), 0);
  assert_int_equal(dr_ckpt_rm_at(root, "victim"), 0); /* gone: fine */
  close(root);
  struct stat st;
  snprintf(p, sizeof(p), "%s/victim", f->root);
  assert_int_not_equal(lstat(p, &st), 0);
  snprintf(p, sizeof(p), "%s/keep.txt", outside);
  assert_int_equal(lstat(p, &st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_name_rule_steps),
      cmocka_unit_test(test_name_rule_not_checkpoints),
      cmocka_unit_test(test_path_checks),
      cmocka_unit_test(test_token_bucket),
      cmocka_unit_test_setup_teardown(test_open_makes_private_dir, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_inventory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_commit_and_claim, setup, teardown),
      cmocka_unit_test_setup_teardown(test_index_persists, setup, teardown),
      cmocka_unit_test_setup_teardown(test_retention_per_origin, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_retention_upto, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rm_never_follows_links, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
