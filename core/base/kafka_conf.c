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
