/* The node's environment summary and the checks that turn a future hang
 * into a clear line now: what GPUs the node has and which each local rank
 * gets, the NCCL library the workers will load, the InfiniBand/RoCE
 * devices and whether NCCL will use them, the NCCL and torch variables,
 * CPU and NUMA binding. Read from /proc, /sys, /etc/ld.so.conf and the
 * environment; never logs (the agent prints what this returns). */
#ifndef DR_NODE_ENV_H
#define DR_NODE_ENV_H

#include <net/if.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>

#include "bind.h"

/* A network interface of the node: its name, up with an address. */
typedef struct {
  char name[IF_NAMESIZE];
  int up; /* IFF_UP and an IPv4 or IPv6 address */
} dr_ifc_t;

/* What the summary and the checks read. */
typedef struct {
  const char *root;             /* prefix of every /proc, /sys, /etc and
                                   /dev/shm path read ("" or NULL: none) */
  const char *const *prog_argv; /* the program the workers run */
  char *const *envp;            /* the environment the workers inherit */
  uint32_t nproc;               /* local ranks */
  const dr_binding_t *bind;     /* nproc of them */
  int n_cpus;                   /* CPUs this process may run on */
  const dr_ifc_t *ifs;          /* the node's interfaces */
  size_t n_ifs;
  const uint64_t *gpu_mem;      /* each GPU's memory in PCI order (NVML's
                                   index), 0: unknown; NULL without NVML */
  size_t n_gpu_mem;
} dr_node_env_in_t;

typedef enum { DR_ENV_WARN = 1, DR_ENV_FATAL = 2 } dr_env_level_t;

/* One finding of the checks: one line that says what is wrong and what to
 * set. */
typedef struct {
  dr_env_level_t level;
  char text[512];
} dr_env_finding_t;

#define DR_ENV_FINDINGS_MAX 16

typedef struct {
  char *summary; /* lines, each ending in '\n'; malloc'ed */
  dr_env_finding_t findings[DR_ENV_FINDINGS_MAX];
  size_t n_findings;
  int fatal;     /* a finding is DR_ENV_FATAL: no worker may start */
} dr_node_env_t;

/* Reads the node and runs the checks into *out (free with
 * dr_node_env_free). 0, or -ENOMEM (out then empty). */
int dr_node_env_read(const dr_node_env_in_t *in, dr_node_env_t *out);
void dr_node_env_free(dr_node_env_t *e);

/* The interfaces of this host (getifaddrs): how many, into out[0..max). */
size_t dr_node_env_ifs(dr_ifc_t *out, size_t max);

/* ---- parts, for node_env.c and its tests ------------------------------ */

/* Where the workers' dynamic loader will find libnccl.so.2, in the order
 * they look: the program's Python environment's nvidia/nccl/lib (a python
 * program: its interpreter's prefix), LD_LIBRARY_PATH, then the system's
 * directories (/etc/ld.so.conf and the default ones, under root). Fills
 * path and version ("2.21.5", "" when unknown) and where ("the program's
 * Python environment", "LD_LIBRARY_PATH", "the system"); 0, or -ENOENT
 * with the places looked in in path. */
int dr__nccl_find(const char *root, const char *const *prog_argv,
                  char *const *envp, char *path, size_t path_len,
                  char *version, size_t version_len, const char **where);

/* The value of NAME in envp, or NULL. */
const char *dr__env_get(char *const *envp, const char *name);

/* The checks alone, appending to out->findings; n_gpus: the node's. */
void dr__node_env_check(const dr_node_env_in_t *in, int n_gpus,
                        dr_node_env_t *out);

/* Whether an interface name matches an NCCL_SOCKET_IFNAME-style list
 * ("eth" prefixes, "=eth0" exact, "^docker,lo" excludes). */
int dr__ifname_match(const char *list, const char *name);

#endif /* DR_NODE_ENV_H */
