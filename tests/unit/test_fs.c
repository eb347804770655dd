/* proto/os/fs.c: mkdir -p, and opening only regular files without ever
 * blocking on a FIFO. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "errors.h"
#include "fs.h"

typedef struct {
  char dir[64];
  char path[PATH_MAX];
} fx_t;

static int setup(void **state) {
  fx_t *fx = calloc(1, sizeof(*fx));
  snprintf(fx->dir, sizeof(fx->dir), "/tmp/dr_test_fs.XXXXXX");
  if (fx == NULL || mkdtemp(fx->dir) == NULL)
    return -1;
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fx_t *fx = *state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", fx->dir);
  int rc = system(cmd);
  free(fx);
  return rc == 0 ? 0 : -1;
}

static const char *at(fx_t *fx, const char *name) {
  snprintf(fx->path, sizeof(fx->path), "%s/%s", fx->dir, name);
  return fx->path;
}

static void regular_file_is_read(void **state) {
  fx_t *fx = *state;
  FILE *f = fopen(at(fx, "r.ini"), "w");
  assert_non_null(f);
  fputs("steps = 3\n", f);
  fclose(f);
  int fd = dr_open_regular(at(fx, "r.ini"));
  assert_true(fd >= 0);
  assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  char buf[16] = {0};
  assert_int_equal(read(fd, buf, sizeof(buf) - 1), 10);
  assert_string_equal(buf, "steps = 3\n");
  close(fd);
}

/* A FIFO without a writer: a plain open() would wait forever; refused at
 * once (the test's own timeout catches a hang). */
static void fifo_is_refused(void **state) {
  fx_t *fx = *state;
  assert_int_equal(mkfifo(at(fx, "p"), 0600), 0);
  assert_int_equal(dr_open_regular(fx->path), DR_ENOTREG);
  assert_non_null(strstr(dr_strerror(DR_ENOTREG), "FIFO"));
}

static void socket_dir_and_missing(void **state) {
  fx_t *fx = *state;
  assert_int_equal(dr_open_regular(fx->dir), -EISDIR);
  assert_int_equal(dr_open_regular(at(fx, "none")), -ENOENT);
  assert_int_equal(dr_open_regular("/dev/null"), DR_ENOTREG);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  assert_true(strlen(at(fx, "s")) < sizeof(a.sun_path));
  memcpy(a.sun_path, fx->path, strlen(fx->path) + 1);
  assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
  assert_int_equal(dr_open_regular(fx->path), -ENXIO);
  close(s);
}

/* A link to a regular file is followed (a config file may be a link);
 * a link to a FIFO is refused as the FIFO is. */
static void links_are_followed(void **state) {
  fx_t *fx = *state;
  char target[PATH_MAX];
  FILE *f = fopen(at(fx, "t"), "w");
  assert_non_null(f);
  fclose(f);
  snprintf(target, sizeof(target), "%s", fx->path);
  assert_int_equal(symlink(target, at(fx, "l")), 0);
  int fd = dr_open_regular(fx->path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(mkfifo(at(fx, "p2"), 0600), 0);
  snprintf(target, sizeof(target), "%s", fx->path);
  assert_int_equal(symlink(target, at(fx, "l2")), 0);
  assert_int_equal(dr_open_regular(fx->path), DR_ENOTREG);
}

static void mkdirs_makes_parents(void **state) {
  fx_t *fx = *state;
  assert_int_equal(dr_mkdirs(at(fx, "a/b/c")), 0);
  struct stat st;
  assert_int_equal(stat(fx->path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(dr_mkdirs(fx->path), 0);
}

static void touch(const char *path, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(chmod(path, mode), 0);
}

/* As execvp() finds a program: the first runnable entry of PATH, a
 * directory or a file without execute permission passed over (-EACCES
 * when nothing else is found), an empty entry the working directory. */
static void programs_found_on_path(void **state) {
  fx_t *fx = *state;
  char a[128], b[128], c[128], path[512], out[PATH_MAX];
  snprintf(a, sizeof(a), "%s/a", fx->dir);
  snprintf(b, sizeof(b), "%s/b", fx->dir);
  snprintf(c, sizeof(c), "%s/c", fx->dir);
  assert_int_equal(dr_mkdirs(a), 0);
  assert_int_equal(dr_mkdirs(c), 0);
  touch(at(fx, "a/prog"), 0644);
  assert_int_equal(dr_mkdirs(at(fx, "b/prog")), 0);
  touch(at(fx, "c/prog"), 0755);

  snprintf(path, sizeof(path), "%s:%s:%s", a, b, c);
  assert_int_equal(dr_find_program("prog", path, out, sizeof(out)), 0);
  assert_string_equal(out, at(fx, "c/prog"));
  snprintf(path, sizeof(path), "%s:%s", a, b);
  assert_int_equal(dr_find_program("prog", path, out, sizeof(out)), -EACCES);
  assert_string_equal(out, "");
  assert_int_equal(dr_find_program("prog", "/nonexistent", out, sizeof(out)),
                   -ENOENT);
  assert_int_equal(dr_find_program("", path, out, sizeof(out)), -ENOENT);
  /* The shell's default PATH when there is none. */
  assert_int_equal(dr_find_program("sh", NULL, out, sizeof(out)), 0);
  assert_non_null(strstr(out, "/sh"));
  /* A name with a slash is itself. */
  assert_int_equal(dr_find_program(at(fx, "c/prog"), "", out, sizeof(out)),
                   0);
  assert_int_equal(dr_find_program(at(fx, "b/prog"), "", out, sizeof(out)),
                   -EACCES);
  assert_int_equal(dr_find_program(at(fx, "x/prog"), "", out, sizeof(out)),
                   -ENOENT);
  /* An empty entry, leading or trailing: the working directory. */
  char cwd[PATH_MAX];
  assert_non_null(getcwd(cwd, sizeof(cwd)));
  assert_int_equal(chdir(c), 0);
  snprintf(path, sizeof(path), "%s:", a);
  assert_int_equal(dr_find_program("prog", path, out, sizeof(out)), 0);
  assert_string_equal(out, "./prog");
  snprintf(path, sizeof(path), ":%s", a);
  assert_int_equal(dr_find_program("prog", path, out, sizeof(out)), 0);
  assert_string_equal(out, "./prog");
  assert_int_equal(chdir(cwd), 0);
  /* Too small for the path. */
  char tiny[8];
  snprintf(path, sizeof(path), "%s", c);
  assert_int_equal(dr_find_program("prog", path, tiny, sizeof(tiny)),
                   -ENAMETOOLONG);
}

/* A small file under a root, its trailing blanks cut, at most cap - 1
 * bytes. */
static void text_read_under_root(void **state) {
  fx_t *fx = *state;
  FILE *f = fopen(at(fx, "t"), "w");
  assert_non_null(f);
  fputs("Link Up \t\n\n", f);
  fclose(f);
  char buf[32];
  assert_int_equal(dr_read_text(fx->dir, "/t", buf, sizeof(buf)), 7);
  assert_string_equal(buf, "Link Up");
  assert_int_equal(dr_read_text("", at(fx, "t"), buf, sizeof(buf)), 7);
  char small[5];
  assert_int_equal(dr_read_text(fx->dir, "/t", small, sizeof(small)), 4);
  assert_string_equal(small, "Link");
  assert_int_equal(dr_read_text(fx->dir, "/none", buf, sizeof(buf)),
                   -ENOENT);
  assert_string_equal(buf, "");
  assert_int_equal(dr_read_text(fx->dir, "", buf, sizeof(buf)), -EISDIR);
}

/* A file replaced whole; a failure leaves no temporary. */
static void file_written_whole(void **state) {
  fx_t *fx = *state;
  char buf[32];
  assert_int_equal(dr_write_file(at(fx, "w"), "one\n", 4), 0);
  assert_int_equal(dr_read_text(fx->dir, "/w", buf, sizeof(buf)), 3);
  assert_string_equal(buf, "one");
  assert_int_equal(dr_write_file(at(fx, "w"), "second", 6), 0);
  assert_int_equal(dr_read_text(fx->dir, "/w", buf, sizeof(buf)), 6);
  assert_string_equal(buf, "second");
  assert_int_equal(dr_write_file(at(fx, "none/w"), "x", 1), -ENOENT);
  /* A directory in the way: the rename fails, the temporary goes. */
  assert_int_equal(dr_mkdirs(at(fx, "d/sub")), 0);
  assert_true(dr_write_file(at(fx, "d"), "x", 1) < 0);
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof(tmp), "%s/d.tmp.%ld", fx->dir, (long)getpid());
  assert_int_equal(access(tmp, F_OK), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(regular_file_is_read, setup, teardown),
      cmocka_unit_test_setup_teardown(fifo_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(socket_dir_and_missing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(links_are_followed, setup, teardown),
      cmocka_unit_test_setup_teardown(mkdirs_makes_parents, setup, teardown),
      cmocka_unit_test_setup_teardown(programs_found_on_path, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(text_read_under_root, setup, teardown),
      cmocka_unit_test_setup_teardown(file_written_whole, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
