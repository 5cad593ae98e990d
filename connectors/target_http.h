/*
 * connectors/target_http.h — target.http: requests to an HTTP endpoint
 * (libcurl multi). Its config struct and table (the keys are in
 * connectors/target_http.c).
 */
#ifndef SL_TARGET_HTTP_H
#define SL_TARGET_HTTP_H

#include "core/bus/connector.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* target.http { … } (sl_target_config.conf). */
typedef struct sl_target_http_conf {
    char *url;      /* template: {attribute} is replaced from the event */
    char *method;   /* NULL: POST */
    char **headers; /* "Name: value" lines */
    size_t nheaders;
    sl_conf_auth auth;
    bool tls_verify; /* default true */
    char *ca_file;
    int64_t connect_timeout_ms; /* default 5 s */
    int64_t timeout_ms;         /* whole request; default 30 s */
    int64_t concurrency;        /* requests in flight per rule; default 8 */
    int64_t rate;               /* requests per second; 0 unlimited */
    sl_http_body body;          /* default structured */
    int64_t batch;              /* payloads per request (a JSON array); default 1 */
} sl_target_http_conf;

extern const sl_target_ops sl_target_http_ops;

#endif
