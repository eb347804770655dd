/* One rank's trace as `ddprun diagnose` reads it: its steps, each step's
 * phases, the gradients' ready times and its collectives. The readers
 * (diag_read*.c) fill it from train's --trace files and from PyTorch
 * profiler Chrome traces; the analysis (diag_analyze.c) reads only this.
 *
 * Times are microseconds on the rank's own clock, as its trace has them;
 * clock_offset_us, when the trace knows it (train writes the offset its
 * agent measured), maps them onto the rendezvous server's clock:
 * server time = rank time + clock_offset_us. A field the trace does not
 * give is -1 (times) or 0 (sizes, counts), never a guess.
 */
#ifndef DR_DIAG_TRACE_H
#define DR_DIAG_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  DR_DG_ALLREDUCE,
  DR_DG_BROADCAST,
  DR_DG_ALLGATHER,
  DR_DG_REDUCE_SCATTER,
  DR_DG_BARRIER,
  DR_DG_OTHER
} dr_dg_kind_t;

typedef struct {
  dr_dg_kind_t kind;
  uint64_t n_bytes;  /* 0: the trace does not say */
  int bucket;        /* DDP's or train's bucket index, -1: unknown */
  double ready_us;   /* handed to communication (train: its last gradient
                        ready; PyTorch: c10d::allreduce_ called), or -1 */
  double start_us;   /* the communication itself */
  double end_us;
} dr_dg_coll_t;

/* One kind of op of a step's backward pass, its runs summed: PyTorch's
 * autograd function ("AddmmBackward0", from the event
 * "autograd::engine::evaluate_function: AddmmBackward0"), or a layer's
 * backward span in train's trace ("fc1.bwd"). Only the pass the step's
 * bwd_t0_us..bwd_t1_us spans counts (with gradient accumulation, the
 * last). */
#define DR_DG_OP_NAME 64
typedef struct {
  char name[DR_DG_OP_NAME]; /* cut to fit, on a character boundary;
                               control bytes made '?' */
  double self_us;  /* its runs' time less that of the backward ops nested
                      in them on their thread (a reentrant backward, as
                      activation checkpointing runs): a nested op counts
                      once, as itself. Host time: on a GPU, the time the
                      op took to launch its kernels, not theirs. */
  uint32_t n_runs;
} dr_dg_op_t;

typedef struct {
  uint64_t step;          /* as the trace numbers it (ProfilerStep#N) */
  double t0_us, t1_us;    /* the step: data, forward, backward, optimizer */
  double data_us;         /* time in data loading within it, 0 if none */
  double fwd_t0_us, fwd_t1_us; /* first forward op's start, last's end */
  double bwd_t0_us, bwd_t1_us; /* the backward pass */
  double opt_t0_us, opt_t1_us; /* the optimizer step */
  double *grad_ready_us;  /* ends of the backward ops that produce
                             gradients, ascending; n_grad of them */
  size_t n_grad;
  dr_dg_coll_t *colls;    /* in start order */
  size_t n_colls;
  dr_dg_op_t *bwd_ops;    /* one per name, in the order the trace first
                             names them; n_bwd_ops of them */
  size_t n_bwd_ops;
} dr_dg_step_t;

typedef struct {
  int rank;               /* from the trace; -1: unknown */
  int world;              /* 0: unknown */
  char source[16];        /* "train" or "torch" */
  char backend[16];       /* "gloo", "nccl", "cpu" (train's), or "" */
  char path[512];         /* the file it came from */
  double clock_offset_us; /* see above; 0 when unknown */
  int have_clock_offset;
  dr_dg_step_t *steps;    /* in time order */
  size_t n_steps;
  int no_shapes;          /* PyTorch's, profiled without record_shapes:
                             it has collectives, none with a size, and no
                             "Input Dims" on them */
  char note[256];         /* what the reader left out or could not tell,
                             "; "-separated ("no record_shapes: sizes
                             unknown"), "" when nothing */
} dr_dg_rank_t;

/* Reads one trace file (JSON, or gzip'd JSON), of either source. 0, or a
 * negative code with a one-line reason in err ("FILE: not a Chrome trace:
 * ...", "FILE: truncated JSON at line L"). A trace without steps or without
 * collectives still loads (the analysis says what is missing). */
int dr_dg_read(const char *path, dr_dg_rank_t *out, char *err, size_t errlen);

/* The same from a buffer (fuzzing, tests); name stands for the path. */
int dr_dg_read_buf(const void *buf, size_t n_bytes, const char *name,
                   dr_dg_rank_t *out, char *err, size_t errlen);

/* Frees what dr_dg_read put in *r (its steps and their arrays). */
void dr_dg_rank_free(dr_dg_rank_t *r);

#endif /* DR_DIAG_TRACE_H */
