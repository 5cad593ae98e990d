/*
 * core/connector.h — the interface every target implements (ARCHITECTURE.md
 * §8; sources join it in the sources issue, loadable plugins fill the same
 * table).
 *
 * Like every sluice vtable the first field is the ABI version, and a caller
 * reads a field only when the version says it exists. Built-in targets
 * register statically (sl_target_find); the rule runner owns the instances.
 *
 * Delivery is asynchronous by contract: deliver() may complete some payloads
 * before it returns and others later from another thread (an HTTP response,
 * a Kafka delivery report). Each payload is completed exactly once. The
 * runner moves a rule's cursor only when every payload of a batch completed.
 *
 * Statuses: 0 delivered; SL_EINVAL refused for good (the rule dead-letters
 * it); SL_EDEFERRED not attempted (it is retried without using up one of
 * the rule's attempts), SL_ESHUTDOWN likewise while the server stops; any
 * other code a failed attempt, retried after the rule's back-off. Order: the
 * payloads of one call are one partition's, in order; with cfg->ordered a
 * target must not deliver a payload after one of the same call that failed
 * in a retryable way (complete the rest SL_EDEFERRED instead), so that the
 * retry does not arrive after its successors.
 */
#ifndef SL_CONNECTOR_H
#define SL_CONNECTOR_H

#include "core/config.h"
#include "core/databus.h"
#include "core/err.h"
#include "core/set.h"

#include <stddef.h>
#include <stdint.h>

#define SL_CONNECTOR_ABI_VERSION 1

/* What a target instance may use from the server. */
typedef struct sl_target_env {
    sl_sets *sets;   /* the event sets (target.set), NULL in `sluice test` */
    sl_databus *bus; /* the write path into them */
    const char *rule; /* the owning rule's name, for messages */
} sl_target_env;

/* One payload to deliver. */
typedef struct sl_delivery {
    const char *data; /* the payload (a CloudEvent's JSON, or what `input` made) */
    size_t len;
    const char *lane; /* the source event's lane, "" for base */
} sl_delivery;

/* Completion of payload i of a deliver() call: status 0 delivered, or an
 * SL_E… code with reason (a sentence, may be NULL). */
typedef void sl_deliver_done_fn(void *ctx, size_t i, int status, const char *reason);

typedef struct sl_target_ops {
    uint32_t abi_version; /* SL_CONNECTOR_ABI_VERSION */
    const char *name;     /* "file", "set", … as in target.NAME { … } */
    /* Creates an instance from its checked config. Returns 0 and *impl, or an
     * SL_E… code with err (nothing left allocated). */
    int (*open)(const sl_target_config *cfg, const sl_target_env *env, void **impl,
                sl_error *err);
    /* Delivers d[0..n); see the completion contract above. d and the bytes
     * it points to are valid until every payload completed. */
    void (*deliver)(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                    void *ctx);
    /* Waits for outstanding deliveries and frees the instance. */
    void (*close)(void *impl);
    /* Optional (NULL: nothing to hurry): called when the server stops,
     * before the rule workers are joined and close() runs. Completes queued
     * and new payloads with SL_ESHUTDOWN at once and gives payloads in flight
     * a short grace, so that a hung endpoint cannot hold the shutdown for a
     * whole timeout. Payloads failed this way are delivered again after the
     * restart (their cursor did not move). */
    void (*cancel)(void *impl);
    /* Optional: checks what only the connector knows (e.g. librdkafka's
     * property names) when the config is loaded, before any instance runs;
     * `sluice check` reports what it returns. 0, or SL_EINVAL with err. */
    int (*check)(const sl_target_config *cfg, sl_error *err);
    /* Optional: the instance's health for GET /v1/rules: 0 healthy, or 1
     * with msg saying what is wrong (e.g. "all brokers are down"). */
    int (*health)(void *impl, char *msg, size_t len);
    /* Payloads per deliver() call the target works best with (0: the
     * runner's default, 512). A target whose every call waits a fixed time
     * (a Kafka delivery report after linger.ms) asks for more so that the
     * wait is shared by more events; the runner caps it at 8192. */
    uint32_t batch_hint;
} sl_target_ops;

/* The built-in table for a target kind. */
const sl_target_ops *sl_target_find(sl_target_kind kind);

#endif
