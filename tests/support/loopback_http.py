"""What every fake HTTP server of the tests shares: a quiet HTTP/1.1 handler, served on 127.0.0.1 in a
daemon thread, and a stop that frees the port."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """`handler` on a free loopback port, answering in a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_server(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


def hanging(release: threading.Event, hold_s: float = 60.0, status: int = 500) -> type[QuietHandler]:
    """A webhook that holds every POST `hold_s` (or until `release`), then answers `status`."""

    class Hang(QuietHandler):
        def do_POST(self) -> None:
            release.wait(hold_s)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Hang
