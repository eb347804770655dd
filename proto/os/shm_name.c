/* Shared-memory names and their clean-up: see shm_name.h. */
#include "shm_name.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#define DEFAULT_PREFIX "ddprun-"
#define SHM_DIR "/dev/shm"

static int name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

/* 1 when s is 1 to max characters of [A-Za-z0-9._-]. */
static int name_part(const char *s, size_t max) {
  size_t k = 0;
  for (; s[k] != '\0'; k++)
    if (k >= max || !name_char(s[k]))
      return 0;
  return k > 0;
}

static const char *prefix(void) {
  const char *p = getenv(DR_SHM_PREFIX_ENV);
  return p != NULL && name_part(p, DR_SHM_PREFIX_MAX) ? p : DEFAULT_PREFIX;
}

static int random_hex(char *out, size_t n_bytes) {
  static const char hex[] = "0123456789abcdef";
  uint8_t b[16];
  if (n_bytes > sizeof(b))
    return -EINVAL;
  size_t got = 0;
  while (got < n_bytes) {
    ssize_t k = getrandom(b + got, n_bytes - got, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -errno;
    got += (size_t)k;
  }
  for (size_t i = 0; i < n_bytes; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[2 * n_bytes] = '\0';
  return 0;
}

/* DDPRUN_SHM_TEST_TAKEN: how many of a call's names are taken first. */
static int test_taken(void) {
  const char *v = getenv("DDPRUN_SHM_TEST_TAKEN");
  long n = v != NULL ? strtol(v, NULL, 10) : 0;
  return n > 0 && n < 1000 ? (int)n : 0;
}

/* DDPRUN_SHM_TEST_KILL: dies here when the hook names this segment. */
static void test_kill(const char *tag, const char *name) {
  const char *v = getenv("DDPRUN_SHM_TEST_KILL");
  if (v == NULL || v[0] == '\0')
    return;
  const char *restarts = getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts != NULL && strtoul(restarts, NULL, 10) != 0)
    return;
  const char *colon = strchr(v, ':');
  size_t len = colon != NULL ? (size_t)(colon - v) : strlen(v);
  if (strncmp(tag, v, len) != 0)
    return;
  const char *rank = getenv("RANK");
  if (colon != NULL &&
      (rank == NULL || strtoul(rank, NULL, 10) != strtoul(colon + 1, NULL, 10)))
    return;
  char line[400];
  int k = snprintf(line, sizeof(line), "ddprun shm: test hook: %s created; "
                   "killing this process before anybody else knows its "
                   "name\n", name);
  if (k > 0)
    (void)!write(2, line, (size_t)k < sizeof(line) ? (size_t)k
                                                   : sizeof(line) - 1);
  raise(SIGKILL);
}

int dr_shm_create(char *name, size_t n, const char *tag,
                  dr_shm_create_fn create, void *arg, int *taken) {
  const char *pre = prefix();
  if (taken != NULL)
    *taken = 0;
  if (!name_part(tag, DR_SHM_TAG_MAX) ||
      n < 1 + strlen(pre) + 17 + strlen(tag) + 1)
    return -EINVAL;
  int squat = test_taken(), rc = -EEXIST;
  for (int i = 0; i < DR_SHM_NAME_TRIES && rc == -EEXIST; i++) {
    char digits[33];
    rc = random_hex(digits, 8);
    if (rc != 0)
      break;
    snprintf(name, n, "/%s%s-%s", pre, digits, tag);
    if (i < squat) {
      int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd >= 0)
        close(fd);
    }
    rc = create(name, arg);
    if (rc == -EEXIST && taken != NULL)
      (*taken)++;
  }
  if (rc == 0)
    test_kill(tag, name);
  return rc;
}

int dr_shm_prefix_new(char *buf, size_t n) {
  char digits[9];
  int rc = random_hex(digits, 4);
  if (rc != 0)
    return rc;
  int k = snprintf(buf, n, DEFAULT_PREFIX "%ld-%s-", (long)getpid(), digits);
  return k > 0 && (size_t)k < n && k <= DR_SHM_PREFIX_MAX ? 0 : -ENAMETOOLONG;
}

int dr_shm_remove_prefix(const char *pre) {
  size_t len = strlen(pre);
  if (len == 0)
    return -EINVAL;
  DIR *d = opendir(SHM_DIR);
  if (d == NULL)
    return errno == ENOENT ? 0 : -errno;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, pre, len) == 0 &&
        unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
  closedir(d);
  return removed;
}
