/* Worker placement: how many workers a node runs (--nproc-per-node auto,
 * cpu, gpu) and which CPUs and GPU each local rank gets (--cpu-bind,
 * --gpu-bind). Reads /proc, /sys and the environment; never logs. */
#ifndef DR_BIND_H
#define DR_BIND_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

/* The most workers one node runs. */
#define DR_MAX_LOCAL 1024

typedef enum {
  DR_NPROC_NUMBER, /* nproc_per_node holds the count */
  DR_NPROC_AUTO,   /* GPUs if any, else CPUs */
  DR_NPROC_CPU,    /* CPUs this process may run on */
  DR_NPROC_GPU     /* visible GPUs; an error when there are none */
} dr_nproc_kind_t;

typedef enum { DR_GPU_BIND_NONE, DR_GPU_BIND_ISOLATE } dr_gpu_bind_t;
typedef enum { DR_CPU_BIND_NONE, DR_CPU_BIND_AUTO, DR_CPU_BIND_LIST } dr_cpu_bind_t;

/* What placement follows (--nproc-per-node, --cpu-bind, --gpu-bind). */
typedef struct {
  dr_nproc_kind_t nproc_kind;
  uint32_t nproc_per_node;  /* the count, for DR_NPROC_NUMBER */
  dr_cpu_bind_t cpu_bind;
  const char *cpu_list;     /* the LIST of --cpu-bind LIST, else NULL */
  dr_gpu_bind_t gpu_bind;
} dr_bind_opts_t;

/* GPUs this process may use: the entries of CUDA_VISIBLE_DEVICES when it
 * is set (an empty value means none; as for CUDA, the list ends at an
 * empty entry or one starting with '-', so "-1" means none), else the
 * NVIDIA devices listed under /proc/driver/nvidia/gpus. 0 when there are
 * none. */
int dr_bind_count_gpus(void);

/* CPUs in this process's affinity mask (sched_getaffinity). */
int dr_bind_count_cpus(void);

/* Resolves --nproc-per-node: a number stays (DR_EBADARG unless 1 to
 * DR_MAX_LOCAL); auto = GPUs if any, else CPUs; cpu = CPUs; gpu = GPUs,
 * DR_EBADARG with a message when none. A count over DR_MAX_LOCAL is
 * capped to it. */
int dr_bind_nproc(const dr_bind_opts_t *o, uint32_t *nproc, char *err,
                  size_t err_len);

typedef struct {
  int have_cpus;            /* apply cpus in the child */
  cpu_set_t cpus;
  int have_gpu;             /* set CUDA_VISIBLE_DEVICES to gpu */
  char gpu[64];             /* the device's entry: "3" or "GPU-uuid..." */
} dr_binding_t;

/* Plans one binding per local rank into out[0..nproc).
 *  cpu-bind none: no CPU binding. auto: the allowed CPUs split into nproc
 *  equal, disjoint, contiguous shares (the remainder to the first ranks);
 *  with more ranks than CPUs each rank gets one CPU, round-robin (rank i
 *  gets the (i mod CPUs)-th), so CPUs are shared but no rank is left
 *  unbound. When the GPUs' PCI devices report a local_cpulist
 *  (/sys/bus/pci/devices/<bus id>/local_cpulist, the bus id from
 *  /proc/driver/nvidia/gpus, GPUs in PCI bus order), each rank's share is
 *  taken from the CPUs near its GPU: rank i's GPU is visible GPU i when
 *  nproc <= GPUs, else GPU i * GPUs / nproc; ranks whose GPUs have the
 *  same near CPUs split them equally, and CPUs near no used GPU stay
 *  unused. When any rank's GPU has no such hint: plain equal shares.
 *  LIST: per-rank Linux cpulists separated by ':' ("0-3:4-7"); must have
 *  nproc entries, each within the allowed set (shares may overlap).
 *  gpu-bind none: nothing. isolate: rank i gets the i-th visible GPU (the
 *  i-th CUDA_VISIBLE_DEVICES entry when set, else "i"); DR_EBADARG when
 *  there are fewer GPUs than ranks.
 * Returns 0 or DR_EBADARG with a one-line reason in err (out is then all
 * zero). */
int dr_bind_plan(const dr_bind_opts_t *o, uint32_t nproc, dr_binding_t *out,
                 char *err, size_t err_len);

/* "cpus 0-3, gpu 0" / "cpus all, gpu all" (truncated to n). Returns
 * out. */
char *dr_bind_describe(const dr_binding_t *b, char *out, size_t n);

/* Renders a CPU set as a Linux cpulist ("0-3,8"; "" for none). When it
 * does not fit, the items that fit followed by ",..." (or "..." alone).
 * Returns out. */
char *dr_cpuset_format(const cpu_set_t *set, char *out, size_t n);

/* Parses a Linux cpulist ("0-3,8,10-11"): decimal CPU numbers below
 * CPU_SETSIZE and ascending ranges, comma-separated, no blanks. An empty
 * list, garbage or a reversed range: DR_EBADARG, *out then empty. */
int dr_cpuset_parse(const char *s, cpu_set_t *out);

/* In the child between fork and exec: applies the CPU binding.
 * Async-signal-safe. 0 or -errno. */
int dr_bind_apply_child(const dr_binding_t *b);

#endif /* DR_BIND_H */
