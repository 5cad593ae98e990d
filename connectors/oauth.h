/*
 * connectors/oauth.h — OAuth 2.0 client credentials (RFC 6749 §4.4) for
 * target.http's `auth = { oauth = { … } }`, as EventBridge's connections of
 * type OAUTH_CLIENT_CREDENTIALS do: the client id and secret go to the token
 * endpoint as HTTP basic auth with grant_type=client_credentials (and the
 * extra form parameters given), the access token is kept until a minute
 * before it expires (expires_in; an hour when the server says nothing) and
 * sent as `Authorization: Bearer …`; a 401 from the endpoint drops it, so
 * the retry fetches a new one.
 *
 * Thread safety: one sl_oauth may be used from any thread; a fetch happens
 * under its lock (others wait for its token rather than fetch too).
 */
#ifndef SL_OAUTH_H
#define SL_OAUTH_H

#include "core/bus/conf_key.h"

#include <stddef.h>

typedef struct sl_oauth sl_oauth;

/* From auth's oauth_* fields (copied). Returns 0 or SL_ENOMEM. */
int sl_oauth_new(const sl_conf_auth *auth, int64_t timeout_ms, sl_oauth **out);

/* "Authorization: Bearer TOKEN" into line, fetching a token when there is
 * none or it is about to expire (blocking, at most the timeout). Returns 0,
 * or SL_EIO with why saying what the token endpoint did. */
int sl_oauth_header(sl_oauth *o, char *line, size_t cap, char *why, size_t whylen);

/* The endpoint refused the token (401): the next header fetches another. */
void sl_oauth_drop(sl_oauth *o);

/* NULL is ignored. */
void sl_oauth_free(sl_oauth *o);

#endif
