/* The watch of the checkpoint directory: inotify on the agent's loop (a
 * uv_poll on its descriptor; nothing polls the directory). A checkpoint
 * is complete when it appears by rename (IN_MOVED_TO): what is created in
 * place, or written inside DIR/.ddprun, is never reported. Loop thread
 * only.
 */
#ifndef DR_CKPT_WATCH_H
#define DR_CKPT_WATCH_H

#include <uv.h>

typedef struct dr_ckpt_watch dr_ckpt_watch_t;

/* name: an entry renamed into DIR whose name is a checkpoint's (borrowed
 * until the callback returns); NULL when the kernel dropped events (its
 * queue overflowed): the callee looks at DIR itself. */
typedef void (*dr_ckpt_watch_cb)(void *arg, const char *name);

/* Starts watching dir. 0 and *out, or -errno (no callback will come). */
int dr_ckpt_watch_start(uv_loop_t *loop, const char *dir, dr_ckpt_watch_cb cb,
                        void *arg, dr_ckpt_watch_t **out);

/* Stops; no callback after this. The memory goes once the loop has closed
 * the handle. Sets *w to NULL. */
void dr_ckpt_watch_stop(dr_ckpt_watch_t **w);

#endif /* DR_CKPT_WATCH_H */
