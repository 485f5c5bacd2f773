"""Tests of the static HTML run report (promptevo.reporting.html and its matplotlib charts).

Runs are real :func:`promptevo.optimize` runs with the test doubles of ``run_double.py`` (ScriptedPickupEnv
and ScriptedLLM replies for ``fake/agent`` / ``fake/optimizer``): c1 (adds the rule) is promoted, c2 is
rejected, c3 (deletes the rule again) is stopped early by racing. The headless browser test renders the
page in Debian's ``chromium`` (skipped when it is not installed) and checks that the screenshot is not
blank and the console shows no error.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from run_double import RULE, make_run

from promptevo.optim.state import RunError
from promptevo.reporting import charts
from promptevo.reporting.html import REPORT_HTML, esc, load_run, render_html, write_html

EVIL = "<script>alert(1)</script>"
SECTIONS = {"header", "test", "operators", "decisions", "lineage", "diff", "signatures", "analyses"}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("report"), "r1", generations=2)


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


def assert_self_contained(page: str) -> None:
    doc = parse(page)
    assert not {"script", "link", "iframe", "img", "object", "embed"} & set(doc.tags)
    # references only inside the page (matplotlib's <use xlink:href="#...">)
    refs = [v for k, v in doc.attrs if (k.endswith("href") or k.endswith("src")) and v]
    assert all(v.startswith("#") for v in refs), refs
    # the only URLs are XML namespace names, which load nothing
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert all(u.startswith("#") for u in re.findall(r"url\(\s*['\"]?([^)'\"]*)", page))  # clip paths only


def test_optimize_writes_report_with_all_sections(full_run):
    path = full_run.run_dir / REPORT_HTML
    assert path.exists(), "optimize() did not write report.html"
    page = path.read_text(encoding="utf-8")
    doc = parse(page)
    assert SECTIONS <= doc.ids
    text = " ".join(" ".join(doc.text).split())
    for needle in ("scripted-pickup", "two-stage", "fake/agent", "fake/optimizer", "LLM calls", "tokens",
                   "completed 2 generations", "validation 20, test 20"):
        assert needle in text, needle
    # the final table is the TEST split, said so, with n, CI and the paired p-values
    assert "TEST SPLIT" in text and "measured on the test split (20 seeds)" in text
    assert "baseline (robust-cot)" in text and "initial (two-stage, plain)" in text and "best (two-stage, c1)" in text
    assert "random floor (random agent)" in text
    assert "[83.9%, 100.0%]" in text and "[11.2%, 46.9%]" in text and "100.0%" in text
    assert re.search(r"best vs initial ?: 15 seeds won, 0 lost, 5 tied \(n = 20\); mean difference \+0\.750; exact "
                     r"sign test \(two-sided\) p = 6\.1e-05", text)
    assert "best vs baseline" in text
    # per operator: mutate proposed 3, stopped 1, accepted 1, promoted 1
    ops = page.split('id="operators"', 1)[1].split("</section>", 1)[0]
    assert re.search(r"<td>mutate</td><td class=num>3</td><td class=num>1</td><td class=num>1</td>"
                     r"<td class=num>1</td>", ops)
    assert "Racing saved 6 training episodes" in text
    # decisions: a matplotlib chart (inline svg, text kept as text) and the per-generation table
    dec = page.split('id="decisions"', 1)[1].split("</section>", 1)[0]
    assert dec.count("<svg") == 1 and "<text" in dec
    dec_text = " ".join(" ".join(parse(dec).text).split())
    for needle in ("Training seeds: paired difference of each child to its parent", "promoted by the validation gate",
                   "rejected on training seeds", "stopped early by racing", "Validation seeds: the promotion gate",
                   "generation", "c1: PROMOTED", "validation 20/20 = 100%", "no accepted child"):
        assert needle in dec_text, needle
    # the test chart is drawn too
    assert "success rate on the TEST split, with 95% Wilson interval" in text
    assert page.count("<svg") == 2
    # lineage: every candidate, its operator, edit, rationale, verdict, status
    for needle in ("c0", "c1", "c2", "c3", "rewrite actor.rules", "delete actor.rules", "rewrite actor.role",
                   "episodes fail by picking up while the ball is to the left", "train Δ +1.000", "promoted",
                   "rejected", "stopped: futile", "chain c0 → c1", "★ best", "test 20/20 = 100%"):
        assert needle in text, needle
    # segment diff of best vs initial, lines coloured
    assert f'<span class="l add">+Move toward the ball. {RULE}</span>' in page
    assert '<span class="l del">-Move toward the ball.</span>' in page
    # behaviour signatures on the test seeds: initial vs best
    sig = " ".join(" ".join(parse(page.split('id="signatures"', 1)[1].split("</section>", 1)[0]).text).split())
    assert "pickup_not_facing 20 (100%) 20 (100%)" in sig and "no_effect_action 15 (75%) 0" in sig
    # analyses of both generations
    assert "Generation 1 — evidence about c0" in text and "Generation 2 — evidence about c1" in text
    assert "nothing says to face the ball first" in text
    assert "seed 1, step 0: picked up while the ball was to the left" in text
    assert "Mutator: 2 edit(s) proposed" in text
    assert_self_contained(page)


def test_decision_data_is_what_the_loop_decided(full_run):
    ck = json.loads((full_run.run_dir / "checkpoint.json").read_text())
    d = charts.decision_data(ck)
    assert [(k[0], k[2], k[3]) for k in d["children"]] == [(1, "c1", "promoted"), (1, "c2", "rejected"),
                                                           (2, "c3", "stopped")]
    assert d["children"][0][1] == 1.0 and d["margin"] == 0.0
    assert d["gated"] == [(1, 1.0, "c1", True)]
    assert d["best"] == [(0, 0.25, "c0"), (1, 1.0, "c1"), (2, 1.0, "c1")]
    assert charts.decisions_svg(charts.decision_data({})) == ""
    assert charts.final_svg([]) == ""


def test_render_is_pure_and_escapes_malicious_text(full_run):
    data = load_run(full_run.run_dir)
    page = render_html(data)
    assert page == render_html(load_run(full_run.run_dir))  # deterministic, charts included
    ck = data["checkpoint"]
    best = ck["candidates"][ck["best_id"]]
    best["prompts"]["modules"]["actor"][1]["text"] = EVIL + " & more"
    best["edit"]["rationale"] = EVIL
    ck["candidates"]["c2"]["status"] = EVIL  # a status never seen: shown, escaped, also in the chart legend
    ck["candidates"]["c2"]["operator"] = EVIL
    ck["config"]["task"] = EVIL
    ck["final"]["signatures"]["best"][0]["detail"] = EVIL
    data["report"]["rows"][1]["name"] = "baseline " + EVIL + " costs $5 and $6"  # no mathtext either
    data["run"] = EVIL
    data["analyses"][1]["analysis"]["attributions"][0]["explanation"] = EVIL
    data["analyses"][1]["analysis"]["attributions"][0]["evidence"][0]["note"] = '"><img src=x onerror=alert(1)>'
    data["analyses"][1]["analysis"]["attributions"][0]["effect"] = '"><b>'
    page = render_html(data)
    low = page.lower()
    assert "<script" not in low and "<img" not in low and "unavailable" not in page
    assert esc(EVIL) in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "+&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page  # the diff line, escaped
    assert "costs $5 and $6" in page  # the chart label kept its dollars as text
    assert "script" not in parse(page).tags and "img" not in parse(page).tags
    assert_self_contained(page)


def test_every_operator_and_status_renders(full_run):
    data = load_run(full_run.run_dir)
    ck = data["checkpoint"]
    base = ck["candidates"]["c2"]
    extra = {"c4": ("crossover", {"parents": ["c1", "c2"]}, None, "not-promoted"),
             "c5": ("hint", {"hint": "face-first"}, {"op": "add", "module": "actor", "segment": "tips"}, "vetoed"),
             "c6": ("prune", None, {"op": "delete", "module": "actor", "segment": "role"}, "accepted"),
             "c7": ("skill", {"skill": "s1"}, {"op": "add", "module": "actor", "segment": "skill"}, "new")}
    for cid, (op, source, edit, status) in extra.items():
        ck["candidates"][cid] = {**base, "id": cid, "generation": 2, "parent": "c1", "operator": op, "source": source,
                                 "edit": edit, "status": status}
        ck["generations"][1]["children"].append(cid)
    ck["candidates"]["c4"]["validation"] = ck["candidates"]["c0"]["validation"]
    ck["generations"][1]["gate"] = {"candidate": "c4", "promoted": False, "reason": "sign test p=0.5"}
    page = render_html(data)
    assert "unavailable" not in page
    text = " ".join(" ".join(parse(page).text).split())
    for needle in ("crossover of c1 × c2", "add actor.tips (hint face-first)", "delete actor.role",
                   "add actor.skill (skill s1)", "accepted, vetoed by the backtest", "accepted, not promoted",
                   "gated child, not promoted", "c4: not promoted"):
        assert needle in text, needle
    ops = page.split('id="operators"', 1)[1].split("</section>", 1)[0]
    for op in ("crossover", "hint", "prune", "skill", "mutate"):
        assert f"<td>{op}</td>" in ops, op
    assert "<td><b>all</b></td><td class=num><b>7</b></td>" in ops


def test_partial_runs_render(tmp_path):
    # a run with no generation: the test split is still played; nothing decided, no analysis
    run0 = make_run(tmp_path, "gen0", generations=0, baseline=None)
    page = (run0.run_dir / REPORT_HTML).read_text()
    assert "No generation has been evaluated yet" in page and "No analysis recorded yet" in page
    assert "No segment differs" in page and "No child has been proposed yet" in page
    assert "initial (two-stage, plain)" in page and "baseline (" not in page
    # a checkpoint cut down by hand: interrupted before the test split, best id missing, odd fields
    d = tmp_path / "cut"
    d.mkdir()
    ck = json.loads((run0.run_dir / "checkpoint.json").read_text())
    c0 = ck["candidates"]["c0"]
    c0["test"] = {}
    ck = {"version": 2, "config": ck["config"], "candidates": {"c0": c0, "c5": {"id": "c5", "parent": "c9",
                                                                               "status": None, "verdict": "odd"}},
          "initial_id": "c0", "best_id": "c9", "phase": "optimize",
          "generations": [{"index": 1, "parent": "c0", "children": ["c5", "c7"], "done": False}],
          "usage": {}, "stop_reason": "", "final": {}}
    (d / "checkpoint.json").write_text(json.dumps(ck))
    (d / "analyses").mkdir()
    (d / "analyses" / "gen-001.json").write_text('{"generation": 1, "parent": "c0", "analysis": {"ok": false, '
                                                 '"error": "no JSON", "raw": "Sorry <b>no</b>"}}')
    (d / "analyses" / "gen-002.json").write_text("{cut")
    (d / "report.json").write_text("{cut")
    path = write_html(d)
    page = path.read_text()
    assert "not finished" in page and "The initial or best prompts are not available" in page
    assert "The test split has not been played yet" in page and "No behaviour signature recorded" in page
    assert "Unusable analysis: no JSON" in page and "Sorry &lt;b&gt;no&lt;/b&gt;" in page
    assert "report.json: unreadable" in page and "gen-002.json: unreadable" in page
    assert "not reached" in page and "unavailable" not in page
    assert not list(d.glob("*.tmp"))
    assert "<!DOCTYPE html>" in render_html({}) and "unavailable" not in render_html({})


def test_load_run_errors_and_cli(full_run, tmp_path, capsys):
    from promptevo.cli.report import cli_main

    with pytest.raises(RunError, match="no checkpoint.json"):
        load_run(tmp_path)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "checkpoint.json").write_text("[1,")
    with pytest.raises(RunError, match="corrupt checkpoint") as e:
        load_run(tmp_path / "bad")
    assert "\n" not in str(e.value)
    assert cli_main(["nope", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no checkpoint.json" in err and len(err.splitlines()) == 1
    run_dir = full_run.run_dir
    copy = tmp_path / "results" / "r1"
    shutil.copytree(run_dir, copy)
    (copy / REPORT_HTML).unlink()
    assert cli_main(["r1", "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out.strip()
    assert out == str(copy / REPORT_HTML) and Path(out).exists()
    # the same through `promptevo report RUN`
    from typer.testing import CliRunner

    from promptevo.cli.app import app

    (copy / REPORT_HTML).unlink()
    r = CliRunner().invoke(app, ["report", str(copy)])
    assert r.exit_code == 0 and (copy / REPORT_HTML).exists()


def test_report_failure_does_not_fail_the_run(tmp_path, monkeypatch):
    import promptevo.reporting.report as report

    def boom(run_dir):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "write_html", boom)
    res = make_run(tmp_path, "boom", generations=1, baseline=None)
    assert res.best_id == "c1" and (res.run_dir / "report.md").exists()
    assert not (res.run_dir / REPORT_HTML).exists()
    assert "report.html not written (RuntimeError: disk full)" in (res.run_dir / "run.log").read_text()


# -- headless browser -------------------------------------------------------------------------------


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
    from PIL import Image  # Pillow comes with matplotlib

    with Image.open(png) as img:
        assert img.size == (1200, 1600)
        top = img.convert("RGB").crop((0, 0, 1200, 1000))  # header, test table and its chart
        colours = {bytes(c) for _, c in top.getcolors(maxcolors=1200 * 1000)}
    assert len(colours) > 50, f"screenshot looks blank ({len(colours)} colours)"
    assert bytes.fromhex("1a56c4") in colours  # the TEST SPLIT label and the best row's interval
    # the page as the browser built it parses, and has every section and both charts
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    doc = parse(dom.stdout)
    assert SECTIONS <= doc.ids
    assert doc.tags.count("svg") == 2
