/*
 * core/base/lane_name.c — the lane name check (see lane_name.h).
 */
#include "core/base/lane_name.h"

int sl_lane_valid(const char *lane, size_t len)
{
    if (len > SL_LANE_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = lane[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return 0;
    }
    return 1;
}
