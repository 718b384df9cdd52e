"""A fake OpenAI-compatible chat server on 127.0.0.1 (a stdlib http.server), for the HTTP
backend's tests: each request takes the next step of a script (the last step repeats) and
its JSON body is kept in ``Script.bodies``. Steps: ``ok`` (the reply), ``stall`` / ``slow``
(the reply after 1.5 / 1.0 s), ``garbage`` (HTML), ``no_choices``, ``bad_content`` (content
not a string), ``401``, ``500``, ``429``, ``429:<Retry-After>``, ``drop`` (the connection
closed before any byte), ``drop_mid`` (closed in the middle of the body). The
``fake_openai`` fixture (conftest.py) starts servers and stops them after the test."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_REQUESTS = 1000  # per server: a runaway retry loop fails the test instead of hanging it
SLEEPS = {"stall": 1.5, "slow": 1.0}
ERRORS = {"401": (401, "Incorrect API key"), "500": (500, "internal error"),
          "429": (429, "rate limited"), "refuse": (503, "test server request cap")}


def reply_body(content: object) -> bytes:
    return json.dumps({
        "id": "c1", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12},
    }).encode()


class Script:
    """What the server does for each request, in order; the last step repeats."""

    def __init__(self, *steps: str, reply: str = "Yes") -> None:
        self.steps, self.reply, self.requests = list(steps) or ["ok"], reply, 0
        self.bodies: list[dict] = []
        self.lock = threading.Lock()

    def next(self, body: bytes) -> str:
        with self.lock:
            self.requests += 1
            self.bodies.append(json.loads(body or b"{}"))
            if self.requests > MAX_REQUESTS:
                return "refuse"
            return self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _drop(self, partial: bytes = b"") -> None:
            if partial:
                self.wfile.write(partial)
                self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

        def do_POST(self) -> None:
            step = script.next(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            status, body, headers = 200, reply_body(script.reply), {}
            if step == "drop":
                return self._drop()
            if step == "drop_mid":
                return self._drop(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: 400\r\n\r\n{\"choices\": [{\"mess")
            time.sleep(SLEEPS.get(step, 0))
            if step == "garbage":
                body = b"<html><body>502 Bad Gateway</body></html>"
            elif step == "no_choices":
                body = b'{"id": "x", "object": "chat.completion", "error": "model loading"}'
            elif step == "bad_content":
                body = reply_body(["not", "text"])
            elif step.split(":")[0] in ERRORS:
                status, message = ERRORS[step.split(":")[0]]
                body = json.dumps({"error": {"message": message}}).encode()
                if ":" in step:  # 429:<Retry-After>
                    headers["Retry-After"] = step.split(":", 1)[1]
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout)

    return Handler


class FakeOpenAI:
    """``start(*steps, reply=...)`` -> (base URL, :class:`Script`); :meth:`close` stops every
    server started."""

    def __init__(self) -> None:
        self.servers: list[ThreadingHTTPServer] = []

    def __call__(self, *steps: str, reply: str = "Yes") -> tuple[str, Script]:
        script = Script(*steps, reply=reply)
        srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        self.servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/v1", script

    def close(self) -> None:
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
