"""Tests of the static HTML run report (promptevo.reporting.html).

Runs are built with :func:`promptevo.evolve.optimize` and the test doubles of ``test_evolve.py``
(``ScriptedPickupEnv`` + ``ScriptedLLM`` replies for ``fake/agent`` and ``fake/optimizer``). The headless
browser test renders the page in Debian's ``chromium`` (skipped when it is not installed) and checks the
screenshot is not blank and the console shows no error.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_evolve import CountingRunner, config, run  # test doubles of the optimization loop

from promptevo.reporting.export import export_run
from promptevo.reporting.html import REPORT_HTML, esc, load_run, render_html, write_html

EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Two generations: c1 (adds the rule) promoted, c2 rejected; c3 (deletes it) rejected."""
    tmp = tmp_path_factory.mktemp("report")
    return run(config(tmp, generations=2), CountingRunner(), fast=True)


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: set[str] = set()
        self.text: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        self.ids |= {v for k, v in attrs if k == "id" and v}

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    p.close()
    return p


def test_optimize_writes_report_with_all_sections(full_run):
    path = full_run.run_dir / REPORT_HTML
    assert path.exists(), "optimize() did not write report.html"
    page = path.read_text(encoding="utf-8")
    doc = parse(page)
    assert {"header", "fitness", "table", "lineage", "diff", "analyses"} <= doc.ids
    text = " ".join(" ".join(doc.text).split())
    # header
    for needle in ("scripted-pickup", "two-stage", "fake/agent", "fake/optimizer", "LLM calls", "tokens",
                   "completed 2 generations"):
        assert needle in text, needle
    # fitness plot: inline svg with axes labels, incumbent, children of each kind, baseline line
    assert "svg" in doc.tags and "generation" in text and "training score (return" in text
    assert "gen 1: c1 (rewrite actor.rules) promoted" in page
    assert "gen 1: c2 (rewrite actor.role) rejected" in page and "gen 2: c3 (delete actor.rules) rejected" in page
    assert "gen 2: incumbent c1" in page and "baseline robust-cot held-out" in page
    # held-out table with Wilson intervals: baseline 2/8, initial 2/8, best 8/8
    assert "baseline (robust-cot)" in text and "2/8 = 25.0%" in text and "8/8 = 100.0%" in text
    assert re.search(r"\[6\d\.\d%, 100\.0%\]", text)  # Wilson interval of 8/8
    # lineage: every candidate, edit, rationale, train delta, status
    for needle in ("c0", "c1", "c2", "c3", "rewrite actor.rules", "delete actor.rules",
                   "episodes fail by picking up while the ball is to the left", "train Δ +", "promoted",
                   "rejected", "chain c0 → c1"):
        assert needle in text, needle
    # segment diff of best vs initial, added line coloured
    assert '<span class="l add">+Move toward the ball. Always face the object before pick up.</span>' in page
    assert '<span class="l del">-Move toward the ball.</span>' in page
    # analyzer attributions for both generations
    assert "Generation 1" in text and "Generation 2" in text
    assert "actor.rules" in text and "missing" in text and "nothing says to face the ball first" in text
    assert "seed 1, step 0: picked up while the ball was to the left" in text
    # self-contained: no script, no external resource
    assert "script" not in doc.tags and "link" not in doc.tags and "iframe" not in doc.tags
    assert not [v for k, v in doc.attrs if k in ("src", "href") and v and not v.startswith("#")]
    assert "Content-Security-Policy" in page


def test_render_is_pure_and_escapes_malicious_text(full_run, tmp_path):
    data = load_run(full_run.run_dir)
    assert render_html(data) == render_html(data)  # deterministic
    ck = data["checkpoint"]
    best = next(c for c in ck["candidates"] if c["id"] == ck["best_id"])
    best["prompts"]["modules"]["actor"][1]["text"] = EVIL + " & more"
    best["edit"]["rationale"] = EVIL
    ck["baseline"]["agent"] = EVIL
    data["run"] = EVIL
    data["analyses"][1]["analysis"]["attributions"][0]["explanation"] = EVIL
    data["analyses"][1]["analysis"]["attributions"][0]["evidence"][0]["note"] = '"><img src=x onerror=alert(1)>'
    page = render_html(data)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert esc(EVIL) in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "+&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page  # the diff line, escaped
    assert "script" not in parse(page).tags


def test_partial_runs_render(full_run, tmp_path):
    # a run stopped after generation 0: held-out of initial + baseline only, no analysis, no report.json
    run0 = run(config(tmp_path, run="gen0", generations=0), CountingRunner(), fast=True)
    page = (run0.run_dir / REPORT_HTML).read_text()
    assert "No generation has been evaluated yet" in page and "No analysis recorded yet" in page
    assert "No segment differs" in page and "2/8 = 25.0%" in page
    # a checkpoint cut down by hand: no generations, no baseline, best id missing, odd fields
    d = tmp_path / "cut"
    d.mkdir()
    ck = json.loads((full_run.run_dir / "checkpoint.json").read_text())
    ck = {"version": 1, "config": ck["config"], "candidates": ck["candidates"][:1], "initial_id": "c0",
          "best_id": "c9", "generations": [{"index": 1, "parent": "c0", "seeds": [1, 2]}], "history": [],
          "usage": {}, "stop_reason": ""}
    (d / "checkpoint.json").write_text(json.dumps(ck))
    (d / "analyses").mkdir()
    (d / "analyses" / "gen-001.json").write_text('{"generation": 1, "parent": "c0", "analysis": {"ok": false, '
                                                 '"error": "no JSON", "raw": "Sorry <b>no</b>"}}')
    (d / "report.json").write_text("{cut")
    path = write_html(d)
    page = path.read_text()
    assert "not finished" in page and "The initial or best prompts are not available" in page
    assert "Unusable analysis: no JSON" in page and "Sorry &lt;b&gt;no&lt;/b&gt;" in page
    assert "report.json: unreadable" in page
    assert not list(d.glob("*.tmp"))
    # an empty dict still gives a page
    assert "<!DOCTYPE html>" in render_html({})


def test_load_run_errors_and_cli(tmp_path, capsys):
    from promptevo.optim.engine import EvolveError
    from promptevo.reporting.html import cli_main

    with pytest.raises(EvolveError, match="no checkpoint.json"):
        load_run(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "checkpoint.json").write_text("[1,")
    with pytest.raises(EvolveError, match="corrupt checkpoint"):
        load_run(tmp_path / "bad")
    assert cli_main(["nope", "--results-dir", str(tmp_path)]) == 2
    assert "no checkpoint.json" in capsys.readouterr().err
    res = run(config(tmp_path, run="r1", generations=1), CountingRunner(), fast=True)
    (res.run_dir / REPORT_HTML).unlink()
    assert cli_main(["r1", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip()
    assert out == str(res.run_dir / REPORT_HTML) and Path(out).exists()
    # the same through `promptevo report RUN`
    from typer.testing import CliRunner

    from promptevo.cli.main import app

    r = CliRunner().invoke(app, ["report", str(res.run_dir)])
    assert r.exit_code == 0 and str(res.run_dir / REPORT_HTML) in r.output
    # export carries the report along
    names = [p.name for p in export_run(res.run_dir, tmp_path / "exp")]
    assert "report.html" in names and (tmp_path / "exp" / REPORT_HTML).read_text() == Path(out).read_text()


def test_report_failure_does_not_fail_the_run(tmp_path, monkeypatch, caplog):
    import promptevo.reporting.html as report

    def boom(run_dir):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "write_html", boom)
    res = run(config(tmp_path, generations=1), CountingRunner(), fast=True)
    assert res.best_id == "c1" and (res.run_dir / "report.md").exists()
    assert not (res.run_dir / REPORT_HTML).exists()
    assert "report.html not written (RuntimeError: disk full)" in caplog.text


# -- headless browser -------------------------------------------------------------------------------


def png_pixels(data: bytes, max_rows: int | None = None) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of raw pixel bytes) of an 8-bit RGB/RGBA PNG, decoded with zlib only."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h = 8, bytearray(), 0, 0
    ctype = 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(bytes(idat))
    stride = w * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(h if max_rows is None else min(h, max_rows)):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(full_run, tmp_path):
    page = full_run.run_dir / REPORT_HTML
    png = tmp_path / "shot.png"
    url = page.resolve().as_uri()
    base = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    shot = subprocess.run([*base, "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
                           "--window-size=1200,1600", url], capture_output=True, text=True, timeout=120)
    assert png.exists() and png.stat().st_size > 0, shot.stderr[-2000:]
    console = [ln for ln in shot.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln
               or "Content Security Policy" in ln or "Refused to" in ln]
    assert not console, console
    w, h, rows = png_pixels(png.read_bytes(), max_rows=700)  # header, plot and table
    assert (w, h) == (1200, 1600)
    colours = {row[i:i + 3] for row in rows for i in range(0, len(row), 3 if len(row) == 3 * w else 4)}
    assert len(colours) > 50, f"screenshot looks blank ({len(colours)} colours)"
    # the plot's marker colours are drawn (promoted child, incumbent)
    assert bytes.fromhex("137333") in colours and bytes.fromhex("1a56c4") in colours
    # the page as the browser built it parses, and has every section
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    doc = parse(dom.stdout)
    assert {"header", "fitness", "table", "lineage", "diff", "analyses"} <= doc.ids
    assert "svg" in doc.tags
