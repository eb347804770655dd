/* The agent's side of the node's environment summary (node_env.h): read
 * once at the start, its findings said then (a fatal one ends ddprun with
 * exit 2 before it joins), the summary said before the first workers
 * start and written at the head of every rank's files, and sent in every
 * JOIN (for `ddprun status --env`, with NCCL_SOCKET_IFNAME for the
 * server's check across nodes). */
#include "agent_internal.h"

#include "fs.h"
#include "log.h"
#include "node_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

#define IFS_MAX 64

int dr__agent_env_read(dr_agent_t *ag) {
  dr_ifc_t ifs[IFS_MAX];
  /* A test's stand-in /proc and /sys (fake GPUs, InfiniBand ports). */
  const char *root = getenv("DDPRUN_TEST_SYSROOT");
  dr_node_env_in_t in = {
      .root = root != NULL ? root : "",
      .prog_argv = (const char *const *)ag->cfg->prog_argv,
      .envp = environ,
      .nproc = ag->nproc,
      .bind = ag->bind,
      .n_cpus = dr_bind_count_cpus(),
      .ifs = ifs,
      .n_ifs = dr_node_env_ifs(ifs, IFS_MAX),
  };
  /* The GPUs' memory, from NVML, on a node with NVIDIA's driver only (its
   * start costs what a CUDA program's does). */
  uint64_t mem[64] = {0};
  char gpus[600];
  snprintf(gpus, sizeof(gpus), "%s/proc/driver/nvidia/gpus", in.root);
  dr_nvml_t *g = access(gpus, F_OK) == 0 ? dr__agent_nvml(ag) : NULL;
  for (unsigned int i = 0; g != NULL && i < 64; i++) {
    uint64_t used;
    if (dr_nvml_device_memory(g, i, &used, &mem[i]) != 0)
      break;
    in.n_gpu_mem = i + 1;
    in.gpu_mem = mem;
  }
  dr_node_env_t e;
  if (dr_node_env_read(&in, &e) != 0) {
    DR_WARN("out of memory: no environment summary");
    return 0;
  }
  for (size_t i = 0; i < e.n_findings; i++) {
    if (e.findings[i].level == DR_ENV_FATAL)
      DR_SAY(DR_LOG_ERROR, "%s", e.findings[i].text);
    else
      DR_WARN("%s", e.findings[i].text);
  }
  ag->env_summary = e.summary;
  return e.fatal ? 2 : 0;
}

void dr__agent_env_say(dr_agent_t *ag) {
  if (ag->printed_binding || ag->env_summary == NULL)
    return;
  ag->printed_binding = 1;
  const char *s = ag->env_summary;
  while (*s != '\0') {
    size_t n = strcspn(s, "\n");
    DR_SAY(DR_LOG_INFO, "%.*s", (int)n, s);
    s += n + (s[n] == '\n');
  }
}

void dr__agent_env_write(const dr_agent_t *ag, int fd) {
  if (fd < 0 || ag->env_summary == NULL)
    return;
  const char *s = ag->env_summary;
  while (*s != '\0') {
    size_t n = strcspn(s, "\n");
    char line[2048];
    int k = snprintf(line, sizeof(line), "ddprun: %.*s\n", (int)n, s);
    if (k > 0)
      dr_write_all(fd, line, (size_t)k < sizeof(line) ? (size_t)k
                                                      : sizeof(line) - 1);
    s += n + (s[n] == '\n');
  }
}

void dr__agent_env_join(const dr_agent_t *ag, dr_join_t *j) {
  const char *s = ag->env_summary != NULL ? ag->env_summary : "";
  size_t n = strlen(s);
  if (n > DR_ENV_SUMMARY_MAX) { /* its first whole lines */
    n = DR_ENV_SUMMARY_MAX;
    while (n > 0 && s[n - 1] != '\n')
      n--;
  }
  j->env.p = (const uint8_t *)s;
  j->env.len = (uint32_t)n;
  /* The workers inherit this process's environment (node_env.c reads the
   * same). A value past the bound is cut: no interface name is that long,
   * and the server only compares them. */
  const char *v = getenv("NCCL_SOCKET_IFNAME");
  j->socket_ifname = dr_str(v);
  if (j->socket_ifname.len > DR_SOCKET_IFNAME_MAX)
    j->socket_ifname.len = DR_SOCKET_IFNAME_MAX;
}
