"""Tests of the LLM gateway, using only the ScriptedLLM test double (no network, no model)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
import time
import types

import pytest

# promptevo must be imported before litellm: it sets LITELLM_LOCAL_MODEL_COST_MAP so that litellm
# does not fetch its price map from the network at import time.
from promptevo.llm import (
    Completion,
    Gateway,
    LLMConfig,
    LLMConfigError,
    LLMError,
    LLMReplyError,
    ResponseCache,
    ScriptedLLM,
    ScriptedReply,
    UsageTracker,
)

import litellm  # noqa: E402  (after promptevo, see above)
import promptevo.llm  # noqa: E402

MSGS = [{"role": "system", "content": "You play a game."},
        {"role": "user", "content": "You see a ball ahead. Act."}]
SECRET = "sk-test-SECRET-0123456789abcdef"


def make(tmp_path=None, **kw) -> Gateway:
    cfg = dict(model="fake/scripted", backoff_base=0.01, num_retries=3,
               cache_dir=str(tmp_path / "cache") if tmp_path is not None else None)
    cfg.update(kw)
    return Gateway(LLMConfig(**cfg))


class Script:
    """A responder that plays back a list of replies/exceptions and records every call."""

    def __init__(self, *outputs):
        self.outputs = list(outputs)
        self.calls: list[tuple[list, dict]] = []
        self.lock = threading.Lock()

    def __call__(self, messages, params):
        with self.lock:
            self.calls.append((messages, params))
            return self.outputs.pop(0) if len(self.outputs) > 1 else self.outputs[0]


def rate_limit():
    return litellm.RateLimitError("slow down", llm_provider="fake", model="scripted")


def server_error():
    return litellm.InternalServerError("boom", llm_provider="fake", model="scripted")


def timeout():
    return litellm.Timeout("took too long", model="scripted", llm_provider="fake")


# --- basics ---------------------------------------------------------------------------------------


def test_scripted_llm_is_a_litellm_custom_provider():
    assert issubclass(ScriptedLLM, litellm.CustomLLM)
    gw = make()
    with ScriptedLLM.install(Script("go forward")):
        c = gw.complete(MSGS)
    assert isinstance(c, Completion)
    assert c.text == "go forward"
    assert c.cached is False and c.truncated is False
    assert c.prompt_tokens == len("You play a game.You see a ball ahead. Act.") // 4
    assert c.completion_tokens == len("go forward") // 4
    assert c.cost == 0.0
    assert c.model == "fake/scripted"
    providers = [item["provider"] for item in litellm.custom_provider_map]
    assert providers.count("fake") == 1


def test_params_reach_the_provider_and_grammar_only_for_in_process_models():
    script = Script("pick up")
    gw = make(temperature=0.7, max_tokens=33, seed=5)
    with ScriptedLLM.install(script):
        gw.complete(MSGS, stop=["\n"], grammar='root ::= "pick up"')
    params = script.calls[0][1]
    assert params["temperature"] == 0.7
    assert params["max_tokens"] == 33
    assert params["seed"] == 5
    assert params["stop"] == ["\n"]
    assert params["grammar"] == 'root ::= "pick up"'
    remote = Gateway(LLMConfig(model="openai/gpt-4o-mini", api_key=SECRET, cache_dir=None,
                               timeout=7.5))
    kw = remote._call_kwargs(MSGS, 0.0, 10, None, None, "root ::= x")
    assert "grammar" not in kw
    assert kw["timeout"] == 7.5 and kw["num_retries"] == 0


def test_one_argument_responder_is_accepted():
    gw = make()
    with ScriptedLLM.install(lambda messages: messages[-1]["content"].upper()):
        assert gw.complete(MSGS).text == "YOU SEE A BALL AHEAD. ACT."


def test_registration_keeps_other_providers_and_does_not_double_register(monkeypatch):
    other = {"provider": "someoneelse", "custom_handler": object()}
    monkeypatch.setattr(litellm, "custom_provider_map", [other])
    gw = make()
    with ScriptedLLM.install(Script("ok")):
        gw.complete(MSGS)
        gw.complete(MSGS + [{"role": "user", "content": "again"}])
    with ScriptedLLM.install(Script("ok")):
        pass
    providers = [item["provider"] for item in litellm.custom_provider_map]
    assert providers == ["someoneelse", "fake"]
    assert litellm.custom_provider_map[0] is other


# --- retries --------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_error", [rate_limit, server_error, timeout])
def test_transient_error_is_retried_then_succeeds(make_error):
    script = Script(make_error(), make_error(), "open door")
    gw = make()
    with ScriptedLLM.install(script):
        c = gw.complete(MSGS, role="actor")
    assert c.text == "open door"
    assert len(script.calls) == 3
    snap = gw.usage.snapshot()
    assert snap["by_role"]["actor"]["retries"] == 2
    assert snap["by_role"]["actor"]["errors"] == 0
    assert snap["total"]["calls"] == 1


def test_retries_exhausted_raises_llmerror_with_clear_message():
    script = Script(rate_limit())
    gw = make(num_retries=2)
    with ScriptedLLM.install(script), pytest.raises(LLMError) as ei:
        gw.complete(MSGS, role="mutator")
    err = ei.value
    assert not isinstance(err, LLMConfigError)
    msg = str(err)
    assert "\n" not in msg
    assert "fake/scripted" in msg and "3 attempt" in msg and "slow down" in msg
    assert "mutator" in msg
    assert len(script.calls) == 3
    row = gw.usage.snapshot()["by_role"]["mutator"]
    assert row["errors"] == 1 and row["retries"] == 2 and row["calls"] == 0


@pytest.mark.parametrize("exc", [
    litellm.AuthenticationError("invalid api key", llm_provider="fake", model="scripted"),
    litellm.BadRequestError("bad field", model="scripted", llm_provider="fake"),
    litellm.NotFoundError("no such model", model="scripted", llm_provider="fake"),
])
def test_config_errors_are_not_retried(exc):
    script = Script(exc)
    gw = make()
    with ScriptedLLM.install(script), pytest.raises(LLMConfigError) as ei:
        gw.complete(MSGS)
    assert len(script.calls) == 1
    assert "\n" not in str(ei.value)
    assert gw.usage.snapshot()["total"]["retries"] == 0
    assert gw.usage.snapshot()["total"]["errors"] == 1


def test_empty_reply_is_retried_then_raises_reply_error():
    script = Script("  \n ")
    gw = make(num_retries=2)
    with ScriptedLLM.install(script), pytest.raises(LLMReplyError) as ei:
        gw.complete(MSGS)
    assert len(script.calls) == 3
    assert "empty reply" in str(ei.value)


def test_empty_reply_then_text_succeeds():
    script = Script("", "turn left")
    gw = make()
    with ScriptedLLM.install(script):
        assert gw.complete(MSGS).text == "turn left"
    assert gw.usage.snapshot()["total"]["retries"] == 1


def test_truncated_reply_is_returned_and_flagged():
    gw = make(max_tokens=2)
    with ScriptedLLM.install(Script("a very long reasoning that goes on and on")):
        c = gw.complete(MSGS)
    assert c.truncated is True and c.finish_reason == "length"
    assert c.text == "a very l"
    with ScriptedLLM.install(Script(ScriptedReply("cut", finish_reason="length"))):
        assert make().complete(MSGS).truncated is True


def test_odd_text_is_returned_as_str():
    gw = make()
    with ScriptedLLM.install(Script("caf\u00e9 \udcff \u2603 \x00end")):
        c = gw.complete(MSGS)
    assert isinstance(c.text, str)
    c.text.encode("utf-8")  # no lone surrogates left
    assert c.text.startswith("caf\u00e9") and c.text.endswith("end")


# --- configuration errors -------------------------------------------------------------------------


def test_unknown_provider_is_a_config_error(tmp_path):
    gw = Gateway(LLMConfig(model="nosuchprovider/x", cache_dir=None))
    with pytest.raises(LLMConfigError) as ei:
        gw.complete(MSGS)
    msg = str(ei.value)
    assert "unknown provider 'nosuchprovider'" in msg
    assert "openai/gpt-4o-mini" in msg and "\n" not in msg


def test_missing_api_key_is_a_config_error_without_network(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def no_network(*a, **k):
        raise AssertionError("litellm.completion must not be called")

    monkeypatch.setattr(litellm, "completion", no_network)
    gw = Gateway(LLMConfig(model="openai/gpt-4o-mini", cache_dir=None))
    with pytest.raises(LLMConfigError) as ei:
        gw.complete(MSGS)
    assert str(ei.value).startswith("OPENAI_API_KEY is not set for model openai/gpt-4o-mini")
    with pytest.raises(LLMConfigError):
        gw.check()


def test_local_server_needs_no_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    gw = Gateway(LLMConfig(model="openai/qwen", api_base="http://127.0.0.1:8080/v1",
                           cache_dir=None))
    gw.check()
    assert gw._call_kwargs(MSGS, 0.0, 5, None, None, None)["api_key"] == "sk-no-key-required"


def test_bad_config_values():
    with pytest.raises(LLMConfigError):
        LLMConfig(model="")
    with pytest.raises(LLMConfigError):
        LLMConfig(concurrency=0)


def test_local_models_register_the_local_provider_lazily(monkeypatch):
    """local/... calls promptevo.llm.local.ensure_registered(); grammar is passed through."""
    script = Script("go forward")
    calls = []
    stub = types.ModuleType("promptevo.llm.local")

    def ensure_registered():
        calls.append(1)
        if not any(i["provider"] == "local" for i in litellm.custom_provider_map):
            litellm.custom_provider_map.append(
                {"provider": "local", "custom_handler": ScriptedLLM()})

    stub.ensure_registered = ensure_registered
    monkeypatch.setitem(sys.modules, "promptevo.llm.local", stub)
    monkeypatch.setattr(promptevo.llm, "local", stub, raising=False)
    # an earlier test may have registered the real llama.cpp provider: start from a map without it
    monkeypatch.setattr(
        litellm, "custom_provider_map", [i for i in litellm.custom_provider_map if i["provider"] != "local"]
    )
    gw = Gateway(LLMConfig(model="local/stub-model", cache_dir=None, backoff_base=0.01))
    with ScriptedLLM.install(script):
        c = gw.complete(MSGS, grammar='root ::= "go forward"')
    assert c.text == "go forward" and c.cost == 0.0
    assert calls
    assert script.calls[0][1]["grammar"] == 'root ::= "go forward"'


# --- cache ----------------------------------------------------------------------------------------


def test_cache_hit_and_miss(tmp_path):
    script = Script("go forward")
    gw = make(tmp_path)
    with ScriptedLLM.install(script):
        first = gw.complete(MSGS, role="agent")
        second = gw.complete(MSGS, role="agent")
        other = gw.complete(MSGS, role="agent", temperature=0.5)  # different key -> miss
    assert first.cached is False and second.cached is True and other.cached is False
    assert second.text == first.text
    assert second.prompt_tokens == first.prompt_tokens and second.cost == 0.0
    assert len(script.calls) == 2
    row = gw.usage.snapshot()["by_role"]["agent"]
    assert row["calls"] == 3 and row["cache_hits"] == 1
    assert row["prompt_tokens"] == 2 * first.prompt_tokens  # cache hits spend no tokens
    # a fresh gateway on the same directory reuses the cache (reproducible re-runs)
    gw2 = make(tmp_path)
    with ScriptedLLM.install(Script(AssertionError("must not be called"))):
        again = gw2.complete(MSGS)
    assert again.cached is True and again.text == "go forward"
    assert len(gw2.cache) == 2


def test_cache_key_covers_request_fields(tmp_path):
    script = Script("x")
    gw = make(tmp_path)
    with ScriptedLLM.install(script):
        gw.complete(MSGS)
        gw.complete(MSGS, max_tokens=7)
        gw.complete(MSGS, seed=1)
        gw.complete(MSGS, stop=["."])
        gw.complete(MSGS, grammar="root ::= x")
        gw.complete(MSGS[:1])
        gw.complete(MSGS)  # hit
    assert len(script.calls) == 6


def test_cache_off(tmp_path):
    script = Script("go forward")
    gw = make(None)
    assert gw.cache is None
    with ScriptedLLM.install(script):
        a = gw.complete(MSGS)
        b = gw.complete(MSGS)
    assert not a.cached and not b.cached
    assert len(script.calls) == 2
    assert gw.usage.snapshot()["total"]["cache_hits"] == 0


def test_failures_and_empty_replies_are_not_cached(tmp_path):
    gw = make(tmp_path, num_retries=0)
    with ScriptedLLM.install(Script(server_error())), pytest.raises(LLMError):
        gw.complete(MSGS)
    with ScriptedLLM.install(Script("")), pytest.raises(LLMReplyError):
        gw.complete(MSGS)
    assert len(gw.cache) == 0


def test_cache_is_sqlite_wal_one_row_per_key(tmp_path):
    cache = ResponseCache(tmp_path)
    cache.put("k", {"text": "a"})
    cache.put("k", {"text": "b"})
    assert cache.get("k") == {"text": "b"} and len(cache) == 1
    conn = sqlite3.connect(cache.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    cache.close()


# --- secrets --------------------------------------------------------------------------------------


def test_secret_never_leaks(tmp_path):
    script = Script("go forward", litellm.AuthenticationError(f"key {SECRET} rejected",
                                                              llm_provider="fake",
                                                              model="scripted"))
    gw = make(tmp_path, api_key=SECRET)
    with ScriptedLLM.install(script):
        gw.complete(MSGS)
        with pytest.raises(LLMConfigError) as ei:
            gw.complete(MSGS + [{"role": "user", "content": "more"}])
    assert SECRET not in str(ei.value)
    assert SECRET not in repr(gw.config) and SECRET not in str(gw.config)
    assert SECRET not in repr(gw)
    public = gw.config.public_dict()
    assert "api_key" not in public and public["api_key_set"] is True
    assert SECRET not in str(public)
    gw.close()
    for f in (tmp_path / "cache").iterdir():
        assert SECRET.encode() not in f.read_bytes()


# --- accounting -----------------------------------------------------------------------------------


def test_accounting_per_role_and_total():
    gw = make()
    with ScriptedLLM.install(Script("12345678")):  # 2 completion tokens
        gw.complete([{"role": "user", "content": "a" * 40}], role="descriptor")  # 10 prompt tokens
        gw.complete([{"role": "user", "content": "b" * 80}], role="actor")  # 20
        gw.complete([{"role": "user", "content": "c" * 80}], role="actor")  # 20
    snap = gw.usage.snapshot()
    assert snap["by_role"]["descriptor"]["prompt_tokens"] == 10
    assert snap["by_role"]["actor"]["prompt_tokens"] == 40
    assert snap["by_role"]["actor"]["calls"] == 2
    assert snap["total"]["calls"] == 3
    assert snap["total"]["prompt_tokens"] == 50
    assert snap["total"]["completion_tokens"] == 6
    assert snap["total"]["cost"] == 0.0
    assert snap["total"]["latency_s"] >= 0.0
    assert set(snap["total"]) == {"calls", "cache_hits", "prompt_tokens", "completion_tokens",
                                  "cost", "errors", "retries", "latency_s"}
    import json
    json.dumps(snap)  # plain data for summary.json


def test_tracker_can_be_shared_and_reset():
    tracker = UsageTracker()
    gw1 = Gateway(LLMConfig(model="fake/scripted", cache_dir=None), usage=tracker)
    gw2 = Gateway(LLMConfig(model="fake/scripted", cache_dir=None), usage=tracker)
    with ScriptedLLM.install(Script("ok")):
        gw1.complete(MSGS)
        gw2.complete(MSGS, role="analyzer")
    assert tracker.total()["calls"] == 2 and tracker.role("analyzer")["calls"] == 1
    tracker.reset()
    assert tracker.snapshot() == {"total": tracker.total(), "by_role": {}}


# --- concurrency ----------------------------------------------------------------------------------


def test_concurrency_limit_is_honoured():
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow(messages, params):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return "ok"

    gw = make(concurrency=2)
    errors = []

    def worker(i):
        try:
            gw.complete([{"role": "user", "content": f"q{i}"}])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with ScriptedLLM.install(slow):
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert state["max"] == 2
    assert gw.usage.snapshot()["total"]["calls"] == 8


# --- async ----------------------------------------------------------------------------------------


def test_acomplete_works_retries_and_caches(tmp_path):
    script = Script(rate_limit(), "pick up the key")
    gw = make(tmp_path)

    async def main():
        a = await gw.acomplete(MSGS, role="agent")
        b = await gw.acomplete(MSGS, role="agent")
        return a, b

    with ScriptedLLM.install(script):
        a, b = asyncio.run(main())
    assert a.text == "pick up the key" and not a.cached
    assert b.cached
    assert len(script.calls) == 2
    snap = gw.usage.snapshot()["total"]
    assert snap["retries"] == 1 and snap["cache_hits"] == 1


def test_acomplete_concurrency_and_errors():
    state = {"now": 0, "max": 0}

    async def run():
        gw = make(concurrency=3)
        return await asyncio.gather(*[gw.acomplete([{"role": "user", "content": f"q{i}"}])
                                      for i in range(9)])

    def responder(messages, params):
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        state["now"] -= 1
        return "ok"

    with ScriptedLLM.install(responder):
        out = asyncio.run(run())
    assert [c.text for c in out] == ["ok"] * 9
    with ScriptedLLM.install(Script(litellm.BadRequestError("nope", model="scripted",
                                                            llm_provider="fake"))):
        with pytest.raises(LLMConfigError):
            asyncio.run(make().acomplete(MSGS))
