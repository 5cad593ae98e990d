/*
 * core/base/net.h — small facts about network addresses that every front door
 * and client shares: whether a host string names this machine only.
 */
#ifndef SL_NET_H
#define SL_NET_H

#include <stdbool.h>

/* Whether a listen or connect host is loopback only: 127.0.0.0/8, ::1
 * (bare or in brackets: "[::1]"), "localhost". Anything else (0.0.0.0, ::,
 * a LAN address, another name, NULL) is not. */
bool sl_net_host_loopback(const char *host);

#endif
