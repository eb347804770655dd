/* One check of the node's environment that needs the rendezvous
 * connection: the interface this node reaches the server from, which is
 * where the other nodes find it, against NCCL_SOCKET_IFNAME. NCCL binds
 * the interfaces that variable names; when it excludes the rendezvous's,
 * NCCL's traffic takes another network, which works only where the nodes
 * reach each other on it. A warning, said once; loopback says nothing of
 * the network between nodes and is not judged. */
#include "agent_internal.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "node_env.h"

/* The interface holding address a (IPv4 or IPv6): its name, or NULL. */
static int iface_of(const struct sockaddr_storage *a, char *name, size_t n) {
  struct ifaddrs *ifa = NULL;
  int found = 0;
  if (getifaddrs(&ifa) != 0)
    return 0;
  for (struct ifaddrs *i = ifa; i != NULL && !found; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != a->ss_family)
      continue;
    if (a->ss_family == AF_INET)
      found = ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
              ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
    else if (a->ss_family == AF_INET6)
      found = memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                     &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                     sizeof(struct in6_addr)) == 0;
    if (found)
      snprintf(name, n, "%s", i->ifa_name);
  }
  freeifaddrs(ifa);
  return found;
}

static int is_loopback(const struct sockaddr_storage *a) {
  if (a->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) ==
           127;
  return a->ss_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

void dr__agent_env_check_addr(dr_agent_t *ag) {
  const char *v = getenv("NCCL_SOCKET_IFNAME");
  if (ag->addr_checked || ag->arz == NULL || v == NULL || v[0] == '\0')
    return;
  ag->addr_checked = 1;
  struct sockaddr_storage a;
  char name[IF_NAMESIZE + 1], text[INET6_ADDRSTRLEN];
  if (dr_arz_local_addr(ag->arz, &a) != 0 || is_loopback(&a) ||
      !iface_of(&a, name, sizeof(name)) || dr__ifname_match(v, name))
    return;
  const void *raw = a.ss_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)&a)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)&a)->sin6_addr;
  if (inet_ntop(a.ss_family, raw, text, sizeof(text)) == NULL)
    return;
  DR_WARN("this node reaches the rendezvous from %s on %s, which "
          "NCCL_SOCKET_IFNAME=%s leaves out: NCCL's traffic takes another "
          "network, which hangs the first collective unless the nodes reach "
          "each other there (else set NCCL_SOCKET_IFNAME=%s)", text, name, v,
          name);
}
