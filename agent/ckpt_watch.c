/* inotify on the checkpoint directory, on the agent's loop
 * (ckpt_watch.h). */
#include "ckpt_watch.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "ckpt_rules.h"
#include "log.h"

struct dr_ckpt_watch {
  uv_poll_t poll;
  int fd;
  dr_ckpt_watch_cb cb;
  void *arg;
  int gone_said;
};

static void on_readable(uv_poll_t *h, int status, int events) {
  dr_ckpt_watch_t *w = h->data;
  (void)events;
  if (status < 0)
    return;
  /* Aligned as inotify's records are. */
  char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t n = read(w->fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return; /* EAGAIN: all read */
    for (char *p = buf; p < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      p += sizeof(*ev) + ev->len;
      if (ev->mask & IN_Q_OVERFLOW) {
        w->cb(w->arg, NULL);
      } else if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) &&
                 !w->gone_said) {
        w->gone_said = 1;
        DR_SAY(DR_LOG_WARN, "the checkpoint directory was removed or "
               "moved: no more checkpoints are copied to peers");
      } else if ((ev->mask & IN_MOVED_TO) && ev->len > 0 &&
                 dr_ckpt_name_step(ev->name, NULL)) {
        w->cb(w->arg, ev->name);
      }
    }
  }
}

int dr_ckpt_watch_start(uv_loop_t *loop, const char *dir, dr_ckpt_watch_cb cb,
                        void *arg, dr_ckpt_watch_t **out) {
  *out = NULL;
  dr_ckpt_watch_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return -ENOMEM;
  w->cb = cb;
  w->arg = arg;
  w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  int rc = w->fd < 0 ? -errno : 0;
  if (rc == 0 &&
      inotify_add_watch(w->fd, dir, IN_MOVED_TO | IN_DELETE_SELF |
                                        IN_MOVE_SELF | IN_ONLYDIR) < 0)
    rc = -errno;
  if (rc == 0)
    rc = uv_poll_init(loop, &w->poll, w->fd);
  if (rc != 0) {
    if (w->fd >= 0)
      close(w->fd);
    free(w);
    return rc;
  }
  w->poll.data = w;
  uv_poll_start(&w->poll, UV_READABLE, on_readable);
  *out = w;
  return 0;
}

static void on_closed(uv_handle_t *h) {
  dr_ckpt_watch_t *w = h->data;
  close(w->fd);
  free(w);
}

void dr_ckpt_watch_stop(dr_ckpt_watch_t **wp) {
  dr_ckpt_watch_t *w = *wp;
  if (w == NULL)
    return;
  uv_poll_stop(&w->poll);
  uv_close((uv_handle_t *)&w->poll, on_closed);
  *wp = NULL;
}
