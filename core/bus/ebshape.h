/*
 * core/bus/ebshape.h — the Amazon EventBridge shape of an event, both ways.
 *
 * sluice stores CloudEvents. The EventBridge API (http/aws.c) and the rules
 * it creates see and deliver events as EventBridge does:
 *
 *   {"version":"0","id":ID,"detail-type":TYPE,"source":SOURCE,
 *    "account":ACCOUNT,"time":"YYYY-MM-DDTHH:MM:SSZ","region":REGION,
 *    "resources":[…],"detail":DATA}
 *
 * What EventBridge has and CloudEvents lacks travels in three extension
 * attributes of the stored CloudEvent: `awsaccount`, `awsregion` and
 * `awsresources` (the JSON text of the Resources array, as a string:
 * CloudEvents extensions cannot be arrays). An event that arrived another way
 * (HTTP ingest, a file, Kafka) has none of them and gets the server's
 * account and region and no resources. `detail` is the event's JSON data as
 * it is; an event without data gets {}, one with binary data
 * {"data_base64":"…"}. The CloudEvent's subject, lane and other extensions
 * have no place in EventBridge's shape and are left out (the lane still
 * routes: it travels beside the payload).
 */
#ifndef SL_EBSHAPE_H
#define SL_EBSHAPE_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <stddef.h>

/* Appends the EventBridge shape of the stored CloudEvent ce[0..len) to out;
 * account and region stand in for events without awsaccount/awsregion.
 * Returns 0, SL_EINVAL with err when ce is not a CloudEvent, or SL_ENOMEM
 * (out is unchanged on error). */
int sl_ebshape_from_cloudevent(const char *ce, size_t len, const char *account,
                               const char *region, sl_buf *out, sl_error *err);

/* Appends the CloudEvent of the EventBridge event eb[0..len) to out (a rule
 * delivering EventBridge events into an event bus, which is an event set):
 * id, source, type = detail-type, time, data = detail, the awsaccount,
 * awsregion and awsresources extensions. A missing id gets a new one.
 * Returns 0, SL_EINVAL with err when eb is not an EventBridge event (no
 * source or detail-type strings, detail not an object), or SL_ENOMEM. */
int sl_ebshape_to_cloudevent(const char *eb, size_t len, sl_buf *out, sl_error *err);

/* Whether the JSON text s[0..len) is an array of strings (Resources). */
int sl_ebshape_resources_valid(const char *s, size_t len);

#endif
