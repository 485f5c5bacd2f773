"""The optimizer's LLM object (issue "One shape for every operator", item 4). The gateway here is a
test double recording what each call asked for; nothing here is a measured result."""

from __future__ import annotations

from types import SimpleNamespace

from promptevo.optim.optimizer_lm import OptimizerLM


class RecordingGateway:
    def __init__(self, replies):
        self.replies = list(replies)
        self.calls: list[dict] = []

    def complete(self, messages, **kw):
        self.calls.append(kw)
        r = self.replies.pop(0)
        if isinstance(r, Exception):
            raise r
        return SimpleNamespace(text=r, prompt_tokens=10, completion_tokens=5, cost=0.0, truncated=False)


def test_settings_come_from_the_config_with_short_roles_capped_and_call_arguments_winning():
    cfg = SimpleNamespace(optimizer_temperature=0.7, optimizer_max_tokens=2048)
    gw = RecordingGateway(['{"x": 1}', '{"x": 2}', '{"x": 3}'])
    lm = OptimizerLM.from_config(gw, cfg)
    lm.json([{"role": "user", "content": "a"}], role="analyzer", parse=lambda o: o["x"])
    lm.json([{"role": "user", "content": "b"}], role="cards", parse=lambda o: o["x"])
    lm.json([{"role": "user", "content": "c"}], role="cards", parse=lambda o: o["x"], max_tokens=300, temperature=0.1)
    assert [(c["temperature"], c["max_tokens"]) for c in gw.calls] == [(0.7, 2048), (0.7, 1024), (0.1, 300)]
    assert lm.usage["cards"]["calls"] == 2 and lm.usage["analyzer"]["prompt_tokens"] == 10
    assert OptimizerLM.of(lm) is lm


def test_a_json_reply_that_fails_to_parse_is_retried_once_with_a_correction():
    gw = RecordingGateway(["not json", '{"x": 5}'])
    parsed, raw, err, usage = OptimizerLM(gw).json([{"role": "user", "content": "q"}], role="mutator",
                                                    parse=lambda o: o["x"])
    assert parsed == 5 and err is None and usage["calls"] == 2


def test_a_text_call_that_fails_is_one_line_and_counts_no_call():
    lm = OptimizerLM(RecordingGateway([RuntimeError("server gone\nmore")]))
    reply = lm.text([{"role": "user", "content": "q"}], role="paraphrase")
    assert reply.text is None and reply.error == "RuntimeError: server gone" and reply.usage["calls"] == 0
    ok = OptimizerLM(RecordingGateway(["hello"]), temperature=0.3).text([], role="paraphrase", seed=4)
    assert ok.text == "hello" and not ok.truncated and ok.usage["calls"] == 1
