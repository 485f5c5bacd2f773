"""LLM agents that play a :class:`~promptevo.envs.base.TextEnv`.

Agents (registry :data:`AGENTS`, built with :func:`make_agent`):

``naive``
    BALROG-style single call per step. Message layout: the instruction message first, then the last
    ``history`` observations (the newest labelled as current) interleaved with the agent's earlier
    actions, then the per-turn ``format`` text appended to the newest observation. The model must
    reply with the action only.
``robust-cot``
    Same layout; the ``format`` text asks the model to reason first and finish with
    ``<|ACTION|>action<|END|>``. The FIRST such block is parsed (DOTALL, stripped). No block or no
    valid action -> :data:`FALLBACK_ACTION`, which every env treats as invalid (its default action
    runs). The reasoning is not kept in the history; only the extracted action is.
``random``
    Uniform random valid action (seeded per episode); the floor every prompt must beat.
``two-stage``
    Split perception/action (RAPOA's SPA idea): a *descriptor* call turns mission + observation +
    recent actions into a focused description; an *actor* call turns mission + recent actions +
    description into ``<|ACTION|>action<|END|>``. Two LLM calls per step.

How a prompt module becomes messages (:func:`render_module`):

* All segments except ``format`` are joined (``Prompt.render``) into the instruction text. For the
  single-call agents it is sent as the FIRST message with role ``user`` (as BALROG does; the
  ``instruction_role`` option switches to ``system``); for the two-stage agent each module is the
  ``system`` message of its call.
* The ``format`` segment of the single-call agents (``system`` module) is the per-turn instruction that
  is appended (after a blank line) to the newest observation message, mirroring BALROG's layout. In
  the two-stage prompts the format segment is called ``output_format`` and stays in the system text.
* Placeholders, replaced literally wherever they appear: ``{mission}`` (goal text of the episode),
  ``{actions}`` (the valid actions, comma separated), ``{instructions}`` (``env.instructions()``:
  the environment's own rules and action list). Nothing is appended implicitly: a prompt without
  ``{instructions}`` does not get the env text.

Action parsing is tolerant but honest (:func:`match_action`): the candidate is stripped, lowercased,
surrounding quotes/backticks/asterisks and trailing punctuation removed and whitespace collapsed; it
counts as parsed only if it then equals a valid action. Anything else becomes
:data:`FALLBACK_ACTION` with ``parsed=False``.

Constrained decoding: for ``local/...`` models (or ``constrained=True``) the agents pass a GBNF
``grammar`` to the gateway that forces the reply to end with ``<|ACTION|>`` + one valid action +
``<|END|>`` (naive: the reply is exactly one valid action). The reasoning before the action is limited
to ``think_chars`` characters (default: 2 per token of ``max_tokens``, minus 40 tokens for the action)
so that a long-winded small model cannot be cut off before it answers. Remote providers ignore it.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from promptevo.envs.base import TextEnv
from promptevo.segments import Prompt, PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.llm import Completion, Gateway
    from promptevo.tasks import TaskConfig

#: Sent to the env when no valid action could be read from the reply; no env accepts it, so the env's
#: default action runs (and, for BabyAI, the next observation carries the invalid-action feedback).
FALLBACK_ACTION = "No valid action could be read from the reply."

ACTION_RE = re.compile(r"<\|ACTION\|>(.*?)<\|END\|>", re.DOTALL)
FORMAT_SEGMENT = "format"
PLACEHOLDERS = ("{mission}", "{actions}", "{instructions}")

AGENTS: dict[str, str] = {
    "naive": "one call per step; the model answers with the action only (BALROG NaiveAgent protocol)",
    "robust-cot": "one call per step; reason, then <|ACTION|>a<|END|> (BALROG RobustCoTAgent protocol)",
    "random": "uniform random valid action (seeded); the floor",
    "two-stage": "descriptor call (focused scene description) + actor call (action); RAPOA-style",
}


class AgentError(ValueError):
    """Unknown agent name or unusable agent options; ``str(e)`` is one line."""


# -- decisions -------------------------------------------------------------------------------------
@dataclass
class Decision:
    action: str  # the action string passed to env.step (may be invalid)
    reply: str  # raw final LLM reply (actor)
    calls: list[dict] = field(default_factory=list)  # one dict per LLM call, see _call_record
    parsed: bool = True  # False when the reply had no parsable action (fallback used)
    description: str | None = None  # two-stage agent: the descriptor's output


# -- parsing ---------------------------------------------------------------------------------------
_TRAIL = ".!,;:?"
_WRAP = "\"'`*_ "


def normalize_action(text: str) -> str:
    """Lowercase, collapse whitespace, drop wrapping quotes/markup and trailing punctuation."""
    t = " ".join(text.strip().lower().split())
    prev = None
    while prev != t:
        prev = t
        t = t.strip(_WRAP).rstrip(_TRAIL).strip()
    return t


def match_action(candidate: str, valid_actions: list[str]) -> str | None:
    """The valid action ``candidate`` denotes after :func:`normalize_action`, or ``None``."""
    table = {normalize_action(a): a for a in valid_actions}
    return table.get(normalize_action(candidate))


def _gbnf_literal(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ActionSpace:
    """What counts as an action in ``env``: matching, sampling and the GBNF rule.

    For most envs the actions are exactly ``env.valid_actions``. MAPF with several agents is the
    exception: ``valid_actions`` lists per-agent moves (``agent 2: up``) and an action is a joint one
    (``agent 1: up, agent 2: stay``); it is read with the env's own tolerant parser and written back in
    its canonical form.
    """

    def __init__(self, env: TextEnv):
        self.env = env
        self.valid = list(env.valid_actions)
        self.n_agents = int(getattr(env, "n_agents", 1)) if env.family == "mapf" else 1

    @property
    def joint(self) -> bool:
        return self.n_agents > 1

    def match(self, candidate: str) -> str | None:
        if not self.joint:
            return match_action(candidate, self.valid)
        from promptevo.envs.mapf import format_joint_action, parse_joint_action

        p = parse_joint_action(candidate, self.n_agents)
        return format_joint_action(p.moves) if p.moves is not None else None

    def describe(self) -> str:
        """Text for the ``{actions}`` placeholder."""
        if not self.joint:
            return ", ".join(self.valid)
        from promptevo.envs.mapf import MOVES, format_joint_action

        example = format_joint_action(["up"] + ["stay"] * (self.n_agents - 1))
        return f"one of {', '.join(MOVES)} for each of the {self.n_agents} agents, e.g. '{example}'"

    def sample(self, rng: random.Random) -> str:
        if not self.joint:
            return rng.choice(self.valid)
        from promptevo.envs.mapf import MOVES, format_joint_action

        return format_joint_action([rng.choice(MOVES) for _ in range(self.n_agents)])

    def gbnf_rules(self) -> str:
        """GBNF rules defining ``action`` (one valid action, canonical form)."""
        if not self.joint:
            return "action ::= " + " | ".join(_gbnf_literal(a) for a in self.valid) + "\n"
        from promptevo.envs.mapf import MOVES

        parts = ' ", " '.join(f'"agent {i}: " move' for i in range(1, self.n_agents + 1))
        return f"action ::= {parts}\nmove ::= " + " | ".join(_gbnf_literal(m) for m in MOVES) + "\n"


ACTION_OPEN, ACTION_CLOSE = "<|ACTION|>", "<|END|>"


def first_action_block(reply: str) -> str | None:
    """Text of the first ``<|ACTION|>...<|END|>`` block (same result as ``ACTION_RE.search``), found in
    linear time: the regex is quadratic on a degenerate reply that repeats ``<|ACTION|>`` without
    ``<|END|>`` (10k repeats took ~10 s)."""
    start = reply.find(ACTION_OPEN)
    if start < 0:
        return None
    end = reply.find(ACTION_CLOSE, start + len(ACTION_OPEN))
    return None if end < 0 else reply[start + len(ACTION_OPEN) : end]


def parse_tagged_action(reply: str, space: ActionSpace) -> tuple[str, bool]:
    """First ``<|ACTION|>...<|END|>`` block of ``reply`` -> (action, parsed); fallback if none/invalid."""
    block = first_action_block(reply if isinstance(reply, str) else "")
    if block is not None:
        action = space.match(block.strip())
        if action is not None:
            return action, True
    return FALLBACK_ACTION, False


def parse_plain_action(reply: str, space: ActionSpace) -> tuple[str, bool]:
    """The whole reply must be one valid action (tolerant normalisation) -> (action, parsed)."""
    action = space.match(reply or "")
    return (action, True) if action is not None else (FALLBACK_ACTION, False)


# -- grammars (GBNF, llama.cpp) --------------------------------------------------------------------
def tagged_action_grammar(space: ActionSpace, think_chars: int | None = None) -> str:
    """Reasoning (no ``<``, at most ``think_chars`` characters; unbounded if None), then
    ``<|ACTION|>`` one valid action ``<|END|>``. The bound makes sure the action fits in max_tokens."""
    think = "[^<]*" if think_chars is None else f"[^<]{{0,{max(0, int(think_chars))}}}"
    return f'root ::= think "<|ACTION|>" action "<|END|>"\nthink ::= {think}\n' + space.gbnf_rules()


def default_think_chars(max_tokens: int | None) -> int | None:
    """Reasoning budget for the grammar: 2 characters per token of ``max_tokens`` minus 40 tokens kept
    for the action block (2 chars/token is a cautious lower bound, so the reply is not cut off)."""
    if not max_tokens:
        return None
    return max(0, (int(max_tokens) - 40) * 2)


def plain_action_grammar(space: ActionSpace) -> str:
    """Exactly one valid action."""
    return "root ::= action\n" + space.gbnf_rules()


# -- prompt rendering ------------------------------------------------------------------------------
def fill_placeholders(text: str, *, mission: str, env: TextEnv) -> str:
    if "{mission}" in text:
        text = text.replace("{mission}", mission)
    if "{actions}" in text:
        text = text.replace("{actions}", ActionSpace(env).describe())
    if "{instructions}" in text:
        text = text.replace("{instructions}", env.instructions().strip())
    return text


def render_module(prompt: Prompt, *, mission: str, env: TextEnv, split_format: bool) -> tuple[str, str]:
    """(instruction text, per-turn format text); the latter is '' unless ``split_format``."""
    if split_format:
        body = prompt.render(skip={FORMAT_SEGMENT})
        fmt = prompt.get(FORMAT_SEGMENT) or ""
    else:
        body, fmt = prompt.render(), ""
    return (fill_placeholders(body, mission=mission, env=env), fill_placeholders(fmt, mission=mission, env=env))


# -- base class ------------------------------------------------------------------------------------
def _wants_constraint(gateway: Any, constrained: bool | None) -> bool:
    if constrained is not None:
        return constrained
    model = getattr(getattr(gateway, "config", None), "model", "") or ""
    return str(model).startswith("local/")


def _call_record(module: str, messages: list[dict], c: "Completion", error: str | None = None) -> dict:
    rec = {
        "module": module,
        "messages": messages,
        "reply": c.text,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "cost": c.cost,
        "latency_s": c.latency_s,
        "cached": c.cached,
        "truncated": bool(getattr(c, "truncated", False)),
    }
    if error:
        rec["error"] = error
    return rec


class Agent(ABC):
    name: str = ""
    prompts: PromptSet

    def __init__(
        self,
        gateway: "Gateway | None",
        prompts: PromptSet,
        *,
        constrained: bool | None = None,
        think_chars: int | None = None,
    ):
        self.gateway = gateway
        self.prompts = prompts
        self.constrained = _wants_constraint(gateway, constrained)
        if think_chars is None:
            think_chars = default_think_chars(getattr(getattr(gateway, "config", None), "max_tokens", None))
        self.think_chars = think_chars
        self.env: TextEnv | None = None
        self.mission = ""
        self._space: ActionSpace | None = None

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        """Start a new episode (``seed`` is the episode seed; only the random agent uses it)."""
        self.env = env
        self.mission = mission
        self._space = ActionSpace(env)

    @abstractmethod
    def act(self, observation: str, info: dict) -> Decision: ...

    def _complete(self, module: str, messages: list[dict], grammar: str | None) -> tuple["Completion", dict]:
        assert self.gateway is not None, f"agent {self.name} needs a gateway"
        kw: dict[str, Any] = {"role": module if module != "system" else "agent"}
        if grammar is not None and self.constrained:
            kw["grammar"] = grammar
        from promptevo.llm import Completion, LLMReplyError

        try:
            c = self.gateway.complete(messages, **kw)
        except LLMReplyError as e:
            # An empty reply (after the gateway's retries) is an invalid action, as in BALROG, not an
            # aborted episode; the call record keeps the error.
            model = getattr(getattr(self.gateway, "config", None), "model", "")
            c = Completion(text="", prompt_tokens=0, completion_tokens=0, cost=0.0, latency_s=0.0,
                           cached=False, model=str(model))
            return c, _call_record(module, messages, c, error=f"{type(e).__name__}: {e}")
        return c, _call_record(module, messages, c)

    @property
    def space(self) -> ActionSpace:
        assert self._space is not None, "call reset() first"
        return self._space


class _HistoryAgent(Agent):
    """Shared BALROG-style history layout for the naive and robust-cot agents."""

    def __init__(
        self,
        gateway: "Gateway",
        prompts: PromptSet,
        *,
        history: int = 16,
        instruction_role: Literal["user", "system"] = "user",
        constrained: bool | None = None,
        think_chars: int | None = None,
    ):
        super().__init__(gateway, prompts, constrained=constrained, think_chars=think_chars)
        if history < 1:
            raise AgentError(f"history must be >= 1 (got {history})")
        if instruction_role not in ("user", "system"):
            raise AgentError(f"instruction_role must be 'user' or 'system' (got {instruction_role!r})")
        prompts.module("system")  # fail early if the module is missing
        self.history = history
        self.instruction_role = instruction_role
        # events: ("obs", text) | ("act", text); history observations + history actions
        self._events: deque[tuple[str, str]] = deque(maxlen=2 * history)
        self._last_action: str | None = None
        self._instructions = ""
        self._format = ""

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        super().reset(env, mission, seed)
        self._events.clear()
        self._last_action = None
        self._instructions, self._format = render_module(
            self.prompts.module("system"), mission=mission, env=env, split_format=True
        )

    def build_messages(self, observation: str) -> list[dict]:
        """Record the previous action and ``observation``, then lay out the messages for this step."""
        if self._last_action:
            self._events.append(("act", self._last_action))
        self._events.append(("obs", observation))
        # keep at most `history` observations (blank replies leave no action between two of them)
        kept: list[tuple[str, str]] = []
        n_obs = 0
        for kind, text in reversed(self._events):
            if kind == "obs":
                if n_obs == self.history:
                    break
                n_obs += 1
            kept.append((kind, text))
        kept.reverse()
        msgs: list[dict] = [{"role": self.instruction_role, "content": self._instructions}]
        for i, (kind, text) in enumerate(kept):
            if kind == "act":
                msgs.append({"role": "assistant", "content": text})
            else:
                label = "Current Observation:\n" if i == len(kept) - 1 else "Observation:\n"
                msgs.append({"role": "user", "content": label + text})
        if self._format:
            msgs[-1] = {"role": "user", "content": msgs[-1]["content"] + "\n\n" + self._format}
        return msgs

    @abstractmethod
    def _parse(self, reply: str) -> tuple[str, bool]: ...

    @abstractmethod
    def _grammar(self) -> str: ...

    def act(self, observation: str, info: dict) -> Decision:
        messages = self.build_messages(observation)
        c, rec = self._complete("system", messages, self._grammar())
        action, parsed = self._parse(c.text)
        # BALROG keeps the parsed action string (not the executed default) and skips empty replies.
        self._last_action = action if c.text.strip() else None
        return Decision(action=action, reply=c.text, calls=[rec], parsed=parsed)


class NaiveAgent(_HistoryAgent):
    name = "naive"

    def _parse(self, reply: str) -> tuple[str, bool]:
        return parse_plain_action(reply, self.space)

    def _grammar(self) -> str:
        return plain_action_grammar(self.space)


class RobustCoTAgent(_HistoryAgent):
    name = "robust-cot"

    def _parse(self, reply: str) -> tuple[str, bool]:
        return parse_tagged_action(reply, self.space)

    def _grammar(self) -> str:
        return tagged_action_grammar(self.space, self.think_chars)


class RandomAgent(Agent):
    """Uniformly random valid actions; deterministic given (seed, episode seed)."""

    name = "random"

    def __init__(self, gateway: Any = None, prompts: PromptSet | None = None, *, seed: int = 0, **_: Any):
        super().__init__(gateway, prompts or PromptSet(), constrained=False)
        self.seed = seed
        self._rng = random.Random(seed)

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        super().reset(env, mission, seed)
        self._rng = random.Random(f"{self.seed}:{seed}")

    def act(self, observation: str, info: dict) -> Decision:
        action = self.space.sample(self._rng)
        return Decision(action=action, reply=action, calls=[], parsed=True)


class TwoStageAgent(Agent):
    """Descriptor (perception) call, then actor (decision) call; prompts ``descriptor`` and ``actor``.

    Descriptor user message: ``Mission``, ``Recent actions`` (oldest first, at most ``recent_actions``),
    then the raw observation. Actor user message: ``Mission``, ``Recent actions``, then the description.
    If the descriptor returns nothing, the raw observation is used as the description.
    """

    name = "two-stage"

    def __init__(
        self,
        gateway: "Gateway",
        prompts: PromptSet,
        *,
        recent_actions: int = 4,
        constrained: bool | None = None,
        think_chars: int | None = None,
    ):
        super().__init__(gateway, prompts, constrained=constrained, think_chars=think_chars)
        prompts.module("descriptor"), prompts.module("actor")  # fail early
        self.recent_actions = recent_actions
        self._recent: deque[str] = deque(maxlen=max(recent_actions, 1))
        self._sys_descriptor = ""
        self._sys_actor = ""

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        super().reset(env, mission, seed)
        self._recent.clear()
        self._sys_descriptor, _ = render_module(
            self.prompts.module("descriptor"), mission=mission, env=env, split_format=False
        )
        self._sys_actor, _ = render_module(self.prompts.module("actor"), mission=mission, env=env, split_format=False)

    def _recent_text(self) -> str:
        if self.recent_actions <= 0 or not self._recent:
            return "Recent actions: none yet"
        return "Recent actions (oldest first): " + ", ".join(self._recent)

    def act(self, observation: str, info: dict) -> Decision:
        head = f"Mission: {self.mission}\n{self._recent_text()}"
        d_msgs = [
            {"role": "system", "content": self._sys_descriptor},
            {"role": "user", "content": f"{head}\n\nObservation:\n{observation}"},
        ]
        d, d_rec = self._complete("descriptor", d_msgs, None)
        description = d.text.strip() or observation
        a_msgs = [
            {"role": "system", "content": self._sys_actor},
            {"role": "user", "content": f"{head}\n\nDescription:\n{description}"},
        ]
        a, a_rec = self._complete("actor", a_msgs, tagged_action_grammar(self.space, self.think_chars))
        action, parsed = parse_tagged_action(a.text, self.space)
        self._recent.append(action if parsed else "(invalid reply)")
        return Decision(action=action, reply=a.text, calls=[d_rec, a_rec], parsed=parsed, description=description)


# -- registry --------------------------------------------------------------------------------------
_CLASSES: dict[str, type[Agent]] = {
    "naive": NaiveAgent,
    "robust-cot": RobustCoTAgent,
    "random": RandomAgent,
    "two-stage": TwoStageAgent,
}


def check_agent_name(name: str) -> str:
    if name not in _CLASSES:
        raise AgentError(f"unknown agent {name!r}; valid agents: {', '.join(AGENTS)}")
    return name


def make_agent(name: str, gateway: "Gateway | None", prompts: PromptSet | None = None, **kw: Any) -> Agent:
    """Build an agent. ``prompts=None`` -> the plain defaults (needs ``task=`` in ``kw``) or empty for random.

    Keyword options: naive/robust-cot ``history`` (16), ``instruction_role`` ("user"),
    ``constrained`` (None = auto: on for local/ models); two-stage ``recent_actions`` (4),
    ``constrained``; random ``seed`` (0). Unknown options raise :class:`AgentError`.
    """
    cls = _CLASSES[check_agent_name(name)]
    task = kw.pop("task", None)
    init = kw.pop("init", "plain")
    if prompts is None:
        if name == "random":
            prompts = PromptSet()
        elif task is None:
            raise AgentError(f"agent {name!r} needs prompts (or task= to load the default prompts)")
        else:
            prompts = default_prompts(name, task, init)
    if name != "random" and gateway is None:
        raise AgentError(f"agent {name!r} needs an LLM gateway")
    try:
        return cls(gateway, prompts, **kw)
    except TypeError as e:
        raise AgentError(f"bad option for agent {name!r}: {e}") from None


def prompts_dir() -> Path:
    import os

    env = os.environ.get("PROMPTEVO_PROMPTS_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "prompts"


def default_prompt_path(agent_name: str, task: "TaskConfig", init: str = "plain") -> Path | None:
    """``prompts/<family>/<init>/<agent>.md`` if present, else ``prompts/baselines/<agent>.md``.

    Only two-stage has per-family files for both inits; the baselines are env-agnostic (the env's
    rules come in through ``{instructions}``). ``None`` for the random agent.
    """
    check_agent_name(agent_name)
    if init not in ("plain", "guided"):
        raise AgentError(f"unknown prompt init {init!r} (use plain or guided)")
    if agent_name == "random":
        return None
    root = prompts_dir()
    candidates = [root / task.family / init / f"{agent_name}.md"]
    if init == "plain":
        candidates.append(root / "baselines" / f"{agent_name}.md")
    for p in candidates:
        if p.is_file():
            return p
    raise AgentError(
        f"no {init} prompts for agent {agent_name!r} on {task.family} tasks (looked for "
        + ", ".join(str(p) for p in candidates)
        + ")"
    )


def default_prompts(agent_name: str, task: "TaskConfig", init: str = "plain") -> PromptSet:
    path = default_prompt_path(agent_name, task, init)
    return PromptSet() if path is None else PromptSet.load(path)


def agent_factory(name: str, gateway: "Gateway | None", prompts: PromptSet | None = None, **kw: Any):
    """A zero-argument callable building a fresh agent per episode (what rollout.run_episodes wants).

    Validates the name and options once, up front, so errors surface before any episode starts.
    """
    make_agent(name, gateway, prompts, **dict(kw))  # fail early on bad names/options/prompts

    def build() -> Agent:
        return make_agent(name, gateway, prompts, **dict(kw))

    return build
