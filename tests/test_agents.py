"""Agents: action parsing, message layout/history window, two-stage calls, grammars, registry."""

from __future__ import annotations

from typing import Any

import pytest

from promptevo.agents import (
    agents,
    FALLBACK_ACTION,
    agent_factory,
    AgentError,
    RandomAgent,
    default_prompts,
    make_agent,
    match_action,
    normalize_action,
    parse_plain_action,
    parse_tagged_action,
)
from promptevo.envs.base import StepResult, TextEnv
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import load_task, make_env

BABYAI_ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


class FakeCounterEnv(TextEnv):
    """Test double: observation 'obs k' at step k; actions 'a' and 'b'; never ends before max_steps."""

    family = "fake"

    def __init__(self, max_steps: int = 30):
        self._max = max_steps
        self.t = 0

    valid_actions = property(lambda self: ["a", "b"])  # type: ignore[assignment]
    default_action = property(lambda self: "a")  # type: ignore[assignment]
    max_steps = property(lambda self: self._max)  # type: ignore[assignment]
    mission = property(lambda self: "press b")  # type: ignore[assignment]
    progression = property(lambda self: 0.0)  # type: ignore[assignment]

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.t = 0
        return "obs 0", {"mission": self.mission}

    def step(self, action: str) -> StepResult:
        self.t += 1
        ok = action in self.valid_actions
        return StepResult(f"obs {self.t}", 0.0, False, self.t >= self._max,
                          {"valid_action": ok, "executed_action": action if ok else "a"})

    def instructions(self) -> str:
        return "ENV RULES HERE"


def system_prompt(fmt: str, extra: str = "Mission: {mission}. Actions: {actions}. {instructions}") -> PromptSet:
    return PromptSet.of({"system": Prompt((Segment("role", extra), Segment("format", fmt)))})


@pytest.fixture
def gateway() -> Gateway:
    return Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))


# -- parsing ---------------------------------------------------------------------------------------
def test_normalize_and_match_are_tolerant_but_exact():
    assert normalize_action("  Go Forward. ") == "go forward"
    assert match_action("**turn left**", BABYAI_ACTIONS) == "turn left"
    assert match_action("`pick up`!", BABYAI_ACTIONS) == "pick up"
    assert match_action("go   forward", BABYAI_ACTIONS) == "go forward"
    assert match_action("1. turn left", BABYAI_ACTIONS) is None
    assert match_action("turn left then go forward", BABYAI_ACTIONS) is None
    assert match_action("", BABYAI_ACTIONS) is None


def test_robust_cot_takes_first_match_and_falls_back():
    space = FakeCounterEnv().action_space()
    assert parse_tagged_action("think...\n<|ACTION|> B <|END|> and <|ACTION|>a<|END|>", space) == ("b", True)
    # the first block wins even when it is unusable (BALROG's first-match behaviour)
    assert parse_tagged_action("<|ACTION|>YOUR_ACTION<|END|> then <|ACTION|>a<|END|>", space) == (
        FALLBACK_ACTION, False)
    assert parse_tagged_action("<|ACTION|>\nb\n<|END|>", space) == ("b", True)  # DOTALL + strip
    assert parse_tagged_action("I choose b", space) == (FALLBACK_ACTION, False)
    assert parse_tagged_action("", space) == (FALLBACK_ACTION, False)


def test_naive_needs_the_whole_reply_to_be_an_action():
    space = FakeCounterEnv().action_space()
    assert parse_plain_action("B.", space) == ("b", True)
    assert parse_plain_action("I pick b", space) == (FALLBACK_ACTION, False)


@pytest.mark.parametrize("task", ["goto", "mapf-easy", "mapf-single"])
def test_fallback_is_invalid_in_real_envs(task):
    env = make_env(load_task(task))
    env.reset(0)
    r = env.step(FALLBACK_ACTION)
    assert r.info["valid_action"] is False
    assert r.info["executed_action"] == env.default_action


def test_mapf_joint_actions_use_the_env_parser():
    env = make_env(load_task("mapf-easy"))
    env.reset(0)
    space = env.action_space()
    assert space.n_agents == 2  # a joint action space
    assert space.match("Agent 1: UP, agent 2: left") == "agent 1: up, agent 2: left"
    assert parse_tagged_action("<|ACTION|>agent 1: down, agent 2: stay<|END|>", space) == (
        "agent 1: down, agent 2: stay", True)
    assert "agent 1" in space.describe() and "stay" in space.describe()
    assert env.step(space.sample(__import__("random").Random(0))).info["valid_action"]


# -- message layout and history ----------------------------------------------------------------------
def test_naive_layout_history_window_and_no_reasoning_in_history(gateway):
    replies = iter(["a", "b", "", "B.", "a", "b", "a"])
    seen: list[list[dict]] = []

    def responder(messages):
        seen.append(messages)
        return next(replies) or " "  # a blank reply

    env = FakeCounterEnv()
    agent = make_agent("naive", gateway, system_prompt("Reply with the action."), history=3)
    obs, _ = env.reset(0)
    agent.reset(env, "press b")
    with ScriptedLLM.install(responder):
        for _ in range(7):
            d = agent.act(obs, {})
            obs = env.step(d.action).observation
    first = seen[0]
    assert first[0] == {"role": "user", "content": "Mission: press b. Actions: a, b. ENV RULES HERE"}
    assert first[1]["content"] == "Current Observation:\nobs 0\n\nReply with the action."
    last = seen[-1]
    # 3 observations + 3 previous actions kept (the oldest is an orphan action), instructions first
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in last[1::2]] == ["b", "a", "b"]
    assert last[2]["content"] == "Observation:\nobs 4"
    assert last[-1]["content"].startswith("Current Observation:\nobs 6")
    assert sum("Reply with the action." in m["content"] for m in last) == 1  # format only on the newest


def test_blank_reply_adds_no_assistant_turn(gateway):
    replies = iter(["   ", "a"])
    seen: list[list[dict]] = []

    def responder(messages):
        seen.append(messages)
        return next(replies)

    env = FakeCounterEnv()
    agent = make_agent("naive", gateway, system_prompt("fmt"))
    obs, _ = env.reset(0)
    agent.reset(env, "press b")
    with ScriptedLLM.install(responder):
        d = agent.act(obs, {})
        assert d.parsed is False and d.action == FALLBACK_ACTION
        agent.act(env.step(d.action).observation, {})
    assert [m["role"] for m in seen[1]] == ["user", "user", "user"]


def test_robust_cot_keeps_only_the_action_in_history(gateway):
    def responder(messages):
        return "Long reasoning about b.\n<|ACTION|>b<|END|>"

    env = FakeCounterEnv()
    agent = make_agent("robust-cot", gateway, system_prompt("Think, then <|ACTION|>x<|END|>."))
    obs, _ = env.reset(0)
    agent.reset(env, "press b")
    seen: list[list[dict]] = []
    with ScriptedLLM.install(lambda m: (seen.append(m), responder(m))[1]):
        d1 = agent.act(obs, {})
        d2 = agent.act(env.step(d1.action).observation, {})
    assert (d1.action, d1.parsed) == ("b", True)
    assert d2.reply.startswith("Long reasoning")
    assert seen[1][2] == {"role": "assistant", "content": "b"}
    assert len(d1.calls) == 1 and d1.calls[0]["module"] == "system"
    assert d1.calls[0]["messages"] == seen[0] and d1.calls[0]["reply"] == d1.reply
    assert d1.calls[0]["completion_tokens"] > 0


def test_instruction_role_can_be_system(gateway):
    env = FakeCounterEnv()
    agent = make_agent("naive", gateway, system_prompt("f"), instruction_role="system")
    agent.reset(env, "press b")
    with ScriptedLLM.install(lambda m: "a"):
        d = agent.act("obs 0", {})
    assert d.calls[0]["messages"][0]["role"] == "system"


# -- two-stage ------------------------------------------------------------------------------------
def test_two_stage_call_order_and_recorded_calls(gateway):
    ps = PromptSet.of({
        "descriptor": Prompt((Segment("role", "DESCRIBE for {mission}"),)),
        "actor": Prompt((Segment("role", "ACT"), Segment("output_format", "<|ACTION|>x<|END|>"))),
    })
    order: list[str] = []

    def responder(messages):
        sysmsg = messages[0]["content"]
        if sysmsg.startswith("DESCRIBE"):
            order.append("descriptor")
            assert "obs 0" in messages[1]["content"] or "obs 1" in messages[1]["content"]
            return "target b is ahead"
        order.append("actor")
        assert "Description:\ntarget b is ahead" in messages[1]["content"]
        assert "obs" not in messages[1]["content"]  # the actor sees the description, not the raw obs
        return "<|ACTION|>b<|END|>"

    env = FakeCounterEnv()
    agent = make_agent("two-stage", gateway, ps)
    agent.reset(env, "press b")
    with ScriptedLLM.install(responder):
        d = agent.act("obs 0", {})
        d2 = agent.act("obs 1", {})
    assert order == ["descriptor", "actor", "descriptor", "actor"]
    assert [c["module"] for c in d.calls] == ["descriptor", "actor"]
    assert d.description == "target b is ahead" and d.action == "b" and d.parsed
    assert d.calls[0]["messages"][0]["content"] == "DESCRIBE for press b"
    assert "Recent actions (oldest first): b" in d2.calls[0]["messages"][1]["content"]
    snap = gateway.usage.snapshot()
    assert "descriptor" in str(snap) and "actor" in str(snap)


# -- grammar / constrained decoding ------------------------------------------------------------------
def test_constrained_passes_a_grammar_and_auto_is_off_for_remote(gateway):
    got: list[Any] = []

    def responder(messages, params):
        got.append(params.get("grammar"))
        return "<|ACTION|>a<|END|>"

    env = FakeCounterEnv()
    with ScriptedLLM.install(responder):
        for constrained in (True, None):
            agent = make_agent("robust-cot", gateway, system_prompt("f"), constrained=constrained)
            agent.reset(env, "m")
            agent.act("obs 0", {})
    g = got[0]
    assert g is not None and '"<|ACTION|>" action "<|END|>"' in g and 'action ::= "a" | "b"' in g
    assert "think ::= [^<]{0,944}" in g  # (512 max_tokens - 40) * 2 chars, so the action always fits
    assert got[1] is None  # fake/ is not local/: no grammar unless asked


def test_mapf_joint_grammar_has_one_move_per_agent():
    env = make_env(load_task("mapf-easy"))
    env.reset(0)
    rules = env.action_space().gbnf_rules()
    assert rules.startswith('action ::= "agent 1: " move ", " "agent 2: " move')
    assert 'move ::= "up" | "down" | "left" | "right" | "stay"' in rules


# -- random + registry + default prompts -------------------------------------------------------------
def test_random_agent_is_seeded_and_valid():
    env = FakeCounterEnv()

    def play(seed: int) -> list[str]:
        a = RandomAgent(seed=1)
        a.reset(env, "m", seed=seed)
        return [a.act("o", {}).action for _ in range(20)]

    assert play(5) == play(5)
    assert play(5) != play(6)
    assert set(play(5)) <= {"a", "b"}


def test_unknown_agent_is_one_line_listing_valid_names(gateway):
    with pytest.raises(AgentError) as e:
        make_agent("smart", gateway, PromptSet())
    msg = str(e.value)
    assert "\n" not in msg and all(name in msg for name in agents())


@pytest.mark.parametrize("task", ["goto", "putnext", "mapf-easy"])
@pytest.mark.parametrize("agent", ["naive", "robust-cot", "two-stage", "random"])
def test_default_prompts_load_and_render(task, agent, gateway):
    t = load_task(task)
    ps = default_prompts(agent, t, "plain")
    if agent == "random":
        assert ps.module_names == []
        return
    expected = ["descriptor", "actor"] if agent == "two-stage" else ["system"]
    assert ps.module_names == expected
    env = make_env(t)
    _, info = env.reset(0)
    a = make_agent(agent, gateway, ps)
    a.reset(env, info["mission"])
    reply = "<|ACTION|>%s<|END|>" % (env.action_space().sample(__import__("random").Random(0)))
    with ScriptedLLM.install(lambda m: reply):
        d = a.act("obs", {})
    for call in d.calls:
        text = "\n".join(m["content"] for m in call["messages"])
        assert not any(p in text for p in ("{mission}", "{actions}", "{instructions}"))
    if agent != "naive":
        assert d.parsed


@pytest.mark.parametrize("family_task", ["goto", "mapf-easy"])
def test_guided_two_stage_prompts_exist(family_task):
    t = load_task(family_task)
    plain, guided = default_prompts("two-stage", t, "plain"), default_prompts("two-stage", t, "guided")
    assert guided.module_names == ["descriptor", "actor"]
    assert guided.token_estimate() > plain.token_estimate()
    assert "strategy" in guided.module("actor").names


def test_guided_robust_cot_babyai_and_missing_guided_is_clear():
    assert "task_rules" in default_prompts("robust-cot", load_task("goto"), "guided").module("system").names
    with pytest.raises(AgentError, match="no guided prompts"):
        default_prompts("naive", load_task("goto"), "guided")


def test_agent_factory_builds_fresh_agents_and_fails_early(gateway):
    f = agent_factory("naive", gateway, system_prompt("f"), history=4)
    a, b = f(), f()
    assert a is not b and a.history == 4
    with pytest.raises(AgentError, match="has no option .histroy."):
        agent_factory("naive", gateway, system_prompt("f"), histroy=4)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["robust-cot", "naive"])
def test_local_model_grammar_forces_a_valid_action(agent):
    """Real llama.cpp run: the GBNF grammar must be accepted and must force a parsable action."""
    pytest.importorskip("llama_cpp")
    from promptevo.llm import local as localmodel

    if not any(m.installed and m.model == "local/smollm2-135m" for m in localmodel.list_local_models()):
        pytest.skip("local/smollm2-135m is not installed")
    gw = Gateway(LLMConfig(model="local/smollm2-135m", cache_dir=None, max_tokens=96, num_retries=0))
    task = load_task("goto")
    env = make_env(task)
    obs, info = env.reset(0)
    a = make_agent(agent, gw, task=task)
    assert a.constrained  # auto-on for local/ models
    a.reset(env, info["mission"], seed=0)
    for _ in range(3):
        d = a.act(obs, info)
        assert d.parsed and d.action in env.valid_actions, d.reply
        if agent == "robust-cot":
            assert d.reply.rstrip().endswith("<|END|>")
        obs = env.step(d.action).observation


def test_history_counts_observations_even_after_blank_replies(gateway):
    env = FakeCounterEnv()
    agent = make_agent("naive", gateway, system_prompt("f"), history=2)
    agent.reset(env, "m")
    seen: list[list[dict]] = []
    with ScriptedLLM.install(lambda m: (seen.append(m), "   ")[1]):
        for k in range(4):
            agent.act(f"obs {k}", {})
    assert [m["content"] for m in seen[-1][1:]] == ["Observation:\nobs 2", "Current Observation:\nobs 3\n\nf"]


def test_prompt_inits_list_the_shipped_initializations():
    from promptevo.agents.registry import AgentError, default_prompt_path, prompt_inits

    assert {"plain", "guided", "compact"} <= set(prompt_inits("babyai"))
    assert "compact" not in prompt_inits("mapf")  # compact is BabyAI-only
    assert default_prompt_path("robust-cot", load_task("goto"), "compact").parent.name == "compact"
    with pytest.raises(AgentError, match="use one of"):
        default_prompt_path("robust-cot", load_task("goto"), "no/such")


def test_agent_options_come_from_the_registry():
    from promptevo.agents.registry import agent_options, needs_llm, options_for

    assert "history" in agent_options("robust-cot") and "history" not in agent_options("two-stage")
    assert agent_options("random") is None  # takes any keyword (and ignores it)
    assert options_for("two-stage", {"history": 1, "constrained": True}) == {"constrained": True}
    assert options_for("naive", {"history": 1}) == {"history": 1}
    assert not needs_llm("random") and needs_llm("two-stage")
