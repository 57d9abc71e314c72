"""An HTTP proxy in front of ClickHouse that loses the answers of the first N inserts.

Each request goes to ClickHouse whole and ClickHouse runs it; for the first N whose query is an
INSERT the proxy then closes the connection instead of answering, as a network cut after the
server committed would. The exporter must find the batch in ClickHouse when it retries, not
insert it twice (tests/fleet/fleet_clickhouse_test.sh).

usage: answer_losing_proxy.py LISTEN_PORT CLICKHOUSE_PORT N
"""
import http.client
import http.server
import sys
import threading
import urllib.parse

LISTEN_PORT, UPSTREAM_PORT, LOSSES = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lost = 0
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global lost
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        upstream = http.client.HTTPConnection("127.0.0.1", UPSTREAM_PORT, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        upstream.request("POST", self.path, body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("query", [""])[0]
        with lock:
            lose = query.startswith("INSERT") and lost < LOSSES
            if lose:
                lost += 1
        if lose:
            print(f"lost the answer to insert {lost}", flush=True)
            self.close_connection = True
            return
        self.send_response(answer.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", LISTEN_PORT), Handler).serve_forever()
