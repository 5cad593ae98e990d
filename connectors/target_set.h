/*
 * connectors/target_set.h — target.set: events appended to another event
 * set through the Databus (also the rules' dead-letter path). Its config
 * struct and table (the keys are in connectors/target_set.c).
 */
#ifndef SL_TARGET_SET_H
#define SL_TARGET_SET_H

#include "core/bus/connector.h"

/* target.set { … } (sl_target_config.conf). */
typedef struct sl_target_set_conf {
    char *set;   /* the event set to append to (declared) */
    char *shape; /* NULL | "cloudevents" | "eventbridge" (checked) */
} sl_target_set_conf;

extern const sl_target_ops sl_target_set_ops;

#endif
