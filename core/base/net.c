/*
 * core/base/net.c — network address facts (see core/base/net.h).
 */
#include "core/base/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

bool sl_net_host_loopback(const char *host)
{
    if (!host)
        return false;
    if (strcasecmp(host, "localhost") == 0)
        return true;
    char tmp[64];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof tmp) {
        memcpy(tmp, host + 1, n - 2);
        tmp[n - 2] = '\0';
        host = tmp;
    }
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}
