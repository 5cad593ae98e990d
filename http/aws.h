/*
 * http/aws.h — the Amazon EventBridge API on the HTTP port (ARCHITECTURE.md
 * §12, docs/eventbridge-api.md): `POST /` (or `POST /eventbridge/`) with
 * `X-Amz-Target: AWSEvents.<Operation>`, AWS JSON 1.1, SigV4.
 *
 * Buses are event sets. Rules, their targets, connections and API
 * destinations made through the API are kept in DATA/aws/state.json and
 * become ordinary config declarations: sl_aws_lua() writes them as Lua in
 * the config's vocabulary, which the server runs after the config file
 * (server/config.h sl_config_load_api()); each change is applied through
 * the server's reload (sl_aws_options.apply) before it is answered, so a
 * PutRule's rule runs when the client hears of it.
 *
 * Thread safety: the state has its own lock; every function may be called
 * from any thread.
 */
#ifndef SL_AWS_H
#define SL_AWS_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <stdbool.h>
#include <stddef.h>

/* One server.aws credential (server/config.h's, borrowed while opening). */
typedef struct sl_aws_cred {
    const char *akid, *secret;
    char **publish; /* bus (set) globs, as api_keys */
    size_t npublish;
    char **read;
    size_t nread;
    bool admin; /* every operation (also: a credential naming no right) */
} sl_aws_cred;

typedef struct sl_aws_options {
    const char *region;  /* NULL: us-east-1 */
    const char *account; /* NULL: 000000000000 */
    const sl_aws_cred *creds;
    size_t ncreds;
    const char *data_dir; /* the state lives in DATA/aws */
    /* Puts the API's declarations lua[0..len) in force: the config file
     * again with them (a reload). 0, or an SL_E… code with err saying
     * why (the running config then stays). NULL: the server runs without
     * a config file, and operations that make rules are refused. */
    int (*apply)(void *ctx, const char *lua, size_t len, sl_error *err);
    /* Whether the config file declares a rule called name (the API then
     * refuses that name). NULL: none. */
    bool (*file_rule)(void *ctx, const char *name);
    /* Whether the config file declares set name. NULL: none. */
    bool (*file_set)(void *ctx, const char *name);
    void *ctx;
} sl_aws_options;

typedef struct sl_aws sl_aws;

/* Loads DATA/aws/state.json (none yet: empty). Returns 0 and *out, or
 * SL_EINVAL/SL_EIO with err for a state file that cannot be read. */
int sl_aws_open(const sl_aws_options *o, sl_aws **out, sl_error *err);

/* Sets the hooks (opened before the server has them). */
void sl_aws_set_hooks(sl_aws *a, int (*apply)(void *, const char *, size_t, sl_error *),
                      bool (*file_rule)(void *, const char *),
                      bool (*file_set)(void *, const char *), void *ctx);

/* Appends the state's declarations as Lua to out ("" when there are none).
 * Returns 0 or SL_ENOMEM. */
int sl_aws_lua(sl_aws *a, sl_buf *out);

/* The name of the file sl_aws_lua()'s text stands for in messages
 * (DATA/aws/rules.lua; never written). */
const char *sl_aws_lua_name(const sl_aws *a);

/* Whether credentials are configured (else only loopback is served). */
size_t sl_aws_creds(const sl_aws *a);

/* NULL is ignored. */
void sl_aws_free(sl_aws *a);

#endif
