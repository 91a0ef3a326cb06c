"""A loopback HTTP server that answers every request with one canned (hostile) answer and records what it
was sent: the dashboard or hub as an attacker, or a broken proxy, would answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer

from loopback_http import QuietHandler, serve, stop_server


@dataclass
class HostileServer:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    requests: list[dict[str, str]] = field(default_factory=list)  # each request's headers
    server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> HostileServer:
        canned = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                canned.requests.append(dict(self.headers.items()))
                self.send_response(canned.status)
                self.send_header("Content-Type", canned.content_type)
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(canned.body)

            do_GET = do_POST = do_HEAD = do_DELETE = _answer

        self.server = serve(Handler)
        return self

    def stop(self) -> None:
        stop_server(self.server)
