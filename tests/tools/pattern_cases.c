/*
 * tests/tools/pattern_cases.c — prints the pattern/event table of
 * tests/unit/pattern_cases.h (the one tests/unit/test_pattern.c checks
 * rules/pattern.c against) as JSON lines, one case a line:
 *
 *   {"pattern":PATTERN,"event":EVENT,"match":true|false}
 *
 * PATTERN and EVENT are the table's JSON texts byte for byte (not strings
 * holding them), so numbers keep their spelling (3.0e2 is not 300 for a
 * pattern). tests/integration/test_aws_api.sh sends each case through the
 * EventBridge API's TestEventPattern and POST /v1/patterns/test and expects
 * the table's answer from both. Exits 0, or 1 when stdout cannot be written.
 */
#include <stdio.h>

#include "tests/unit/pattern_cases.h"

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        printf("{\"pattern\":%s,\"event\":%s,\"match\":%s}\n", cases[i].pattern, cases[i].event,
               cases[i].match ? "true" : "false");
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
