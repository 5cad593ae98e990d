/*
 * tests/unit/test_pattern.c — EventBridge event patterns: a table of
 * pattern/event pairs per operator (mostly the EventBridge documentation's
 * own examples), arrays in events, nesting, $or, invalid patterns with the
 * field named in the message, invalid events, and a check that matching
 * does not allocate.
 */
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rules/pattern.h"

typedef struct mcase {
    const char *pattern;
    const char *event;
    bool match;
} mcase;

/* Each row: pattern, event, whether it matches. */
static const mcase cases[] = {
    /* ---- exact values ---- */
    {"{\"source\":[\"aws.ec2\"]}", "{\"source\":\"aws.ec2\"}", true},
    {"{\"source\":[\"aws.ec2\"]}", "{\"source\":\"aws.ec2x\"}", false},
    {"{\"source\":[\"aws.ec2\"]}", "{\"source\":\"AWS.EC2\"}", false},
    {"{\"source\":[\"aws.ec2\"]}", "{\"other\":\"aws.ec2\"}", false},
    {"{\"source\":[\"aws.ec2\",\"aws.fsx\"]}", "{\"source\":\"aws.fsx\"}", true},
    {"{\"source\":[\"aws.ec2\",\"aws.fsx\"]}", "{\"source\":\"aws.s3\"}", false},
    /* numbers match by their text: "300, 300.0, and 3.0e2 are not considered equal" */
    {"{\"n\":[3]}", "{\"n\":3}", true},
    {"{\"n\":[3]}", "{\"n\":3.0}", false},
    {"{\"n\":[3]}", "{\"n\":3e0}", false},
    {"{\"n\":[3.0]}", "{\"n\":3}", false},
    {"{\"n\":[300]}", "{\"n\":3.0e2}", false},
    {"{\"n\":[3.0e2]}", "{\"n\":3.0e2}", true},
    {"{\"n\":[300.0]}", "{\"n\":300.0}", true},
    {"{\"n\":[1E3]}", "{\"n\":1e3}", false},
    {"{\"n\":[-0]}", "{\"n\":0}", false},
    {"{\"n\":[123456789012]}", "{\"n\":123456789012}", true},
    {"{\"n\":[123456789012]}", "{\"n\":[1,123456789012]}", true},
    {"{\"n\":[3]}", "{\"n\":\"3\"}", false},
    {"{\"n\":[\"3\"]}", "{\"n\":3}", false},
    {"{\"n\":[3]}", "{\"n\":4}", false},
    {"{\"n\":[-1.5]}", "{\"n\":-15e-1}", false},
    {"{\"n\":[-1.5]}", "{\"n\":-1.5}", true},
    {"{\"b\":[true]}", "{\"b\":true}", true},
    {"{\"b\":[true]}", "{\"b\":false}", false},
    {"{\"b\":[true]}", "{\"b\":\"true\"}", false},
    {"{\"b\":[false]}", "{\"b\":false}", true},
    {"{\"z\":[null]}", "{\"z\":null}", true},
    {"{\"z\":[null]}", "{\"z\":\"null\"}", false},
    {"{\"z\":[null]}", "{}", false},
    {"{\"e\":[\"\"]}", "{\"e\":\"\"}", true},
    {"{\"e\":[\"\"]}", "{\"e\":null}", false},
    {"{\"s\":[\"caf\\u00e9\"]}", "{\"s\":\"caf\\u00e9\"}", true},
    {"{\"s\":[\"café\"]}", "{\"s\":\"caf\\u00e9\"}", true},
    {"{\"s\":[\"a\\\"b\"]}", "{\"s\":\"a\\\"b\"}", true},
    {"{\"s\":[\"a/b\"]}", "{\"s\":\"a\\/b\"}", true},
    {"{\"a\":[\"x\"],\"b\":[\"y\"]}", "{\"a\":\"x\",\"b\":\"y\"}", true},
    {"{\"a\":[\"x\"],\"b\":[\"y\"]}", "{\"a\":\"x\",\"b\":\"z\"}", false},
    {"{\"a\":[\"x\"],\"b\":[\"y\"]}", "{\"a\":\"x\"}", false},
    /* duplicate keys: "the last reference will be the one used" */
    {"{\"a\":[1],\"a\":[2]}", "{\"a\":2}", true},
    {"{\"a\":[1],\"a\":[2]}", "{\"a\":1}", false},
    {"{\"detail\":{\"location\":[{\"prefix\":\"us-\"}],\"location\":[{\"anything-but\":"
     "\"us-east\"}]}}",
     "{\"detail\":{\"location\":\"eu-west\"}}", true},
    {"{\"detail\":{\"location\":[{\"prefix\":\"us-\"}],\"location\":[{\"anything-but\":"
     "\"us-east\"}]}}",
     "{\"detail\":{\"location\":\"us-east\"}}", false},
    {"{\"a\":{\"x\":[1]},\"a\":{\"y\":[2]}}", "{\"a\":{\"x\":5,\"y\":2}}", true},
    {"{\"a\":{\"x\":[1]},\"a\":[{\"exists\":true}]}", "{\"a\":{\"x\":1}}", false},
    {"{\"$or\":[{\"a\":[1]},{\"b\":[1]}],\"$or\":[{\"c\":[1]},{\"d\":[1]}]}", "{\"a\":1}", false},
    {"{\"$or\":[{\"a\":[1]},{\"b\":[1]}],\"$or\":[{\"c\":[1]},{\"d\":[1]}]}", "{\"d\":1}", true},
    {"{\"typ\\u0065\":[\"x\"],\"type\":[\"y\"]}", "{\"type\":\"y\"}", true},
    /* duplicate keys in the event: any occurrence may match */
    {"{\"a\":[1]}", "{\"a\":2,\"a\":1}", true},
    /* a dot in a key is part of the name */
    {"{\"a.b\":[1]}", "{\"a\":{\"b\":1}}", false},
    {"{\"a.b\":[1]}", "{\"a.b\":1}", true},
    /* ruler's reserved words are ordinary field names outside $or */
    {"{\"prefix\":[\"a\"],\"numeric\":[1]}", "{\"prefix\":\"a\",\"numeric\":1}", true},
    /* escaped key in the event */
    {"{\"type\":[\"t\"]}", "{\"typ\\u0065\":\"t\"}", true},
    /* ---- arrays in the event ---- */
    {"{\"resources\":[\"arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f\","
     "\"arn:aws:ec2:us-east-1:111122223333:instance/i-b188560f\"]}",
     "{\"resources\":[\"arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup\","
     "\"arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f\"]}",
     true},
    {"{\"resources\":[\"arn:x\"]}", "{\"resources\":[\"arn:y\",\"arn:z\"]}", false},
    {"{\"resources\":[\"arn:x\"]}", "{\"resources\":[]}", false},
    {"{\"n\":[{\"numeric\":[\">\",10]}]}", "{\"n\":[1,2,30]}", true},
    {"{\"n\":[{\"numeric\":[\">\",10]}]}", "{\"n\":[1,2,3]}", false},
    {"{\"n\":[\"a\"]}", "{\"n\":[[\"b\",[\"a\"]]]}", true},
    {"{\"n\":[\"a\"]}", "{\"n\":[{\"x\":\"a\"}]}", false},
    {"{\"d\":{\"k\":[\"v\"]}}", "{\"d\":[{\"k\":\"w\"},{\"k\":\"v\"}]}", true},
    {"{\"d\":{\"k\":[\"v\"],\"j\":[1]}}", "{\"d\":[{\"k\":\"v\",\"j\":2},{\"k\":\"w\",\"j\":1}]}",
     false},
    {"{\"d\":{\"k\":[\"v\"],\"j\":[1]}}", "{\"d\":[{\"k\":\"v\",\"j\":2},{\"k\":\"v\",\"j\":1}]}",
     true},
    /* ---- nested ---- */
    {"{\"detail\":{\"state\":[\"running\"]}}", "{\"detail\":{\"state\":\"running\"}}", true},
    {"{\"detail\":{\"state\":[\"running\"]}}", "{\"detail\":{\"state\":\"stopped\"}}", false},
    {"{\"detail\":{\"state\":[\"running\"]}}", "{\"state\":\"running\"}", false},
    {"{\"detail\":{\"state\":[\"running\"]}}", "{\"detail\":\"running\"}", false},
    {"{\"a\":{\"b\":{\"c\":[1]}}}", "{\"a\":{\"b\":{\"c\":1,\"d\":2},\"e\":3}}", true},
    {"{\"a\":{\"b\":{\"c\":[1]}}}", "{\"a\":{\"b\":{\"c\":2}}}", false},
    {"{\"detail\":{\"state\":[\"running\"]}}", "{\"detail\":{\"x\":{\"state\":\"running\"}}}",
     false},
    {"{\"source\":[\"s\"],\"detail\":{\"a\":[1],\"b\":[\"x\"]}}",
     "{\"detail\":{\"b\":\"x\",\"a\":1},\"source\":\"s\"}", true},
    /* ---- prefix ---- */
    {"{\"time\":[{\"prefix\":\"2017-10-02\"}]}", "{\"time\":\"2017-10-02T18:43:48Z\"}", true},
    {"{\"time\":[{\"prefix\":\"2017-10-02\"}]}", "{\"time\":\"2017-10-03T18:43:48Z\"}", false},
    {"{\"time\":[{\"prefix\":\"2017-10-02\"}]}", "{\"time\":\"2017-10\"}", false},
    {"{\"n\":[{\"prefix\":\"1\"}]}", "{\"n\":12}", false},
    {"{\"r\":[{\"prefix\":\"us-\"}]}", "{\"r\":[\"eu-west-1\",\"us-east-1\"]}", true},
    {"{\"detail\":{\"service\":[{\"prefix\":{\"equals-ignore-case\":\"EventB\"}}]}}",
     "{\"detail\":{\"service\":\"eventbridge\"}}", true},
    {"{\"detail\":{\"service\":[{\"prefix\":{\"equals-ignore-case\":\"EventB\"}}]}}",
     "{\"detail\":{\"service\":\"EVENTBRIDGE\"}}", true},
    {"{\"detail\":{\"service\":[{\"prefix\":{\"equals-ignore-case\":\"EventB\"}}]}}",
     "{\"detail\":{\"service\":\"Event\"}}", false},
    /* ---- suffix ---- */
    {"{\"FileName\":[{\"suffix\":\".png\"}]}", "{\"FileName\":\"image.png\"}", true},
    {"{\"FileName\":[{\"suffix\":\".png\"}]}", "{\"FileName\":\"image.PNG\"}", false},
    {"{\"FileName\":[{\"suffix\":\".png\"}]}", "{\"FileName\":\"image.jpg\"}", false},
    {"{\"FileName\":[{\"suffix\":\".png\"}]}", "{\"FileName\":\"png\"}", false},
    {"{\"detail\":{\"FileName\":[{\"suffix\":{\"equals-ignore-case\":\".png\"}}]}}",
     "{\"detail\":{\"FileName\":\"a.PnG\"}}", true},
    {"{\"detail\":{\"FileName\":[{\"suffix\":{\"equals-ignore-case\":\".png\"}}]}}",
     "{\"detail\":{\"FileName\":\"a.gif\"}}", false},
    /* ---- anything-but ---- */
    {"{\"detail\":{\"state\":[{\"anything-but\":\"initializing\"}]}}",
     "{\"detail\":{\"state\":\"running\"}}", true},
    {"{\"detail\":{\"state\":[{\"anything-but\":\"initializing\"}]}}",
     "{\"detail\":{\"state\":\"initializing\"}}", false},
    {"{\"detail\":{\"state\":[{\"anything-but\":\"initializing\"}]}}", "{\"detail\":{}}", false},
    {"{\"detail\":{\"x-limit\":[{\"anything-but\":123}]}}", "{\"detail\":{\"x-limit\":456}}", true},
    {"{\"detail\":{\"x-limit\":[{\"anything-but\":123}]}}", "{\"detail\":{\"x-limit\":123.0}}",
     false},
    {"{\"detail\":{\"state\":[{\"anything-but\":[\"stopped\",\"overloaded\"]}]}}",
     "{\"detail\":{\"state\":\"running\"}}", true},
    {"{\"detail\":{\"state\":[{\"anything-but\":[\"stopped\",\"overloaded\"]}]}}",
     "{\"detail\":{\"state\":\"overloaded\"}}", false},
    {"{\"detail\":{\"x-limit\":[{\"anything-but\":[100,200,300]}]}}",
     "{\"detail\":{\"x-limit\":150}}", true},
    {"{\"detail\":{\"x-limit\":[{\"anything-but\":[100,200,300]}]}}",
     "{\"detail\":{\"x-limit\":200}}", false},
    {"{\"detail\":{\"state\":[{\"anything-but\":{\"prefix\":\"init\"}}]}}",
     "{\"detail\":{\"state\":\"running\"}}", true},
    {"{\"detail\":{\"state\":[{\"anything-but\":{\"prefix\":\"init\"}}]}}",
     "{\"detail\":{\"state\":\"initializing\"}}", false},
    {"{\"detail\":{\"FileName\":[{\"anything-but\":{\"suffix\":\".txt\"}}]}}",
     "{\"detail\":{\"FileName\":\"a.png\"}}", true},
    {"{\"detail\":{\"FileName\":[{\"anything-but\":{\"suffix\":\".txt\"}}]}}",
     "{\"detail\":{\"FileName\":\"a.txt\"}}", false},
    {"{\"s\":[{\"anything-but\":{\"equals-ignore-case\":\"initializing\"}}]}",
     "{\"s\":\"INITIALIZING\"}", false},
    {"{\"s\":[{\"anything-but\":{\"equals-ignore-case\":[\"a\",\"b\"]}}]}", "{\"s\":\"B\"}", false},
    {"{\"s\":[{\"anything-but\":{\"equals-ignore-case\":[\"a\",\"b\"]}}]}", "{\"s\":\"c\"}", true},
    {"{\"FilePath\":[{\"anything-but\":{\"wildcard\":\"*/lib/*\"}}]}",
     "{\"FilePath\":\"/usr/lib/x\"}", false},
    {"{\"FilePath\":[{\"anything-but\":{\"wildcard\":\"*/lib/*\"}}]}",
     "{\"FilePath\":\"/usr/bin/x\"}", true},
    {"{\"s\":[{\"anything-but\":[\"a\"]}]}", "{\"s\":[\"a\",\"b\"]}", true},
    {"{\"s\":[{\"anything-but\":[\"a\"]}]}", "{\"s\":[\"a\"]}", false},
    /* anything-but matches every other value, whatever its type */
    {"{\"s\":[{\"anything-but\":\"a\"}]}", "{\"s\":true}", true},
    {"{\"s\":[{\"anything-but\":\"a\"}]}", "{\"s\":null}", true},
    {"{\"s\":[{\"anything-but\":\"a\"}]}", "{\"s\":5}", true},
    {"{\"s\":[{\"anything-but\":\"5\"}]}", "{\"s\":5}", true},
    {"{\"s\":[{\"anything-but\":\"a\"}]}", "{}", false},
    {"{\"s\":[{\"anything-but\":\"a\"}]}", "{\"s\":[]}", false},
    {"{\"s\":[{\"anything-but\":\"a\"}]}", "{\"s\":{\"x\":\"b\"}}", false},
    {"{\"n\":[{\"anything-but\":[100,200]}]}", "{\"n\":\"100\"}", true},
    {"{\"n\":[{\"anything-but\":[100,200]}]}", "{\"n\":1e2}", false},
    {"{\"n\":[{\"anything-but\":[100,200]}]}", "{\"n\":false}", true},
    {"{\"n\":[{\"anything-but\":100}]}", "{\"n\":100.0}", false},
    {"{\"s\":[{\"anything-but\":{\"prefix\":\"init\"}}]}", "{\"s\":5}", true},
    {"{\"s\":[{\"anything-but\":{\"prefix\":\"init\"}}]}", "{\"s\":null}", true},
    {"{\"s\":[{\"anything-but\":{\"suffix\":\".txt\"}}]}", "{\"s\":true}", true},
    {"{\"s\":[{\"anything-but\":{\"equals-ignore-case\":\"a\"}}]}", "{\"s\":1}", true},
    {"{\"s\":[{\"anything-but\":{\"wildcard\":\"*\"}}]}", "{\"s\":1}", true},
    {"{\"s\":[{\"anything-but\":{\"wildcard\":\"*\"}}]}", "{\"s\":\"\"}", false},
    /* lists of prefixes, suffixes, wildcards */
    {"{\"s\":[{\"anything-but\":{\"prefix\":[\"init\",\"stop\"]}}]}", "{\"s\":\"stopped\"}", false},
    {"{\"s\":[{\"anything-but\":{\"prefix\":[\"init\",\"stop\"]}}]}", "{\"s\":\"initial\"}", false},
    {"{\"s\":[{\"anything-but\":{\"prefix\":[\"init\",\"stop\"]}}]}", "{\"s\":\"running\"}", true},
    {"{\"f\":[{\"anything-but\":{\"suffix\":[\".txt\",\".rtf\"]}}]}", "{\"f\":\"a.rtf\"}", false},
    {"{\"f\":[{\"anything-but\":{\"suffix\":[\".txt\",\".rtf\"]}}]}", "{\"f\":\"a.png\"}", true},
    {"{\"f\":[{\"anything-but\":{\"wildcard\":[\"*/lib/*\",\"*/bin/*\"]}}]}",
     "{\"f\":\"/usr/bin/x\"}", false},
    {"{\"f\":[{\"anything-but\":{\"wildcard\":[\"*/lib/*\",\"*/bin/*\"]}}]}",
     "{\"f\":\"/usr/sbin2/x\"}", true},
    /* ---- numeric ---- */
    {"{\"detail\":{\"c-count\":[{\"numeric\":[\">\",0,\"<=\",5]}]}}",
     "{\"detail\":{\"c-count\":5}}", true},
    {"{\"detail\":{\"c-count\":[{\"numeric\":[\">\",0,\"<=\",5]}]}}",
     "{\"detail\":{\"c-count\":0}}", false},
    {"{\"detail\":{\"c-count\":[{\"numeric\":[\">\",0,\"<=\",5]}]}}",
     "{\"detail\":{\"c-count\":5.0001}}", false},
    {"{\"detail\":{\"c-count\":[{\"numeric\":[\">\",0,\"<=\",5]}]}}",
     "{\"detail\":{\"c-count\":\"3\"}}", false},
    {"{\"detail\":{\"d-count\":[{\"numeric\":[\"<\",10]}]}}", "{\"detail\":{\"d-count\":9.99}}",
     true},
    {"{\"detail\":{\"d-count\":[{\"numeric\":[\"<\",10]}]}}", "{\"detail\":{\"d-count\":10}}",
     false},
    {"{\"detail\":{\"x-limit\":[{\"numeric\":[\"=\",3.018e2]}]}}",
     "{\"detail\":{\"x-limit\":301.8}}", true},
    {"{\"detail\":{\"x-limit\":[{\"numeric\":[\"=\",3.018e2]}]}}",
     "{\"detail\":{\"x-limit\":301.9}}", false},
    {"{\"n\":[{\"numeric\":[\">=\",-5,\"<\",5]}]}", "{\"n\":-5}", true},
    {"{\"n\":[{\"numeric\":[\">=\",-5,\"<\",5]}]}", "{\"n\":5}", false},
    {"{\"n\":[{\"numeric\":[\">=\",1e3]}]}", "{\"n\":1000}", true},
    {"{\"n\":[{\"numeric\":[\"<=\",0]}]}", "{\"n\":-0.0}", true},
    {"{\"n\":[{\"numeric\":[\">\",100]}]}",
     "{\"n\":100.00000000000000000000000000000000000000000000000000000000000000000001}", false},
    /* numeric matching is limited to -5e9..5e9, on both sides */
    {"{\"n\":[{\"numeric\":[\">\",100]}]}",
     "{\"n\":100000000000000000000000000000000000000000000000000000000000000000000000.5}", false},
    {"{\"n\":[{\"numeric\":[\">\",100]}]}", "{\"n\":5e9}", true},
    {"{\"n\":[{\"numeric\":[\">\",100]}]}", "{\"n\":5000000000.5}", false},
    {"{\"n\":[{\"numeric\":[\"<\",0]}]}", "{\"n\":-6e9}", false},
    {"{\"n\":[{\"numeric\":[\"<=\",5e9]}]}", "{\"n\":5000000000}", true},
    {"{\"n\":[{\"numeric\":[\">=\",-5e9,\"<=\",5e9]}]}", "{\"n\":-5e9}", true},
    {"{\"n\":[{\"numeric\":[\"=\",300]}]}", "{\"n\":3.0e2}", true},
    {"{\"n\":[{\"numeric\":[\"=\",300]}]}", "{\"n\":300.0}", true},
    {"{\"n\":[{\"numeric\":[\"=\",-0]}]}", "{\"n\":0}", true},
    {"{\"n\":[{\"numeric\":[\">\",0.1234567]}]}", "{\"n\":0.12345671}", true},
    {"{\"n\":[{\"numeric\":[\">\",1]}]}", "{\"n\":null}", false},
    /* ---- exists ---- */
    {"{\"detail\":{\"state\":[{\"exists\":true}]}}", "{\"detail\":{\"state\":\"x\"}}", true},
    {"{\"detail\":{\"state\":[{\"exists\":true}]}}", "{\"detail\":{\"state\":null}}", true},
    {"{\"detail\":{\"state\":[{\"exists\":true}]}}", "{\"detail\":{}}", false},
    {"{\"detail\":{\"state\":[{\"exists\":false}]}}", "{\"detail\":{}}", true},
    {"{\"detail\":{\"state\":[{\"exists\":false}]}}", "{\"detail\":{\"state\":1}}", false},
    {"{\"detail\":{\"state\":[{\"exists\":false}]}}", "{\"other\":1}", true},
    {"{\"detail\":{\"state\":[{\"exists\":true}]}}", "{\"detail\":{\"state\":{\"a\":1}}}", false},
    {"{\"detail\":{\"state\":[{\"exists\":false}]}}", "{\"detail\":{\"state\":{\"a\":1}}}", true},
    {"{\"s\":[{\"exists\":true}]}", "{\"s\":[]}", false},
    {"{\"s\":[{\"exists\":false}]}", "{\"s\":[]}", true},
    {"{\"s\":[{\"exists\":true}]}", "{\"s\":[1]}", true},
    {"{\"s\":[\"a\",{\"exists\":false}]}", "{}", true},
    {"{\"s\":[\"a\",{\"exists\":false}]}", "{\"s\":\"a\"}", true},
    {"{\"s\":[\"a\",{\"exists\":false}]}", "{\"s\":\"b\"}", false},
    /* ---- equals-ignore-case ---- */
    {"{\"detail-type\":[{\"equals-ignore-case\":\"ec2 instance state-change notification\"}]}",
     "{\"detail-type\":\"EC2 Instance State-change Notification\"}", true},
    {"{\"detail-type\":[{\"equals-ignore-case\":\"ec2\"}]}", "{\"detail-type\":\"ec2x\"}", false},
    {"{\"detail-type\":[{\"equals-ignore-case\":\"ec2\"}]}", "{\"detail-type\":\"ec\"}", false},
    /* Unicode case mapping, per character */
    {"{\"s\":[{\"equals-ignore-case\":\"café\"}]}", "{\"s\":\"CAFÉ\"}", true},
    {"{\"s\":[{\"equals-ignore-case\":\"CAFÉ\"}]}", "{\"s\":\"caf\\u00e9\"}", true},
    {"{\"s\":[{\"equals-ignore-case\":\"café\"}]}", "{\"s\":\"CAFE\"}", false},
    {"{\"s\":[{\"equals-ignore-case\":\"café\"}]}", "{\"s\":\"CAFÉS\"}", false},
    {"{\"s\":[{\"equals-ignore-case\":\"ΣΟΦΙΑ\"}]}", "{\"s\":\"σοφια\"}", true},
    {"{\"s\":[{\"equals-ignore-case\":\"ⱥb\"}]}", "{\"s\":\"ȺB\"}", true},
    {"{\"s\":[{\"equals-ignore-case\":\"k\"}]}", "{\"s\":\"\\u212a\"}", false},
    {"{\"s\":[{\"prefix\":{\"equals-ignore-case\":\"ÉT\"}}]}", "{\"s\":\"été\"}", true},
    {"{\"s\":[{\"prefix\":{\"equals-ignore-case\":\"ÉTÉS\"}}]}", "{\"s\":\"été\"}", false},
    {"{\"s\":[{\"suffix\":{\"equals-ignore-case\":\".ÉTÉ\"}}]}", "{\"s\":\"x.été\"}", true},
    {"{\"s\":[{\"suffix\":{\"equals-ignore-case\":\"ⱥ\"}}]}", "{\"s\":\"xȺ\"}", true},
    {"{\"s\":[{\"suffix\":{\"equals-ignore-case\":\"ⱥⱥ\"}}]}", "{\"s\":\"Ⱥ\"}", false},
    {"{\"s\":[{\"anything-but\":{\"equals-ignore-case\":[\"ÉTÉ\",\"x\"]}}]}", "{\"s\":\"été\"}",
     false},
    {"{\"s\":[{\"anything-but\":{\"equals-ignore-case\":[\"ÉTÉ\",\"x\"]}}]}", "{\"s\":\"ete\"}",
     true},
    /* ---- wildcard ---- */
    {"{\"EventBusArn\":[{\"wildcard\":\"arn:aws:events:us-east-1:*:event-bus/*\"}]}",
     "{\"EventBusArn\":\"arn:aws:events:us-east-1:123456789012:event-bus/default\"}", true},
    {"{\"EventBusArn\":[{\"wildcard\":\"arn:aws:events:us-east-1:*:event-bus/*\"}]}",
     "{\"EventBusArn\":\"arn:aws:events:us-west-2:123456789012:event-bus/default\"}", false},
    {"{\"f\":[{\"wildcard\":\"dir/*.png\"}]}", "{\"f\":\"dir/a/b.png\"}", true},
    {"{\"f\":[{\"wildcard\":\"dir/*.png\"}]}", "{\"f\":\"dir/a.png.txt\"}", false},
    {"{\"f\":[{\"wildcard\":\"dir/*.png\"}]}", "{\"f\":\"dir.png\"}", false},
    {"{\"f\":[{\"wildcard\":\"*\"}]}", "{\"f\":\"\"}", true},
    {"{\"f\":[{\"wildcard\":\"*\"}]}", "{\"f\":1}", false},
    {"{\"f\":[{\"wildcard\":\"a*a\"}]}", "{\"f\":\"a\"}", false},
    {"{\"f\":[{\"wildcard\":\"a*a\"}]}", "{\"f\":\"aa\"}", true},
    {"{\"f\":[{\"wildcard\":\"*ab*ab*\"}]}", "{\"f\":\"xabyab\"}", true},
    {"{\"f\":[{\"wildcard\":\"*ab*ab*\"}]}", "{\"f\":\"xaby\"}", false},
    {"{\"f\":[{\"wildcard\":\"a\\\\*b\"}]}", "{\"f\":\"a*b\"}", true},
    {"{\"f\":[{\"wildcard\":\"a\\\\*b\"}]}", "{\"f\":\"axb\"}", false},
    {"{\"f\":[{\"wildcard\":\"a\\\\\\\\*\"}]}", "{\"f\":\"a\\\\xyz\"}", true},
    {"{\"f\":[{\"wildcard\":\"abc\"}]}", "{\"f\":\"abc\"}", true},
    {"{\"f\":[{\"wildcard\":\"abc\"}]}", "{\"f\":\"abcd\"}", false},
    /* ---- cidr ---- */
    {"{\"detail\":{\"sourceIPAddress\":[{\"cidr\":\"10.0.0.0/24\"}]}}",
     "{\"detail\":{\"sourceIPAddress\":\"10.0.0.255\"}}", true},
    {"{\"detail\":{\"sourceIPAddress\":[{\"cidr\":\"10.0.0.0/24\"}]}}",
     "{\"detail\":{\"sourceIPAddress\":\"10.0.1.1\"}}", false},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/24\"}]}", "{\"ip\":\"not an ip\"}", false},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/24\"}]}", "{\"ip\":\"::ffff:10.0.0.1\"}", false},
    {"{\"ip\":[{\"cidr\":\"10.0.0.7/8\"}]}", "{\"ip\":\"10.200.3.4\"}", true},
    {"{\"ip\":[{\"cidr\":\"192.168.1.0/25\"}]}", "{\"ip\":\"192.168.1.127\"}", true},
    {"{\"ip\":[{\"cidr\":\"192.168.1.0/25\"}]}", "{\"ip\":\"192.168.1.128\"}", false},
    {"{\"ip\":[{\"cidr\":\"0.0.0.0/0\"}]}", "{\"ip\":\"8.8.8.8\"}", true},
    {"{\"ip\":[{\"cidr\":\"1.2.3.4/32\"}]}", "{\"ip\":\"1.2.3.4\"}", true},
    {"{\"ip\":[{\"cidr\":\"1.2.3.4/32\"}]}", "{\"ip\":\"1.2.3.5\"}", false},
    {"{\"ip\":[{\"cidr\":\"::1/128\"}]}", "{\"ip\":\"0:0:0:0:0:0:0:1\"}", true},
    {"{\"ip\":[{\"cidr\":\"::/96\"}]}", "{\"ip\":\"::1.2.3.4\"}", false},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/8\"}]}", "{\"ip\":10}", false},
    /* an exact string is not an address: no normalization */
    {"{\"ip\":[\"::1\"]}", "{\"ip\":\"0::1\"}", false},
    {"{\"ip\":[{\"cidr\":\"2001:db8::/32\"}]}", "{\"ip\":\"2001:db8:1234::1\"}", true},
    {"{\"ip\":[{\"cidr\":\"2001:db8::/32\"}]}", "{\"ip\":\"2001:db9::1\"}", false},
    {"{\"ip\":[{\"cidr\":\"2001:db8::/32\"}]}", "{\"ip\":\"10.0.0.1\"}", false},
    {"{\"ip\":[{\"cidr\":\"fe80::/10\"}]}", "{\"ip\":\"febf::1\"}", true},
    {"{\"ip\":[{\"cidr\":\"fe80::/10\"}]}", "{\"ip\":\"fec0::1\"}", false},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/24\"}]}", "{\"ip\":[\"1.1.1.1\",\"10.0.0.9\"]}", true},
    /* ---- $or ---- */
    {"{\"$or\":[{\"c-count\":[{\"numeric\":[\">\",0,\"<=\",5]}]},"
     "{\"d-count\":[{\"numeric\":[\"<\",10]}]},{\"x-limit\":[{\"anything-but\":[100,200,300]}]}]}",
     "{\"d-count\":3}", true},
    {"{\"$or\":[{\"c-count\":[{\"numeric\":[\">\",0,\"<=\",5]}]},"
     "{\"d-count\":[{\"numeric\":[\"<\",10]}]},{\"x-limit\":[{\"anything-but\":[100,200,300]}]}]}",
     "{\"x-limit\":200,\"d-count\":11,\"c-count\":6}", false},
    {"{\"source\":[\"aws.ec2\"],\"$or\":[{\"a\":[1]},{\"b\":[2]}]}",
     "{\"source\":\"aws.ec2\",\"b\":2}", true},
    {"{\"source\":[\"aws.ec2\"],\"$or\":[{\"a\":[1]},{\"b\":[2]}]}",
     "{\"source\":\"aws.s3\",\"b\":2}", false},
    {"{\"source\":[\"aws.ec2\"],\"$or\":[{\"a\":[1]},{\"b\":[2]}]}",
     "{\"source\":\"aws.ec2\",\"a\":2,\"b\":1}", false},
    {"{\"detail\":{\"$or\":[{\"state\":[\"on\"]},{\"level\":[{\"numeric\":[\">\",3]}]}]}}",
     "{\"detail\":{\"level\":4}}", true},
    {"{\"detail\":{\"$or\":[{\"state\":[\"on\"]},{\"level\":[{\"numeric\":[\">\",3]}]}]}}",
     "{\"detail\":{\"level\":3,\"state\":\"off\"}}", false},
    {"{\"$or\":[{\"a\":{\"$or\":[{\"x\":[1]},{\"y\":[1]}]}},{\"b\":[1]}]}", "{\"a\":{\"y\":1}}",
     true},
    {"{\"$or\":[{\"a\":[{\"exists\":false}]},{\"b\":[1]}]}", "{\"a\":1,\"b\":2}", false},
    {"{\"$or\":[{\"a\":[{\"exists\":false}]},{\"b\":[1]}]}", "{\"b\":2}", true},
    /* ---- a CloudEvent ---- */
    {"{\"type\":[\"order.created\"],\"data\":{\"amount\":[{\"numeric\":[\">\",100]}]}}",
     "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/shop\",\"type\":\"order.created\","
     "\"data\":{\"amount\":150.5,\"items\":[{\"sku\":\"a\"}]}}",
     true},
    {"{\"type\":[\"order.created\"],\"data\":{\"amount\":[{\"numeric\":[\">\",100]}]}}",
     "{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/shop\",\"type\":\"order.created\","
     "\"data\":{\"amount\":99,\"items\":[{\"sku\":\"a\"}]}}",
     false},
    {"{\"data\":{\"items\":{\"sku\":[{\"prefix\":\"b\"}]}}}",
     "{ \"data\" : { \"items\" : [ { \"sku\" : \"a1\" } , { \"sku\" : \"b2\" } ] } }", true},
};

static void test_match_table(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mcase *c = &cases[i];
        sl_pattern *p = NULL;
        sl_error err = {0};
        int rc = sl_pattern_compile(c->pattern, strlen(c->pattern), &p, &err);
        if (rc != 0) {
            fprintf(stderr, "case %zu: compile %s: %s\n", i, c->pattern, err.msg);
            failures++;
            continue;
        }
        bool m = !c->match;
        rc = sl_pattern_match(p, c->event, strlen(c->event), &m, &err);
        if (rc != 0 || m != c->match) {
            fprintf(stderr, "case %zu: pattern %s event %s: rc %d, got %d, want %d (%s)\n", i,
                    c->pattern, c->event, rc, m, c->match, rc ? err.msg : "");
            failures++;
        }
        sl_pattern_free(p);
    }
    assert_int_equal(failures, 0);
}

typedef struct bcase {
    const char *pattern;
    int code;
    const char *msg; /* a substring of the error message */
} bcase;

static const bcase bad_cases[] = {
    {"{\"detail\":{\"amount\":[{\"numeric\":[\">\"]}]}}", SL_EINVAL, "detail.amount: numeric"},
    {"{\"detail\":{\"amount\":[{\"numeric\":[\">\",\"5\"]}]}}", SL_EINVAL,
     "detail.amount: numeric needs an operator and a number"},
    {"{\"a\":[{\"numeric\":[\"~\",5]}]}", SL_EINVAL, "a: numeric: unknown operator \"~\""},
    {"{\"a\":[{\"numeric\":[\"<\",5,\">\",1]}]}", SL_EINVAL, "a: numeric: a range"},
    {"{\"a\":[{\"numeric\":[\">\",5,\">\",1]}]}", SL_EINVAL, "a: numeric: a range"},
    {"{\"a\":[{\"numeric\":[\"=\",5,\"<\",1]}]}", SL_EINVAL, "a: numeric: \"=\""},
    {"{\"a\":[{\"numeric\":5}]}", SL_EINVAL, "a: numeric needs"},
    {"{\"a\":[{\"numeric\":[\">\",1,\"<\"]}]}", SL_EINVAL, "a: numeric needs"},
    {"{\"x\":{\"y\":[{\"prefx\":\"a\"}]}}", SL_EINVAL, "x.y: unknown operator \"prefx\""},
    {"{\"a\":\"b\"}", SL_EINVAL, "a: pattern leaf must be an array"},
    {"{\"a\":{\"b\":5}}", SL_EINVAL, "a.b: pattern leaf must be an array"},
    {"{\"a\":[]}", SL_EINVAL, "a: pattern leaf array must not be empty"},
    {"{\"a\":[[\"b\"]]}", SL_EINVAL, "a: a pattern leaf may not hold nested arrays"},
    {"{\"a\":[{\"prefix\":\"x\",\"suffix\":\"y\"}]}", SL_EINVAL, "a: an operator object"},
    {"{\"a\":[{}]}", SL_EINVAL, "a: an operator object"},
    {"{\"a\":[{\"prefix\":5}]}", SL_EINVAL, "a: prefix needs a string"},
    {"{\"a\":[{\"suffix\":{\"equals-ignore-case\":1}}]}", SL_EINVAL, "a: suffix needs a string"},
    {"{\"a\":[{\"equals-ignore-case\":[\"x\"]}]}", SL_EINVAL, "a: equals-ignore-case needs"},
    {"{\"a\":[{\"exists\":\"yes\"}]}", SL_EINVAL, "a: exists needs true or false"},
    {"{\"a\":[{\"anything-but\":true}]}", SL_EINVAL, "a: anything-but needs"},
    {"{\"a\":[{\"anything-but\":[]}]}", SL_EINVAL, "a: anything-but list must not be empty"},
    {"{\"a\":[{\"anything-but\":[\"x\",1]}]}", SL_EINVAL, "a: anything-but list must hold only"},
    {"{\"a\":[{\"anything-but\":{\"prefix\":1}}]}", SL_EINVAL, "a: anything-but prefix needs"},
    {"{\"a\":[{\"anything-but\":{\"prefx\":\"a\"}}]}", SL_EINVAL,
     "a: unknown anything-but operator \"prefx\""},
    {"{\"a\":[{\"anything-but\":{\"prefix\":\"a\",\"suffix\":\"b\"}}]}", SL_EINVAL,
     "a: anything-but takes one operator"},
    {"{\"a\":[{\"wildcard\":\"a**b\"}]}", SL_EINVAL, "a: wildcard \"a**b\": consecutive"},
    {"{\"a\":[{\"wildcard\":\"a\\\\b\"}]}", SL_EINVAL, "a: wildcard \"a\\b\": a backslash"},
    {"{\"a\":[{\"wildcard\":3}]}", SL_EINVAL, "a: wildcard needs a string"},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/33\"}]}", SL_EINVAL, "ip: cidr: \"10.0.0.0/33\""},
    {"{\"ip\":[{\"cidr\":\"10.0.0/8\"}]}", SL_EINVAL, "ip: cidr: \"10.0.0/8\""},
    {"{\"ip\":[{\"cidr\":\"::/129\"}]}", SL_EINVAL, "ip: cidr: \"::/129\""},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/x\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"ip\":[{\"cidr\":1}]}", SL_EINVAL, "ip: cidr needs a string"},
    {"{\"$or\":[]}", SL_EINVAL, "$or: $or needs an array of at least two pattern objects"},
    {"{\"$or\":[{\"a\":[1]}]}", SL_EINVAL, "$or: $or needs an array of at least two"},
    {"{\"$or\":[{\"a\":[1]},{}]}", SL_EINVAL, "(pattern): empty objects are not allowed"},
    {"{\"$or\":[{\"prefix\":[\"a\"]},{\"b\":[1]}]}", SL_EINVAL,
     "prefix: \"prefix\" is a reserved word and cannot be a field name in $or"},
    {"{\"$or\":[{\"a\":{\"numeric\":[1]}},{\"b\":[1]}]}", SL_EINVAL,
     "a.numeric: \"numeric\" is a reserved word"},
    {"{\"$or\":[{\"a\":[1]},{\"b\":{\"$or\":[{\">=\":[1]},{\"c\":[1]}]}}]}", SL_EINVAL,
     "b.>=: \">=\" is a reserved word"},
    {"{}", SL_EINVAL, "(pattern): empty objects are not allowed"},
    {"{\"a\":{}}", SL_EINVAL, "a: empty objects are not allowed"},
    {"{\"a\":{\"b\":[1]},\"c\":{\"d\":{}}}", SL_EINVAL, "c.d: empty objects are not allowed"},
    {"{\"source\":5}", SL_EINVAL, "source: pattern leaf must be an array"},
    {"{\"source\":null}", SL_EINVAL, "source: pattern leaf must be an array"},
    {"{\"a\":[{\"contains\":\"x\"}]}", SL_EINVAL, "a: unknown operator \"contains\""},
    {"{\"a\":[{\"exactly\":\"x\"}]}", SL_EINVAL, "a: unknown operator \"exactly\""},
    /* numeric limits and ranges */
    {"{\"a\":[{\"numeric\":[\">\",5000000001]}]}", SL_EINVAL,
     "a: numeric value 5000000001 is outside the range -5e9 to 5e9"},
    {"{\"a\":[{\"numeric\":[\"=\",-5.1e9]}]}", SL_EINVAL, "numeric value -5.1e9 is outside"},
    {"{\"a\":[{\"numeric\":[\"<\",1e400]}]}", SL_EINVAL, "numeric value 1e400 is outside"},
    {"{\"a\":[{\"numeric\":[\">=\",5e9]}]}", SL_EINVAL,
     "a: numeric: the lower bound must be less than the upper bound"},
    {"{\"a\":[{\"numeric\":[\"<\",-5e9]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">\",5,\"<\",5]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">=\",5,\"<=\",5]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">\",6,\"<=\",5]}]}", SL_EINVAL, "the lower bound must be less"},
    {"{\"a\":[{\"numeric\":[\">\",1,\"<\",2,\"<\",3]}]}", SL_EINVAL, "a: numeric needs"},
    /* anything-but */
    {"{\"a\":[{\"anything-but\":{\"prefix\":\"\"}}]}", SL_EINVAL,
     "a: anything-but prefix must not be empty"},
    {"{\"a\":[{\"anything-but\":{\"suffix\":[\"x\",\"\"]}}]}", SL_EINVAL,
     "a: anything-but suffix must not be empty"},
    {"{\"a\":[{\"anything-but\":{\"prefix\":[]}}]}", SL_EINVAL,
     "a: anything-but list must not be empty"},
    {"{\"a\":[{\"anything-but\":{\"prefix\":[1]}}]}", SL_EINVAL,
     "a: anything-but prefix needs a string or a list of strings"},
    {"{\"a\":[{\"anything-but\":{\"equals-ignore-case\":[\"x\",null]}}]}", SL_EINVAL,
     "a: anything-but equals-ignore-case needs a string"},
    {"{\"a\":[{\"anything-but\":{\"wildcard\":[\"a**\"]}}]}", SL_EINVAL,
     "a: wildcard \"a**\": consecutive"},
    {"{\"a\":[{\"anything-but\":6e9}]}", SL_EINVAL, "a: numeric value 6e9 is outside"},
    {"{\"a\":[{\"anything-but\":[1,-6e9]}]}", SL_EINVAL, "a: numeric value -6e9 is outside"},
    {"{\"a\":[{\"anything-but\":[null]}]}", SL_EINVAL, "a: anything-but needs"},
    {"{\"a\":[{\"anything-but\":[[\"x\"]]}]}", SL_EINVAL, "a: anything-but needs"},
    {"{\"a\":[{\"anything-but\":{\"exists\":true}}]}", SL_EINVAL,
     "a: unknown anything-but operator \"exists\""},
    {"{\"a\":[{\"anything-but\":{\"numeric\":[\">\",1]}}]}", SL_EINVAL,
     "a: unknown anything-but operator \"numeric\""},
    {"{\"a\":[{\"prefix\":{\"equals-ignore-case\":\"x\",\"y\":1}}]}", SL_EINVAL,
     "a: prefix needs a string"},
    {"{\"a\":[{\"suffix\":{\"prefix\":\"x\"}}]}", SL_EINVAL, "a: suffix needs a string"},
    /* cidr */
    {"{\"ip\":[{\"cidr\":\"1.2.3.4\"}]}", SL_EINVAL,
     "ip: cidr: \"1.2.3.4\" is not an address/prefix-length"},
    {"{\"ip\":[{\"cidr\":\"::ffff:1.2.3.4/96\"}]}", SL_EINVAL, "ip: cidr: \"::ffff:1.2.3.4/96\""},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/8/8\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"ip\":[{\"cidr\":\"10.0.0.0/-1\"}]}", SL_EINVAL, "ip: cidr"},
    {"{\"$or\":{\"a\":[1]}}", SL_EINVAL, "$or needs"},
    {"{\"d\":{\"$or\":[{\"a\":[1]},5]}}", SL_EINVAL, "d.$or: $or needs"},
    {"{\"$or\":[{\"a\":[1]},{\"b\":{\"c\":[{\"nope\":1}]}}]}", SL_EINVAL,
     "b.c: unknown operator \"nope\""},
    {"[\"a\"]", SL_EINVAL, "a pattern must be a JSON object"},
    {"{\"a\":[1]", SL_EPARSE, "not valid JSON"},
    {"{\"a\":[1]} x", SL_EPARSE, "not valid JSON"},
    {"{\"a\":[\"\\x\"]}", SL_EPARSE, "not valid JSON"},
    {"", SL_EPARSE, "not valid JSON"},
};

static void test_invalid_patterns(void **state)
{
    (void)state;
    int failures = 0;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bcase *c = &bad_cases[i];
        sl_pattern *p = (sl_pattern *)&failures; /* must stay untouched */
        sl_error err = {0};
        int rc = sl_pattern_compile(c->pattern, strlen(c->pattern), &p, &err);
        if (rc != c->code || err.code != c->code || !strstr(err.msg, c->msg) ||
            p != (sl_pattern *)&failures) {
            fprintf(stderr, "bad case %zu: %s: rc %d, message \"%s\", want %d \"%s\"\n", i,
                    c->pattern, rc, err.msg, c->code, c->msg);
            failures++;
            if (rc == 0)
                sl_pattern_free(p);
        }
    }
    assert_int_equal(failures, 0);
}

/* "[0,1,…,n-1]" appended to b (values of one field). */
static void values(char *b, size_t cap, int n)
{
    size_t o = strlen(b);
    o += (size_t)snprintf(b + o, cap - o, "[");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(b + o, cap - o, "%s%d", i ? "," : "", i);
    snprintf(b + o, cap - o, "]");
}

/* Compiles the pattern fmt, where each "#" stands for a value list whose
 * length is the next argument; returns the compile result, err filled. */
static int compile_n(sl_error *err, const char *fmt, ...)
{
    static char b[1 << 16];
    va_list ap;
    va_start(ap, fmt);
    b[0] = '\0';
    for (const char *f = fmt; *f; f++) {
        if (*f == '#') {
            values(b, sizeof b, va_arg(ap, int));
        } else {
            size_t o = strlen(b);
            b[o] = *f;
            b[o + 1] = '\0';
        }
    }
    va_end(ap);
    sl_pattern *p = NULL;
    int rc = sl_pattern_compile(b, strlen(b), &p, err);
    sl_pattern_free(p);
    return rc;
}

/* EventBridge's limit of 1,000 combinations: values of fields multiply,
 * $or alternatives add up and multiply the fields beside them. */
static void test_combinations(void **state)
{
    (void)state;
    sl_error err = {0};
    /* 10 * 10 * 10 = 1,000: at the limit, accepted */
    assert_int_equal(compile_n(&err, "{\"a\":#,\"b\":#,\"c\":{\"d\":#}}", 10, 10, 10), 0);
    /* 1,001 */
    assert_int_equal(compile_n(&err, "{\"a\":#,\"b\":#,\"c\":{\"d\":#}}", 7, 11, 13), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,001 combinations"));
    assert_non_null(strstr(err.msg, "limit of 1,000"));
    /* $or: 999 + 1 = 1,000 is fine, 1,000 + 1 is not */
    assert_int_equal(compile_n(&err, "{\"$or\":[{\"a\":#},{\"b\":#}]}", 999, 1), 0);
    memset(&err, 0, sizeof err);
    assert_int_equal(compile_n(&err, "{\"$or\":[{\"a\":#},{\"b\":#}]}", 1000, 1), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,001 combinations"));
    /* nested $or: 4 * (5 + 10 * (20 + 4)) = 980 and 4 * (5 + 10 * (20 + 5)) = 1,020 */
    const char *nested = "{\"x\":#,\"$or\":[{\"y\":#},{\"v\":#,\"$or\":[{\"z\":#},{\"w\":#}]}]}";
    assert_int_equal(compile_n(&err, nested, 4, 5, 10, 20, 4), 0);
    assert_int_equal(compile_n(&err, nested, 4, 5, 10, 20, 5), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,020 combinations"));
    /* $or in two sibling objects multiply: (20 + 11) * (16 + 16) = 992, (20 + 12) * 32 = 1,024 */
    const char *two =
        "{\"d\":{\"$or\":[{\"a\":#},{\"b\":#}]},\"e\":{\"$or\":[{\"c\":#},{\"f\":#}]}}";
    assert_int_equal(compile_n(&err, two, 20, 11, 16, 16), 0);
    assert_int_equal(compile_n(&err, two, 20, 12, 16, 16), SL_EINVAL);
    assert_non_null(strstr(err.msg, "1,024 combinations"));
    /* an operator with a list is one value: 999 numbers excluded, times 1 */
    assert_int_equal(compile_n(&err, "{\"a\":[{\"anything-but\":#}],\"b\":#}", 999, 1000), 0);
    /* 20 fields of 20 values: 20^20 overflows 64 bits and still gets a message */
    char many[4096] = "{";
    for (int i = 0; i < 20; i++) {
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"f%d\":", i ? "," : "", i);
        values(many, sizeof many, 20);
    }
    strcat(many, "}");
    sl_pattern *p = NULL;
    assert_int_equal(sl_pattern_compile(many, strlen(many), &p, &err), SL_EINVAL);
    assert_null(p);
    assert_non_null(strstr(err.msg, "more than 18,446,744,073,709,551,615 combinations"));
}

static void test_invalid_events(void **state)
{
    (void)state;
    static const struct {
        const char *event;
        int code;
    } evs[] = {
        {"{\"a\":", SL_EPARTIAL},       {"{\"a\":1,}", SL_EPARSE},
        {"{\"a\":1} x", SL_EPARSE},     {"", SL_EPARTIAL},
        {"[1,2]", SL_EINVAL},           {"\"str\"", SL_EINVAL},
        {"{\"a\":\"\\x\"}", SL_EPARSE},
    };
    const char *pat = "{\"a\":[{\"exists\":false}]}";
    sl_pattern *p = NULL;
    assert_int_equal(sl_pattern_compile(pat, strlen(pat), &p, NULL), 0);
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        sl_error err = {0};
        bool m = true;
        int rc = sl_pattern_match(p, evs[i].event, strlen(evs[i].event), &m, &err);
        if (rc != evs[i].code)
            fprintf(stderr, "event %zu: %s: rc %d want %d\n", i, evs[i].event, rc, evs[i].code);
        assert_int_equal(rc, evs[i].code);
        assert_true(err.msg[0] != '\0');
        assert_true(m); /* untouched */
    }
    sl_pattern_free(p);
}

/* Long escaped strings and long numbers take the heap fallback. */
static void test_long_values(void **state)
{
    (void)state;
    size_t n = 5000;
    char *ev = malloc(n * 2 + 200), *pat = malloc(n + 100);
    assert_non_null(ev);
    assert_non_null(pat);
    char *e = ev, *q = pat;
    e += sprintf(e, "{\"s\":\"");
    q += sprintf(q, "{\"s\":[\"");
    for (size_t i = 0; i < n; i++) {
        e += sprintf(e, i % 100 == 0 ? "\\u0041" : "b");
        *q++ = i % 100 == 0 ? 'A' : 'b';
    }
    /* A long number within the numeric limits: 4999999999.000…001. */
    e += sprintf(e, "\",\"n\":4999999999.");
    for (size_t i = 0; i < 300; i++)
        *e++ = '0';
    e += sprintf(e, "1}");
    q += sprintf(q, "\"],\"n\":[{\"numeric\":[\">\",4999999998.5]}]}");
    sl_pattern *p = NULL;
    sl_error err = {0};
    assert_int_equal(sl_pattern_compile(pat, (size_t)(q - pat), &p, &err), 0);
    bool m = false;
    assert_int_equal(sl_pattern_match(p, ev, (size_t)(e - ev), &m, &err), 0);
    assert_true(m);
    sl_pattern_free(p);
    free(ev);
    free(pat);
}

/* Arrays nested as deep as the scanner allows, for both recursions (leaf
 * values and object patterns); under ASan this also checks stack use. */
static void test_deep_arrays(void **state)
{
    (void)state;
    size_t depth = 1000;
    char *ev = malloc(depth * 2 + 64);
    assert_non_null(ev);
    char *e = ev;
    e += sprintf(e, "{\"s\":");
    for (size_t i = 1; i < depth; i++)
        *e++ = '[';
    e += sprintf(e, "{\"a\":\"x\"}");
    for (size_t i = 1; i < depth; i++)
        *e++ = ']';
    *e++ = '}';
    static const struct {
        const char *pattern;
        bool match;
    } pats[] = {
        {"{\"s\":{\"a\":[\"x\"]}}", true},
        {"{\"s\":{\"a\":[\"y\"]}}", false},
        {"{\"s\":[{\"exists\":false}]}", true},
        {"{\"s\":[\"x\"]}", false},
    };
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        sl_pattern *p = NULL;
        assert_int_equal(sl_pattern_compile(pats[i].pattern, strlen(pats[i].pattern), &p, NULL), 0);
        bool m = !pats[i].match;
        assert_int_equal(sl_pattern_match(p, ev, (size_t)(e - ev), &m, NULL), 0);
        assert_int_equal(m, pats[i].match);
        sl_pattern_free(p);
    }
    free(ev);
}

/* Every case of the table again, with the event right before a PROT_NONE
 * page: a one-byte over-read while matching crashes the test. */
static void test_guard_page(void **state)
{
    (void)state;
    long pg = sysconf(_SC_PAGESIZE);
    char *map =
        mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + pg, (size_t)pg, PROT_NONE), 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_pattern *p = NULL;
        if (sl_pattern_compile(cases[i].pattern, strlen(cases[i].pattern), &p, NULL))
            continue; /* reported by test_match_table */
        size_t n = strlen(cases[i].event);
        assert_true(n <= (size_t)pg);
        memcpy(map + pg - n, cases[i].event, n);
        bool m = !cases[i].match;
        assert_int_equal(sl_pattern_match(p, map + pg - n, n, &m, NULL), 0);
        assert_int_equal(m, cases[i].match);
        sl_pattern_free(p);
    }
    munmap(map, (size_t)pg * 2);
}

/* Counting allocator: with glibc and without ASan (which owns malloc), the
 * test binary interposes malloc and friends over glibc's own entry points so
 * test_no_alloc can check that matching an ordinary event allocates nothing. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t n);
static size_t allocs;
/* When not 0, allocation number fail_at fails (tests/unit/test_pattern_set.c,
 * which includes this file, walks its builder's error paths with it). */
static size_t fail_at;
void *malloc(size_t n)
{
    if (++allocs == fail_at)
        return NULL;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    if (++allocs == fail_at)
        return NULL;
    return __libc_calloc(n, size);
}
void *realloc(void *ptr, size_t n)
{
    if (++allocs == fail_at)
        return NULL;
    return __libc_realloc(ptr, n);
}
#endif

/* A compiled pattern is reused for many events; matching allocates nothing. */
/* A syntax error met just as the node array is full is a syntax error, not
 * "out of memory" (unvalidated parse, as the rule runner does). */
static void test_parse_error_at_capacity(void **state)
{
    (void)state;
    char ev[4096];
    size_t n = (size_t)snprintf(ev, sizeof ev, "{");
    for (int i = 0; i < SL_EVVIEW_INLINE - 1; i++)
        n += (size_t)snprintf(ev + n, sizeof ev - n, "%s\"k%d\":%d", i ? "," : "", i, i);
    n += (size_t)snprintf(ev + n, sizeof ev - n, "}x");
    sl_evview pe;
    sl_evview_init(&pe);
    sl_error err = {0};
    assert_int_equal(sl_evview_parse(&pe, ev, n, false, &err), SL_EPARSE);
    sl_evview_free(&pe);
}

static void test_no_alloc(void **state)
{
    (void)state;
    const char *pat = "{\"type\":[{\"prefix\":\"order.\"}],\"data\":{\"amount\":[{\"numeric\":"
                      "[\">\",100]}],\"tags\":[\"vip\"]}}";
    sl_pattern *p = NULL;
    assert_int_equal(sl_pattern_compile(pat, strlen(pat), &p, NULL), 0);
    const char *yes =
        "{\"type\":\"order.created\",\"data\":{\"amount\":101,\"tags\":[\"x\",\"vip\"]}}";
    const char *no = "{\"type\":\"order.created\",\"data\":{\"amount\":101,\"tags\":[\"x\"]}}";
#ifdef COUNT_ALLOCS
    size_t before = allocs;
#endif
    for (int i = 0; i < 1000; i++) {
        bool m = false;
        assert_int_equal(sl_pattern_match(p, yes, strlen(yes), &m, NULL), 0);
        assert_true(m);
        assert_int_equal(sl_pattern_match(p, no, strlen(no), &m, NULL), 0);
        assert_false(m);
    }
#ifdef COUNT_ALLOCS
    /* Escaped strings and keys are decoded on the stack, too. */
    const char *esc = "{\"typ\\u0065\":\"order.\\u0063reated\",\"data\":{\"amount\":1e3,"
                      "\"tags\":[\"v\\u0069p\"]}}";
    bool m = false;
    assert_int_equal(sl_pattern_match(p, esc, strlen(esc), &m, NULL), 0);
    assert_true(m);
    assert_int_equal(allocs - before, 0);
#endif
    sl_pattern_free(p);
    sl_pattern_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_table),    cmocka_unit_test(test_invalid_patterns),
        cmocka_unit_test(test_invalid_events), cmocka_unit_test(test_long_values),
        cmocka_unit_test(test_no_alloc),       cmocka_unit_test(test_parse_error_at_capacity),
        cmocka_unit_test(test_deep_arrays),    cmocka_unit_test(test_guard_page),
        cmocka_unit_test(test_combinations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
