/*
 * server/config_aws.c — server { aws = { … } }: the EventBridge API's region,
 * account and SigV4 credentials (docs/eventbridge-api.md).
 *
 *   server { aws = { region = "us-east-1", account = "000000000000",
 *                    credentials = { AKIDEXAMPLE = { secret = env "AWS_SECRET",
 *                                                    publish = { "default" } } } } }
 *
 * A credential's rights are spelled as api_keys spells them (publish, read:
 * set names or globs; admin); one that names none is an admin credential,
 * which the server says at start-up.
 */
#include "server/config_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const key aws_keys[] = {
    {"region", K_STRING, FIELD(sl_config_aws, region), 0, 0, "\"us-east-1\"",
     "the region requests are signed for and events carry"},
    {"account", K_STRING, FIELD(sl_config_aws, account), 0, 0, "\"000000000000\"",
     "the 12-digit account id in ARNs and events"},
    {"credentials", K_AWSCREDS, 0, 0, 0, 0, "none",
     "`{ AKID = { secret = …, publish = {…}, read = {…}, admin = true } }`: the access keys "
     "whose SigV4 signatures are accepted; without any, only loopback clients are served and "
     "their signatures are not checked"},
};

static const key cred_keys[] = {
    {"secret", K_STRING, FIELD(sl_config_aws_cred, secret), 0, 0, "required",
     "the secret access key (use `env \"NAME\"`)"},
    {"publish", K_STRINGS, FIELD(sl_config_aws_cred, publish), 0, 0, "none",
     "event buses (set names or globs, as `api_keys`) PutEvents may write"},
    {"read", K_STRINGS, FIELD(sl_config_aws_cred, read), 0, 0, "none",
     "event buses whose rules and targets may be described and listed"},
    {"admin", K_BOOL, FIELD(sl_config_aws_cred, admin), 0, 0, "false",
     "every operation on every bus; a credential naming none of publish, read, admin is an "
     "admin credential"},
};

/* AWS access key ids: 16 to 128 of A-Z 0-9 (sluice also takes a-z _ -, for
 * test keys like "test"). */
static bool akid_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

void sl__config_read_aws_creds(loader *ld, int idx, const key *k, const block *b)
{
    lua_State *L = ld->L;
    sl_config_aws *aws = b->obj;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (lua_type(L, idx) != LUA_TTABLE) {
        sl__config_problem(ld, line,
                           "server.aws: credentials must be a table { AKID = { secret = … } }");
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TTABLE) {
            sl__config_problem(ld, line,
                               "server.aws: credentials entries are AKID = { secret = … }");
            lua_pop(L, 1);
            continue;
        }
        const char *akid = lua_tostring(L, -2);
        char what[200];
        snprintf(what, sizeof what, "server.aws: credential \"%.128s\"", akid);
        if (!akid_valid(akid))
            sl__config_problem(ld, line, "%s: an access key id is 1-128 of A-Z a-z 0-9 _ -", what);
        for (size_t i = 0; i < aws->ncreds; i++)
            if (aws->creds[i].akid && strcmp(aws->creds[i].akid, akid) == 0)
                sl__config_problem(ld, line, "%s is declared twice", what);
        sl_config_aws_cred *g = sl__config_grow(ld, aws->creds, aws->ncreds, sizeof *g);
        if (!g) {
            lua_pop(L, 1);
            continue;
        }
        aws->creds = g;
        sl_config_aws_cred *c = &aws->creds[aws->ncreds++];
        c->akid = sl__config_dup(ld, akid, strlen(akid));
        c->line = line;
        block cb = {what, line, c};
        int body = lua_gettop(L);
        sl__config_check_block(ld, body, KEYS(cred_keys), &cb, NULL);
        for (const char *const *r = (const char *const[]){"publish", "read", "admin", NULL}; *r;
             r++) {
            lua_getfield(L, body, *r);
            c->names_right |= !lua_isnil(L, -1);
            lua_pop(L, 1);
        }
        if (!c->secret || !c->secret[0])
            sl__config_problem(ld, line, "%s needs secret = \"…\" (its secret access key)", what);
        lua_pop(L, 1);
    }
}

void sl__config_read_aws(loader *ld, int idx, const key *k, const block *b)
{
    sl_config *cfg = b->obj;
    int line = sl__config_key_line(ld, b->line, k->name);
    lua_State *L = ld->L;
    if (lua_type(L, idx) != LUA_TTABLE) {
        sl__config_problem(ld, line,
                           "%s: aws must be a table { region = \"…\", account = \"…\", "
                           "credentials = { … } }",
                           b->what);
        return;
    }
    sl_config_aws *aws = &cfg->aws;
    aws->present = true;
    aws->line = line;
    block ab = {"server.aws", line, aws};
    sl__config_check_block(ld, idx, KEYS(aws_keys), &ab, NULL);
    if (aws->region) {
        bool ok = aws->region[0] != '\0' && strlen(aws->region) <= 32;
        for (const char *p = aws->region; ok && *p; p++)
            ok = islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-';
        if (!ok)
            sl__config_problem(ld, line,
                               "server.aws: region \"%s\" is not a region name (like us-east-1)",
                               aws->region);
    }
    if (aws->account) {
        bool ok = strlen(aws->account) == 12;
        for (const char *p = aws->account; ok && *p; p++)
            ok = isdigit((unsigned char)*p);
        if (!ok)
            sl__config_problem(ld, line, "server.aws: account \"%s\" is not 12 digits",
                               aws->account);
    }
}

void sl__config_free_aws(sl_config *cfg)
{
    sl_config_aws *aws = &cfg->aws;
    for (size_t i = 0; i < aws->ncreds; i++) {
        free(aws->creds[i].akid);
        sl__config_free_keys(KEYS(cred_keys), &aws->creds[i]);
    }
    free(aws->creds);
    sl__config_free_keys(KEYS(aws_keys), aws);
}

int sl__config_aws_markdown(sl_buf *out)
{
    int rc = sl__config_keys_table(out, "server.aws { … }", KEYS(aws_keys));
    return rc ? rc : sl__config_keys_table(out, "server.aws.credentials.AKID { … }", KEYS(cred_keys));
}
