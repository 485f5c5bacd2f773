"""A fake OpenAI-compatible chat server for benchmarks (test double, not a model).

    python benchmarks/fake_openai_server.py [--delay 0.1] [--reply TEXT] [--max-seconds 300]

``POST /v1/chat/completions`` sleeps ``--delay`` seconds, then returns ``--reply`` as a valid
``chat.completion`` (token usage = characters // 4). ``GET /v1/models`` lists the one model ``fake``.
Anything else is a 404. The server binds to 127.0.0.1 only, on a free port that it prints as its first
stdout line (``PORT <n>``), and stops by itself after ``--max-seconds`` or as soon as its stdin is
closed (so it never outlives the benchmark that started it). Reach it through LiteLLM as model
``openai/fake`` with ``api_base=http://127.0.0.1:<n>/v1``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

HOST = "127.0.0.1"
DEFAULT_REPLY = "I will move on.\n<|ACTION|>go forward<|END|>"


def completion_body(reply: str, model: str, prompt_chars: int) -> dict[str, Any]:
    pt, ct = max(1, prompt_chars // 4), max(1, len(reply) // 4)
    return {
        "id": f"chatcmpl-fake-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
    }


def make_handler(delay: float, reply: "str | Callable[[list[dict]], str]",
                 counter: list[int]) -> type[BaseHTTPRequestHandler]:
    """``reply`` is a fixed text or a function of the request's messages (scripted test double)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
        disable_nagle_algorithm = True  # else header + body writes meet delayed ACKs: +40 ms a reply

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                return
            try:
                req = json.loads(raw or b"{}")
                messages = list(req.get("messages") or [])
                prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
                model = str(req.get("model") or "fake")
            except (json.JSONDecodeError, AttributeError, TypeError):
                self._send(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
                return
            time.sleep(delay)
            with lock:
                counter[0] += 1
            text = reply(messages) if callable(reply) else reply
            self._send(200, completion_body(text, model, prompt_chars))

    return Handler


class FakeOpenAIServer:
    """In-process server on 127.0.0.1 (daemon thread); stops on ``stop()`` or after ``max_seconds``."""

    def __init__(self, delay: float = 0.1, reply: "str | Callable[[list[dict]], str]" = DEFAULT_REPLY,
                 max_seconds: float = 300.0):
        self.requests = [0]
        self.httpd = ThreadingHTTPServer((HOST, 0), make_handler(delay, reply, self.requests))
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai-server", daemon=True)
        self._timer = threading.Timer(max_seconds, self.stop)
        self._timer.daemon = True
        self._stopped = False

    @property
    def api_base(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def start(self) -> "FakeOpenAIServer":
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class FakeServerProcess:
    """The server in a child process (its own GIL, like a real server); ``with`` stops it.

    The child also stops by itself after ``max_seconds`` or when this process dies (stdin closes).
    """

    def __init__(self, delay: float = 0.1, reply: str = DEFAULT_REPLY, max_seconds: float = 300.0):
        self.args = [sys.executable, __file__, "--delay", str(delay), "--reply", reply,
                     "--max-seconds", str(max_seconds)]
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def api_base(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def start(self, timeout: float = 20.0) -> "FakeServerProcess":
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        line = result[0].strip() if result else ""
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"fake OpenAI server did not start (got {line!r})")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()  # the child exits when its stdin closes
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=5)
        self.proc = None

    def __enter__(self) -> "FakeServerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay", type=float, default=0.1, help="seconds before each reply")
    p.add_argument("--reply", default=DEFAULT_REPLY)
    p.add_argument("--max-seconds", type=float, default=300.0, help="stop after this long")
    a = p.parse_args(argv)
    server = FakeOpenAIServer(a.delay, a.reply, a.max_seconds)
    server.start()
    print(f"PORT {server.port}", flush=True)

    def watch_stdin() -> None:
        try:
            sys.stdin.read()
        finally:
            server.stop()

    threading.Thread(target=watch_stdin, daemon=True).start()
    server._thread.join()


if __name__ == "__main__":
    main()
