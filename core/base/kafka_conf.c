/*
 * core/base/kafka_conf.c — librdkafka configuration shared by the Kafka
 * connectors (see kafka_conf.h).
 */
#include "core/base/kafka_conf.h"

#include <string.h>
#include <strings.h>

bool sl_kafka_sensitive(const char *name)
{
    static const char *const words[] = {"password", "secret", "sasl.oauthbearer", "ssl.key",
                                        "jaas"};
    for (size_t w = 0; w < sizeof words / sizeof *words; w++) {
        size_t n = strlen(words[w]);
        for (const char *p = name; *p; p++)
            if (strncasecmp(p, words[w], n) == 0)
                return true;
    }
    return false;
}

int sl_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, sl_error *err)
{
    char es[512];
    rd_kafka_conf_res_t res = rd_kafka_conf_set(conf, name, value, es, sizeof es);
    if (res == RD_KAFKA_CONF_OK)
        return 0;
    /* librdkafka's message quotes the value ("Invalid value \"…\" for …"). */
    if (sl_kafka_sensitive(name))
        return sl_error_set(err, SL_EINVAL, "property %s: %s", name,
                            res == RD_KAFKA_CONF_UNKNOWN ? "no such property" : "invalid value");
    return sl_error_set(err, SL_EINVAL, "property %s: %s", name, es);
}

int sl_kafka_conf_line(rd_kafka_conf_t *conf, const char *line, const char *const *reserved,
                       const char *why, sl_error *err)
{
    char name[256];
    const char *value = sl_kafka_property_name(line, name, sizeof name, err);
    if (!value)
        return SL_EINVAL;
    for (size_t i = 0; reserved && reserved[i]; i++)
        if (strcmp(name, reserved[i]) == 0)
            return sl_error_set(err, SL_EINVAL, "property %s: sluice sets it (%s)", name, why);
    return sl_kafka_conf_set(conf, name, value, err);
}

int sl_kafka_conf_num(rd_kafka_conf_t *conf, const char *name, long long value, sl_error *err)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", value);
    return sl_kafka_conf_set(conf, name, num, err);
}

const char *sl_kafka_property(char *const *lines, size_t n, const char *name)
{
    char k[256];
    for (size_t i = 0; i < n; i++) {
        const char *v = sl_kafka_property_name(lines[i], k, sizeof k, NULL);
        if (v && strcmp(k, name) == 0)
            return v;
    }
    return NULL;
}

const char *sl_kafka_property_name(const char *line, char *name, size_t cap, sl_error *err)
{
    const char *eq = strchr(line, '=');
    if (!eq || eq == line) {
        sl_error_set(err, SL_EINVAL, "property \"%.64s\": want name=value", line);
        return NULL;
    }
    if ((size_t)(eq - line) >= cap) { /* the name only: what follows may be a secret */
        sl_error_set(err, SL_EINVAL, "property \"%.64s…\": the name is too long", line);
        return NULL;
    }
    memcpy(name, line, (size_t)(eq - line));
    name[eq - line] = '\0';
    return eq + 1;
}

void sl_kafka_redact(char *msg, char *const *lines, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char name[256];
        const char *v = sl_kafka_property_name(lines[i], name, sizeof name, NULL);
        size_t vl = v ? strlen(v) : 0;
        if (vl < 4 || !sl_kafka_sensitive(name))
            continue;
        for (char *p = strstr(msg, v); p; p = strstr(p + 3, v)) {
            memcpy(p, "***", 3);
            memmove(p + 3, p + vl, strlen(p + vl) + 1);
        }
    }
}

rd_kafka_t *sl_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *const *lines, size_t n,
                         const char *who, sl_error *err)
{
    char es[512];
    rd_kafka_t *rk = rd_kafka_new(type, conf, es, sizeof es);
    if (rk)
        return rk;
    rd_kafka_conf_destroy(conf);
    sl_kafka_redact(es, lines, n);
    if (who)
        sl_error_set(err, SL_EINVAL, "%s: %s", who, es);
    else
        sl_error_set(err, SL_EINVAL, "%s", es);
    return NULL;
}

void sl_kafka_quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

void sl_kafka_problem(sl_buf *b, const char *msg)
{
    if (b->len)
        sl_buf_append(b, "; ", 2);
    sl_buf_append(b, msg, strlen(msg));
}

int sl_kafka_problems_end(sl_buf *b, bool oom, sl_error *err)
{
    int rc = oom ? SL_ENOMEM : b->len ? SL_EINVAL : 0;
    if (rc == SL_ENOMEM)
        sl_error_set(err, rc, "out of memory");
    else if (rc)
        sl_error_set(err, rc, "%.*s", (int)b->len, (const char *)b->data);
    sl_buf_free(b);
    return rc;
}
