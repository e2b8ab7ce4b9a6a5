"""HTTP servers for tests: a handler class served on 127.0.0.1 from a daemon thread, on a free port."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # tests read what their servers record, not stderr
        pass


def serve(handler_class: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_serving(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
