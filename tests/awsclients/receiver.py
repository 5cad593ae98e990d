"""A loopback HTTP receiver for tests/integration/test_aws_api.sh: the URL of
the API destinations the tests create. Binds 127.0.0.1 on a port of the
system's choosing, writes that port to PORTFILE (whole, then renamed in), and
appends one JSON line per request to OUT:

    {"method": "POST", "path": "/hook", "headers": {"lower-case": "value", ...},
     "body": "the body as text"}

each line flushed before the 200 answer goes out, so what a sender was told
was received is in the file. Runs until SIGTERM (or SIGINT), then exits 0.

Usage: /usr/bin/python3 -I receiver.py OUT PORTFILE
"""
import http.server
import json
import os
import signal
import sys
import threading

if len(sys.argv) != 3:
    sys.exit("usage: python3 -I receiver.py OUT PORTFILE")
OUT, PORTFILE = sys.argv[1], sys.argv[2]
LOCK = threading.Lock()
SINK = open(OUT, "a", encoding="utf-8")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as sluice's client expects

    def log_message(self, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        rec = {"method": self.command, "path": self.path,
               "headers": {k.lower(): v for k, v in self.headers.items()},
               "body": body.decode("utf-8", "replace")}
        with LOCK:
            SINK.write(json.dumps(rec) + "\n")
            SINK.flush()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_PUT = do_PATCH = do_GET = do_DELETE = answer


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
tmp = PORTFILE + ".tmp"
with open(tmp, "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(tmp, PORTFILE)


def stop(*_):
    # shutdown() waits for serve_forever(), which runs in this thread: hand it off.
    threading.Thread(target=srv.shutdown, daemon=True).start()


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
srv.serve_forever(poll_interval=0.2)
SINK.close()
