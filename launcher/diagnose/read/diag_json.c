/* A checking JSON lexer over a buffer (see diag_read_internal.h for why it
 * exists beside jansson). It accepts what RFC 8259 accepts and jansson
 * accepts, up to DR__JS_MAX_DEPTH levels of nesting: no comments, no
 * trailing commas, no NaN, strings in valid UTF-8 without raw control
 * bytes, \u escapes with their surrogates paired. Numbers go through
 * strtod, so the decimal point is the C locale's: ddprun never calls
 * setlocale. Nothing here allocates except a number longer than 63 bytes.
 */
#include "diag_read_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

void dr__js_init(dr__js_t *js, const char *buf, size_t n, char *err,
                 size_t errlen) {
  js->p = js->start = buf;
  js->end = buf + n;
  js->line = 1;
  js->depth = 0;
  js->err = err;
  js->errlen = errlen;
  if (err != NULL && errlen > 0)
    err[0] = '\0';
}

int dr__js_fail(dr__js_t *js, const char *what) {
  if (js->err != NULL && js->errlen > 0 && js->err[0] == '\0') {
    if (js->p >= js->end)
      snprintf(js->err, js->errlen, "truncated JSON at line %u", js->line);
    else
      snprintf(js->err, js->errlen, "invalid JSON at line %u: %s", js->line,
               what);
  }
  return -EINVAL;
}

void dr__js_ws(dr__js_t *js) {
  const char *p = js->p, *end = js->end;
  if (p < end && (unsigned char)*p > ' ')
    return; /* the common case: none */
  while (p < end) {
    char c = *p;
    if (c == '\n')
      js->line++;
    else if (c != ' ' && c != '\t' && c != '\r')
      break;
    p++;
  }
  js->p = p;
}

int dr__js_peek(dr__js_t *js) {
  dr__js_ws(js);
  return js->p < js->end ? (unsigned char)*js->p : -1;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* The four hex digits at p (p + 4 <= end checked by the caller). */
static long hex4(const char *p) {
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval((unsigned char)p[i]);
    if (h < 0)
      return -1;
    v = v * 16 + h;
  }
  return v;
}

/* Length of the UTF-8 sequence at p, or 0 when it is not one (overlong,
 * a surrogate, above U+10FFFF, cut off). */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n;
  unsigned min;
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n)
    return 0;
  unsigned v = c & (0x3f >> (n - 1));
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    v = (v << 6) | (p[i] & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
    return 0;
  return n;
}

int dr__js_string(dr__js_t *js, const char **raw, size_t *raw_len,
                  int *escaped) {
  dr__js_ws(js);
  if (js->p >= js->end || *js->p != '"')
    return dr__js_fail(js, "expected a string");
  const unsigned char *p = (const unsigned char *)js->p + 1;
  const unsigned char *end = (const unsigned char *)js->end;
  const unsigned char *s = p;
  int esc = 0;
  for (;;) {
    while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80)
      p++;
    if (p >= end) {
      js->p = js->end;
      return dr__js_fail(js, "unterminated string");
    }
    unsigned c = *p;
    if (c == '"')
      break;
    if (c < 0x20) {
      js->p = (const char *)p;
      return dr__js_fail(js, "control character in a string");
    }
    if (c >= 0x80) {
      size_t k = utf8_len(p, end);
      if (k == 0) {
        js->p = (const char *)p;
        return dr__js_fail(js, "invalid UTF-8 in a string");
      }
      p += k;
      continue;
    }
    /* A backslash. */
    esc = 1;
    if (end - p < 2) {
      js->p = js->end;
      return dr__js_fail(js, "unterminated string");
    }
    c = p[1];
    if (c != 'u') {
      if (strchr("\"\\/bfnrt", (int)c) == NULL || c == 0) {
        js->p = (const char *)p;
        return dr__js_fail(js, "invalid escape in a string");
      }
      p += 2;
      continue;
    }
    if (end - p < 6) {
      js->p = js->end;
      return dr__js_fail(js, "unterminated string");
    }
    long u = hex4((const char *)p + 2);
    if (u < 0) {
      js->p = (const char *)p;
      return dr__js_fail(js, "invalid \\u escape");
    }
    p += 6;
    if (u >= 0xdc00 && u <= 0xdfff) {
      js->p = (const char *)p;
      return dr__js_fail(js, "unpaired surrogate in a \\u escape");
    }
    if (u >= 0xd800 && u <= 0xdbff) {
      if (end - p < 6 || p[0] != '\\' || p[1] != 'u') {
        js->p = (const char *)(p < end ? p : end);
        return p < end ? dr__js_fail(js, "unpaired surrogate in a \\u escape")
                       : dr__js_fail(js, "unterminated string");
      }
      long lo = hex4((const char *)p + 2);
      if (lo < 0xdc00 || lo > 0xdfff) {
        js->p = (const char *)p;
        return dr__js_fail(js, "unpaired surrogate in a \\u escape");
      }
      p += 6;
    }
  }
  *raw = (const char *)s;
  *raw_len = (size_t)(p - s);
  *escaped = esc;
  js->p = (const char *)p + 1;
  return 0;
}

static int is_digit(const char *p, const char *end) {
  return p < end && *p >= '0' && *p <= '9';
}

/* Checks the number at js->p and steps over it; its bytes in *s, *n. */
static int lex_number(dr__js_t *js, const char **s, size_t *n) {
  dr__js_ws(js);
  const char *p = js->p, *end = js->end;
  *s = p;
  if (p < end && *p == '-')
    p++;
  if (!is_digit(p, end)) {
    js->p = p;
    return dr__js_fail(js, "expected a number");
  }
  if (*p == '0')
    p++;
  else
    while (is_digit(p, end))
      p++;
  if (p < end && *p == '.') {
    p++;
    if (!is_digit(p, end)) {
      js->p = p;
      return dr__js_fail(js, "expected a digit after '.'");
    }
    while (is_digit(p, end))
      p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-'))
      p++;
    if (!is_digit(p, end)) {
      js->p = p;
      return dr__js_fail(js, "expected a digit in an exponent");
    }
    while (is_digit(p, end))
      p++;
  }
  *n = (size_t)(p - *s);
  js->p = p;
  return 0;
}

/* Exact when the digits make an integer below 2^53 and the point is at
 * most 22 places in: m and 10^k are then doubles exactly, and IEEE
 * division rounds m / 10^k correctly, as strtod does (Clinger's fast
 * path). -1 for anything else. */
static int fast_number(const char *s, size_t n, double *v) {
  static const double pow10[23] = {
      1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char *p = s, *end = s + n;
  int neg = p < end && *p == '-';
  p += neg;
  uint64_t m = 0;
  int frac = -1, digits = 0;
  for (; p < end; p++) {
    if (*p == '.') {
      frac = 0;
      continue;
    }
    if (*p < '0' || *p > '9')
      return -1; /* an exponent */
    m = m * 10 + (uint64_t)(*p - '0');
    if (++digits > 16 || m >= ((uint64_t)1 << 53))
      return -1;
    if (frac >= 0)
      frac++;
  }
  if (frac > 22)
    return -1;
  double d = (double)m;
  if (frac > 0)
    d /= pow10[frac];
  *v = neg ? -d : d;
  return 0;
}

int dr__js_number(dr__js_t *js, double *v) {
  const char *s;
  size_t n;
  int rc = lex_number(js, &s, &n);
  if (rc != 0)
    return rc;
  return dr__js_number_text(s, n, v);
}

int dr__js_lex_number(dr__js_t *js, const char **s, size_t *n) {
  return lex_number(js, s, n);
}

int dr__js_number_text(const char *s, size_t n, double *v) {
  if (fast_number(s, n, v) == 0)
    return 0;
  char small[64], *tok = small;
  if (n >= sizeof(small)) {
    tok = malloc(n + 1);
    if (tok == NULL)
      return -ENOMEM;
  }
  memcpy(tok, s, n);
  tok[n] = '\0';
  double d = strtod(tok, NULL);
  if (tok != small)
    free(tok);
  *v = isinf(d) ? NAN : d;
  return 0;
}

static int literal(dr__js_t *js, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(js->end - js->p) < n) {
    if (memcmp(js->p, word, (size_t)(js->end - js->p)) == 0) {
      js->p = js->end;
      return dr__js_fail(js, "");
    }
    return dr__js_fail(js, "unexpected word");
  }
  if (memcmp(js->p, word, n) != 0)
    return dr__js_fail(js, "unexpected character");
  js->p += n;
  return 0;
}

/* One value that is not a container. */
static int scalar(dr__js_t *js) {
  const char *raw;
  size_t len;
  int esc;
  switch (*js->p) {
  case '"':
    return dr__js_string(js, &raw, &len, &esc);
  case 't':
    return literal(js, "true");
  case 'f':
    return literal(js, "false");
  case 'n':
    return literal(js, "null");
  default:
    return lex_number(js, &raw, &len);
  }
}

static int too_deep(dr__js_t *js) {
  if (js->err != NULL && js->errlen > 0 && js->err[0] == '\0')
    snprintf(js->err, js->errlen,
             "invalid JSON at line %u: nested deeper than %d levels",
             js->line, DR__JS_MAX_DEPTH);
  return -EINVAL;
}

int dr__js_skip(dr__js_t *js) {
  /* The open containers, innermost last: '{' or '['. */
  char stack[DR__JS_MAX_DEPTH];
  int sp = 0, rc;
  enum { VALUE, KEY, AFTER } want = VALUE;
  for (;;) {
    dr__js_ws(js);
    if (js->p >= js->end)
      return dr__js_fail(js, "");
    char c = *js->p;
    if (want == KEY) {
      const char *raw;
      size_t len;
      int esc;
      if ((rc = dr__js_string(js, &raw, &len, &esc)) != 0)
        return rc;
      dr__js_ws(js);
      if (js->p >= js->end)
        return dr__js_fail(js, "");
      if (*js->p != ':')
        return dr__js_fail(js, "expected ':' after a key");
      js->p++;
      want = VALUE;
    } else if (want == VALUE) {
      if (c == '{' || c == '[') {
        if (js->depth + sp >= DR__JS_MAX_DEPTH)
          return too_deep(js);
        stack[sp++] = c;
        js->p++;
        dr__js_ws(js);
        if (js->p < js->end && *js->p == (c == '{' ? '}' : ']')) {
          js->p++;
          sp--;
          want = AFTER;
        } else {
          want = c == '{' ? KEY : VALUE;
        }
      } else {
        if ((rc = scalar(js)) != 0)
          return rc;
        want = AFTER;
      }
    } else {
      if (sp == 0)
        return 0;
      char open = stack[sp - 1];
      if (c == ',') {
        js->p++;
        want = open == '{' ? KEY : VALUE;
      } else if (c == (open == '{' ? '}' : ']')) {
        js->p++;
        sp--;
      } else {
        return dr__js_fail(js, open == '{' ? "expected ',' or '}'"
                                           : "expected ',' or ']'");
      }
    }
    if (want == AFTER && sp == 0)
      return 0;
  }
}

int dr__js_obj_open(dr__js_t *js) {
  dr__js_ws(js);
  if (js->p >= js->end)
    return dr__js_fail(js, "");
  if (*js->p != '{')
    return dr__js_fail(js, "expected '{'");
  if (js->depth >= DR__JS_MAX_DEPTH)
    return too_deep(js);
  js->p++;
  js->depth++;
  return 0;
}

int dr__js_arr_open(dr__js_t *js) {
  dr__js_ws(js);
  if (js->p >= js->end)
    return dr__js_fail(js, "");
  if (*js->p != '[')
    return dr__js_fail(js, "expected '['");
  if (js->depth >= DR__JS_MAX_DEPTH)
    return too_deep(js);
  js->p++;
  js->depth++;
  return 0;
}

/* Before the next member or element: 1 more follows, 0 closed. */
static int next(dr__js_t *js, int first, char close) {
  dr__js_ws(js);
  if (js->p >= js->end)
    return dr__js_fail(js, "");
  if (*js->p == close) {
    js->p++;
    js->depth--;
    return 0;
  }
  if (first)
    return 1;
  if (*js->p != ',')
    return dr__js_fail(js, close == '}' ? "expected ',' or '}'"
                                        : "expected ',' or ']'");
  js->p++;
  return 1;
}

int dr__js_obj_next(dr__js_t *js, int first, const char **key,
                    size_t *key_len, int *escaped) {
  int rc = next(js, first, '}');
  if (rc <= 0)
    return rc;
  if ((rc = dr__js_string(js, key, key_len, escaped)) != 0)
    return rc;
  dr__js_ws(js);
  if (js->p >= js->end)
    return dr__js_fail(js, "");
  if (*js->p != ':')
    return dr__js_fail(js, "expected ':' after a key");
  js->p++;
  return 1;
}

int dr__js_arr_next(dr__js_t *js, int first) {
  int rc = next(js, first, ']');
  if (rc <= 0)
    return rc;
  /* A trailing comma: "[1,]". */
  dr__js_ws(js);
  if (js->p < js->end && *js->p == ']')
    return dr__js_fail(js, "a value expected after ','");
  return 1;
}

int dr__js_is(const char *raw, size_t raw_len, int escaped, const char *s) {
  return !escaped && strlen(s) == raw_len && memcmp(raw, s, raw_len) == 0;
}

/* Writes code point u as UTF-8 if all of it fits before out + cap - 1. */
static size_t put_utf8(unsigned long u, char *out, size_t o, size_t cap) {
  char b[4];
  size_t n;
  if (u < 0x80) {
    b[0] = (char)u;
    n = 1;
  } else if (u < 0x800) {
    b[0] = (char)(0xc0 | (u >> 6));
    b[1] = (char)(0x80 | (u & 0x3f));
    n = 2;
  } else if (u < 0x10000) {
    b[0] = (char)(0xe0 | (u >> 12));
    b[1] = (char)(0x80 | ((u >> 6) & 0x3f));
    b[2] = (char)(0x80 | (u & 0x3f));
    n = 3;
  } else {
    b[0] = (char)(0xf0 | (u >> 18));
    b[1] = (char)(0x80 | ((u >> 12) & 0x3f));
    b[2] = (char)(0x80 | ((u >> 6) & 0x3f));
    b[3] = (char)(0x80 | (u & 0x3f));
    n = 4;
  }
  if (o + n >= cap)
    return 0;
  memcpy(out + o, b, n);
  return n;
}

size_t dr__js_unescape(const char *raw, size_t raw_len, char *out,
                       size_t cap) {
  if (cap == 0)
    return 0;
  size_t o = 0, i = 0;
  while (i < raw_len) {
    unsigned char c = (unsigned char)raw[i];
    if (c != '\\') {
      size_t k = utf8_len((const unsigned char *)raw + i,
                          (const unsigned char *)raw + raw_len);
      if (k == 0)
        k = 1; /* not from dr__js_string; copy as it is */
      if (o + k >= cap)
        break;
      memcpy(out + o, raw + i, k);
      o += k;
      i += k;
      continue;
    }
    if (i + 1 >= raw_len)
      break;
    char e = raw[i + 1];
    unsigned long u;
    i += 2;
    switch (e) {
    case 'b':
      u = '\b';
      break;
    case 'f':
      u = '\f';
      break;
    case 'n':
      u = '\n';
      break;
    case 'r':
      u = '\r';
      break;
    case 't':
      u = '\t';
      break;
    case 'u': {
      if (i + 4 > raw_len)
        goto done;
      long h = hex4(raw + i);
      if (h < 0)
        goto done;
      i += 4;
      u = (unsigned long)h;
      if (u >= 0xd800 && u <= 0xdbff && i + 6 <= raw_len &&
          raw[i] == '\\' && raw[i + 1] == 'u') {
        long lo = hex4(raw + i + 2);
        if (lo >= 0xdc00 && lo <= 0xdfff) {
          u = 0x10000 + ((u - 0xd800) << 10) + ((unsigned long)lo - 0xdc00);
          i += 6;
        }
      }
      break;
    }
    default:
      u = (unsigned char)e;
      break;
    }
    size_t k = put_utf8(u, out, o, cap);
    if (k == 0)
      break;
    o += k;
  }
done:
  out[o] = '\0';
  return o;
}
