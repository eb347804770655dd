#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dr_log_level = DR_LOG_INFO;
static const char *log_prog = "ddprun";

void dr_log_init(const char *prog, dr_log_level_t level) {
  log_prog = prog;
  dr_log_level = (int)level;
}

int dr_log_parse_level(const char *s) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0)
      return i;
  return -1;
}

/* Formats a line after head (n bytes already in line) and writes it whole:
 * one write() keeps lines whole when several processes share a terminal. */
static void emit(char *line, size_t cap, int n, const char *fmt, va_list ap) {
  int m = vsnprintf(line + n, cap - (size_t)n - 1, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > cap - 2)
    len = cap - 2;
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}

void dr_log_write(dr_log_level_t level, const char *fmt, ...) {
  static const char *tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof(line), "%s %02d:%02d:%02d.%03ld %s ",
                   log_prog, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000, tags[level]);
  va_list ap;
  va_start(ap, fmt);
  emit(line, sizeof(line), n, fmt, ap);
  va_end(ap);
}

void dr_log_say(dr_log_level_t level, const char *fmt, ...) {
  (void)level; /* checked by DR_SAY */
  char line[4096];
  int n = snprintf(line, sizeof(line), "%s: ", log_prog);
  va_list ap;
  va_start(ap, fmt);
  emit(line, sizeof(line), n, fmt, ap);
  va_end(ap);
}

void dr_log_signal_safe(const char *msg) {
  size_t n = strlen(msg);
  ssize_t w = write(STDERR_FILENO, msg, n);
  (void)w;
}

char *dr_log_sample(const void *p, size_t n_bytes, char *out, size_t max_out) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = p;
  size_t o = 0;
  for (size_t i = 0; i < n_bytes && o + 5 < max_out; i++) {
    if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\') {
      out[o++] = (char)b[i];
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[b[i] >> 4];
      out[o++] = hex[b[i] & 15];
    }
  }
  if (max_out > 0)
    out[o < max_out ? o : max_out - 1] = '\0';
  return out;
}
