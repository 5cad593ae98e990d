"""Signs N random requests with botocore's SigV4Auth (an independent
implementation of AWS Signature Version 4) and prints one JSON object per
line for tests/unit/test_sigv4.c to verify and to sign again: method, path,
query, headers (as sent), body (base64), credentials, scope and botocore's
Authorization value. Run with /usr/bin/python3 -I (Debian's python3-botocore).
"""
import base64, json, random, sys
from urllib.parse import quote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
rnd = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 42)
ALPHA = "abcXYZ019-_.~ !$&'()*+,;=:@%/é"


def word(k):
    return "".join(rnd.choice(ALPHA) for _ in range(rnd.randint(0, k)))


for i in range(n):
    method = rnd.choice(["GET", "POST", "PUT", "DELETE"])
    # a path as a client sends it: each segment percent-encoded once
    segs = [quote(word(8), safe="-_.~") for _ in range(rnd.randint(0, 3))]
    segs = [s for s in segs if s not in (".", "..")]
    path = "/" + "/".join(segs)
    params = [(quote(word(5) or "k", safe="-_.~"), quote(word(6), safe="-_.~"))
              for _ in range(rnd.randint(0, 4))]
    query = "&".join(k + "=" + v for k, v in params)
    url = "http://127.0.0.1:8080" + path + ("?" + query if query else "")
    body = bytes(rnd.randrange(256) for _ in range(rnd.choice([0, 1, 17, 300])))
    headers = {"Host": "127.0.0.1:8080", "X-Amz-Target": "AWSEvents.PutEvents",
               "Content-Type": "application/x-amz-json-1.1"}
    for _ in range(rnd.randint(0, 3)):
        name = "X-Test-" + "".join(rnd.choice("abcdefgh") for _ in range(4))
        headers[name] = rnd.choice(["", " "]) + "a  b\t c " + word(4).replace("%", "") + rnd.choice(["", "  "])
    region = rnd.choice(["us-east-1", "eu-west-3"])
    service = rnd.choice(["events", "execute-api"])
    akid = "AKID" + str(i)
    secret = "s3cr3t/" + word(10)
    req = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(Credentials(akid, secret), service, region).add_auth(req)
    print(json.dumps({
        "method": method, "path": path, "query": query,
        "headers": [[k, v] for k, v in req.headers.items()],
        "body": base64.b64encode(body).decode(),
        "akid": akid, "secret": secret, "region": region, "service": service,
        "authorization": req.headers["Authorization"],
    }))
