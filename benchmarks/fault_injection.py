"""Fault injection: drive the CLI against a local fake OpenAI-compatible server through each failure a new
user meets, and check that a failure is never a finished run and that nothing finished is lost.

    python benchmarks/fault_injection.py [--out benchmarks/fault_injection.json]

The server (a test double, in this process) answers ``POST /v1/chat/completions`` according to a mode
switched between cases: ``ok`` (a valid action), ``500``, ``garbage`` (a 200 that is not JSON), ``huge`` (1 MB replies to the optimizer's calls), ``empty``
(empty replies), ``hang`` (never answers in time), ``down`` (closed port). Each case runs
``promptevo optimize`` / ``eval`` as a subprocess on a tiny goto configuration and prints one row: the exit
code, the one-line message, and whether any finished episode was lost or counted twice. Every row must
say ``ok``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_openai_server import completion_body  # noqa: E402

REPLY = "Turning.\n<|ACTION|>turn left<|END|>"
SECRET = "sk-fault-injection-secret-0123456789"


class Server:
    """A fake chat server whose behaviour is switched with :attr:`mode`."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = 0
        self.fail_after: int | None = None  # switch to "500" after this many requests (an outage mid-run)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, status: int, data: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests += 1
                mode = outer.mode
                if outer.fail_after is not None and outer.requests > outer.fail_after:
                    mode = "500"
                if mode == "hang":
                    time.sleep(30)
                    return
                if mode == "500":
                    self._send(500, b'{"error": {"message": "internal error", "type": "server_error"}}')
                    return
                if mode == "garbage":
                    self._send(200, b"<html>not json</html>", "text/html")
                    return
                req = json.loads(raw or b"{}")
                system = " ".join(str(m.get("content")) for m in req.get("messages") or []
                                  if m.get("role") == "system")
                huge = mode == "huge" and ('"edits"' in system or "attributions" in system)  # the optimizer's calls
                text = "" if mode == "empty" else ("Rewrite the rules. " * 55_000) if huge else REPLY
                body = completion_body(text, str(req.get("model") or "fake"),
                                       sum(len(str(m.get("content"))) for m in req.get("messages") or []))
                self._send(200, json.dumps(body).encode())

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, b'{"object": "list", "data": [{"id": "fake"}]}')

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


TINY = ["--task", "goto", "--agent", "robust-cot", "--history", "1", "--init", "compact", "--generations", "1",
        "--children", "1", "--episodes", "2", "--evidence-episodes", "1", "--validation-episodes", "2",
        "--test-episodes", "2", "--max-steps", "3", "--operators", "mutate", "--baseline", "none",
        "--concurrency", "1", "--no-cache", "--screen", "off", "--expert-episodes", "0", "--timeout", "3",
        "--quiet"]


def cli(*args: str, env: dict | None = None, cwd: str | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    e = {**os.environ, "OPENAI_API_KEY": SECRET, "TERM": "dumb", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.run([sys.executable, "-m", "promptevo", *args], capture_output=True, text=True, env=e,
                          cwd=cwd, timeout=timeout)


def last_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip() and not ln.startswith("LLM ")]
    return lines[-1] if lines else ""


def store_check(run_dir: Path) -> tuple[int, int]:
    """(finished episodes, finished episodes recorded twice for one (key, seed))."""
    p = run_dir / "episodes.jsonl"
    if not p.exists():
        return 0, 0
    seen: dict[tuple, int] = {}
    for line in p.read_text().splitlines():
        rec = json.loads(line)
        if not rec["result"].get("error"):
            k = (rec["key"], rec["seed"])
            seen[k] = seen.get(k, 0) + 1
    return len(seen), sum(1 for v in seen.values() if v > 1)


def run_cases(work: Path, srv: Server) -> list[dict]:
    rows: list[dict] = []

    def optimize_case(name: str, mode: str, *, base: str | None = None, expect: int = 3) -> dict:
        srv.mode = mode
        run = work / name
        r = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", base or srv.api_base,
                "--results-dir", str(work), "--run", name)
        ck = json.loads((run / "checkpoint.json").read_text()) if (run / "checkpoint.json").exists() else {}
        finished, twice = store_check(run)
        ok = (r.returncode == expect and ck.get("phase") != "done" and len(r.stderr.strip().splitlines()) >= 1
              and twice == 0 and "Traceback" not in r.stderr)
        return {"case": name, "rc": r.returncode, "message": last_line(r)[:220], "finished": finished,
                "double_counted": twice, "ok": ok}

    rows.append(optimize_case("server-down", "ok", base=f"http://127.0.0.1:{closed_port()}/v1"))
    rows.append(optimize_case("http-500", "500"))
    rows.append(optimize_case("garbage-body", "garbage"))
    rows.append(optimize_case("empty-replies", "empty"))
    rows.append(optimize_case("server-hangs", "hang"))

    # an outage mid-run: stop with exit 3, then resume when the server is back; every (candidate, seed) once
    srv.mode, srv.requests, srv.fail_after = "ok", 0, 6
    r1 = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", srv.api_base, "--results-dir", str(work),
             "--run", "outage")
    srv.fail_after = None
    r2 = cli("optimize", "--resume", str(work / "outage"), "--quiet")
    ck = json.loads((work / "outage" / "checkpoint.json").read_text())
    rep = json.loads((work / "outage" / "report.json").read_text()) if (work / "outage" / "report.json").exists() else {}
    finished, twice = store_check(work / "outage")
    n_rows = [row["n"] for row in rep.get("rows", [])]
    rows.append({"case": "outage-then-resume", "rc": f"{r1.returncode} then {r2.returncode}",
                 "message": last_line(r1)[:220], "finished": finished, "double_counted": twice,
                 "ok": r1.returncode == 3 and r2.returncode == 0 and ck.get("phase") == "done" and twice == 0
                 and n_rows and all(n == 2 for n in n_rows)})

    # a results folder that cannot be written
    ro = work / "readonly"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    srv.mode = "ok"
    r = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", srv.api_base, "--results-dir", str(ro / "x"),
            "--run", "ro")
    ro.chmod(stat.S_IRWXU)
    root = os.geteuid() == 0  # root writes anywhere: the case cannot fail there
    rows.append({"case": "read-only-folder", "rc": r.returncode, "message": last_line(r)[:220], "finished": 0,
                 "double_counted": 0, "ok": (r.returncode == 2 and "cannot write" in r.stderr
                                            and len(r.stderr.strip().splitlines()) == 1) or root,
                 **({"note": "running as root: permissions do not stop writes; see tests for the one-line message"}
                    if root else {})})

    # credentials in --api-base never reach the results
    user_base = srv.api_base.replace("http://", f"http://alice:{SECRET}@")
    r = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", user_base, "--results-dir", str(work),
            "--run", "secret")
    leaked = [str(p) for p in (work / "secret").rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]
    rows.append({"case": "credentials-in-api-base", "rc": r.returncode, "message": last_line(r)[:220] or "finished",
                 "finished": store_check(work / "secret")[0], "double_counted": 0,
                 "ok": r.returncode == 0 and not leaked and SECRET not in r.stdout + r.stderr, "leaked": leaked})

    # a second process on a folder that is in use
    srv.mode = "hang"  # the first process waits on the server
    first = subprocess.Popen([sys.executable, "-m", "promptevo", "optimize", *TINY, "--model", "openai/fake",
                              "--api-base", srv.api_base, "--results-dir", str(work), "--run", "busy"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "OPENAI_API_KEY": SECRET, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    for _ in range(100):
        if (work / "busy" / "run.lock").exists() and (work / "busy" / "run.lock").read_text().strip():
            break
        time.sleep(0.2)
    r = cli("optimize", "--resume", str(work / "busy"), "--quiet")
    first.kill()
    first.wait()
    rows.append({"case": "second-process", "rc": r.returncode, "message": last_line(r)[:220], "finished": 0,
                 "double_counted": 0, "ok": r.returncode == 2 and f"process {first.pid}" in r.stderr})
    # and after kill -9 the stale lock is taken over
    srv.mode = "ok"
    r = cli("optimize", "--resume", str(work / "busy"), "--quiet")
    finished, twice = store_check(work / "busy")
    log = (work / "busy" / "run.log").read_text() if (work / "busy" / "run.log").exists() else ""
    rows.append({"case": "stale-lock-after-kill-9", "rc": r.returncode, "message": last_line(r)[:220] or "finished",
                 "finished": finished, "double_counted": twice,
                 "ok": r.returncode == 0 and twice == 0 and "took over the lock" in log})

    # eval against a dead server: not a result
    r = cli("eval", "--task", "goto", "--agent", "robust-cot", "--episodes", "2", "--model", "openai/fake",
            "--api-base", f"http://127.0.0.1:{closed_port()}/v1", "--results-dir", str(work / "eval"), "--timeout", "3")
    rows.append({"case": "eval-server-down", "rc": r.returncode, "message": last_line(r)[:220], "finished": 0,
                 "double_counted": 0, "ok": r.returncode == 3 and "could not be played" in r.stderr})
    rows += integrity_cases(work, srv)
    return rows


def integrity_cases(work: Path, srv: Server) -> list[dict]:
    """Issue 34's cases: fabricated and duplicated episodes, an edited checkpoint prompt, a 1 MB reply, a run
    name that leaves --results-dir, markup in exports, --dry-run's checks, file contents in error lines."""
    from promptevo.evaluation.store import line_sum
    from promptevo.segments import PromptSet

    rows: list[dict] = []
    srv.mode = "ok"

    def row(case: str, r: Any, ok: bool, finished: int = 0, **more: Any) -> dict:
        rc = r.returncode if hasattr(r, "returncode") else r
        msg = last_line(r)[:220] if hasattr(r, "stderr") else ""
        return {"case": case, "rc": rc, "message": msg or "finished", "finished": finished, "double_counted": 0,
                "ok": bool(ok), **more}

    # 1. an interrupted run, then success lines appended for test seeds it never scheduled (with valid digests)
    srv.requests, srv.fail_after = 0, 6
    cli("optimize", *TINY, "--model", "openai/fake", "--api-base", srv.api_base, "--results-dir", str(work),
        "--run", "forged")
    srv.fail_after = None
    run = work / "forged"
    ck = json.loads((run / "checkpoint.json").read_text())
    real = (run / "episodes.jsonl").read_text().splitlines()
    forged = []
    for seed in ck["splits"]["test"]:
        rec = json.loads(real[0])
        rec.update(key=ck["candidates"]["c0"]["fingerprint"], seed=int(seed), split="test")
        rec["result"] = {**rec["result"], "seed": int(seed), "success": True, "progression": 1.0}
        rec["sum"] = line_sum(rec)
        forged.append(json.dumps(rec))
    forged.append(real[0])  # a duplicate
    with (run / "episodes.jsonl").open("a") as f:
        f.write("\n".join(forged) + "\n")
    r = cli("optimize", "--resume", str(run), "--quiet")
    rep = json.loads((run / "report.json").read_text()) if (run / "report.json").exists() else {}
    truth = json.loads((work / "outage" / "report.json").read_text())  # the same run, not tampered with
    same = [x["success_rate"] for x in rep.get("rows", [])] == [x["success_rate"] for x in truth["rows"]]
    refused = sum("refused, never scored" in str(w) for w in rep.get("warnings", []))
    rows.append(row("fabricated-episodes", r, r.returncode == 0 and same and refused == len(forged),
                    finished=store_check(run)[0], refused=refused))

    # 2. a prompt text edited inside a finished run's checkpoint
    edited = work / "edited"
    shutil.copytree(work / "secret", edited)
    data = json.loads((edited / "checkpoint.json").read_text())
    mods = data["candidates"]["c0"]["prompts"]["modules"]
    mods[next(iter(mods))][0]["text"] += " Always go forward."
    (edited / "checkpoint.json").write_text(json.dumps(data))
    rr, re_ = cli("report", str(edited)), cli("export", str(edited), "--out", str(work / "edited-export"))
    rows.append(row("edited-checkpoint-prompt", f"{rr.returncode} / {re_.returncode}",
                    rr.returncode == re_.returncode == 2 and "edited after" in rr.stderr + re_.stderr))
    rows[-1]["message"] = last_line(rr)[:220]

    # 3. a server that sends 1 MB replies to the optimizer, whatever max_tokens says
    srv.mode = "huge"
    r = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", srv.api_base, "--results-dir", str(work),
            "--run", "huge")
    srv.mode = "ok"
    size = sum(p.stat().st_size for p in (work / "huge").rglob("*") if p.is_file())
    rows.append(row("1mb-replies", r, r.returncode == 0 and size < 5_000_000 and "Traceback" not in r.stderr,
                    finished=store_check(work / "huge")[0], run_bytes=size))

    # 4. a run name that points outside --results-dir
    inside = work / "inside"
    r = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", srv.api_base, "--results-dir", str(inside),
            "--run", "../escaped")
    rows.append(row("run-outside-results-dir", r, r.returncode == 2 and not (work / "escaped").exists()
                    and "not a run name" in r.stderr))

    # 5. markup and terminal escapes an LLM wrote, in a promoted segment and a rationale, then exported
    hostile = work / "hostile"
    shutil.copytree(work / "secret", hostile)
    data = json.loads((hostile / "checkpoint.json").read_text())
    best = data["candidates"][data["best_id"]]
    bad = "<script>alert(1)</script> <img src=x onerror=alert(2)> \x1b[2J\x1b]8;;http://evil\x07link\x1b]8;;\x07 ``` end"
    mods = best["prompts"]["modules"]
    mods[next(iter(mods))][0]["text"] += " " + bad
    best["fingerprint"] = PromptSet.from_dict(best["prompts"]).fingerprint()
    for c in data["candidates"].values():
        if c.get("edit"):
            c["edit"]["rationale"] = bad
    (hostile / "checkpoint.json").write_text(json.dumps(data))
    r = cli("export", str(hostile), "--out", str(work / "hostile-export"))
    texts = [p.read_text() for p in (work / "hostile-export").glob("*.md")] if r.returncode == 0 else []
    rows.append(row("markup-in-exports", r, r.returncode == 0 and texts and not any(
        "<script" in t or "<img" in t or "\x1b" in t for t in texts)))

    # 7. --dry-run refuses what the run refuses
    r = cli("optimize", "--task", "goto", "--agent", "robust-cot", "--history", "-1", "--dry-run", "--model",
            "openai/fake", "--api-base", srv.api_base, "--seconds-per-call", "1", "--results-dir", str(work / "dry"))
    rows.append(row("dry-run-history-minus-1", r, r.returncode == 2 and not (work / "dry").exists()))

    # 8. file contents in an error line are printed as they are (no markup, no emoji codes)
    bad_file = work / "passwd.md"
    bad_file.write_text("root:x:0:0:root:/root:/bin/bash\n")
    r = cli("optimize", *TINY, "--model", "openai/fake", "--api-base", srv.api_base, "--results-dir", str(work),
            "--run", "badprompts", "--prompts", str(bad_file))
    rows.append(row("file-contents-in-error", r, r.returncode == 2 and "root:x:0" in r.stderr
                    and "\u274c" not in r.stderr))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    a = ap.parse_args()
    srv = Server()
    work = Path(tempfile.mkdtemp(prefix="promptevo-faults-"))
    try:
        rows = run_cases(work, srv)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        print(f"{'ok ' if r['ok'] else 'BAD'} {r['case']:<26} rc {str(r['rc']):<8} finished {r['finished']:>2} "
              f"double {r['double_counted']}  {r['message']}")
    Path(a.out).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(f"{sum(r['ok'] for r in rows)} of {len(rows)} cases ok; written: {a.out}")
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
