"""GEPA (through DSPy) as a baseline optimizer for promptevo's agents.

``dspy.GEPA`` optimizes the *instructions* of the predictors of a DSPy program. Here the program plays
whole episodes:

* one ``dspy.Predict`` per prompt module of the agent (``system`` for robust-cot/naive, ``descriptor``
  and ``actor`` for two-stage); its instruction is the module's *optimizable text*: every segment
  except the fixed ones (the ``format``/``output_format`` action protocol and segments that are only a
  placeholder such as ``{instructions}``), joined by blank lines, placeholders left literal;
* ``forward(seed)`` rebuilds the agent's :class:`~promptevo.segments.PromptSet` from the current
  instructions (:func:`compose_prompts`), plays one episode of the task with promptevo's own agent
  (:func:`promptevo.rollout.run_episode`) and records, per predictor, a trace entry whose inputs are the
  mission and a compressed trajectory (what that module saw) and whose output is what it produced;
* the metric is the environment outcome (success 1/0 by default, or BALROG progression / return) with
  feedback text summarising the episode (mission, outcome, invalid actions, parse failures, last
  steps), which GEPA's reflection step reads.

Every LLM call goes through promptevo's :class:`~promptevo.llm.Gateway`, so calls, tokens, cost and
the response cache work exactly as for promptevo's own optimizer: the agent's calls are made by the
agent itself on a gateway view that labels them ``gepa-<role>`` (``gepa-agent``, or ``gepa-descriptor``
and ``gepa-actor``), and DSPy's LM calls (GEPA's reflection, plus anything else DSPy asks of its
default LM) go through :class:`GatewayLM`, a ``dspy.BaseLM`` whose calls are ``gateway.complete`` with
role ``gepa-reflection`` (or ``gepa-agent``).

Budget: the binding limit is the number of LLM calls (``budget_calls``, reflection included). It is
enforced in the gateways GEPA's calls pass through (a shared :class:`~promptevo.llm.budget.CallBudget`
refuses the call that would exceed it), so GEPA cannot overshoot; a GEPA stop callback ends the run at
the next iteration. A refused agent call ends its episode as an error (scored 0, no call made); a refused
reflection call returns an empty reply. GEPA's own ``max_metric_calls`` (episodes) is derived from the
budget as an upper bound: every episode costs at least one call per step.

DSPy is optional (``pip install 'promptevo[gepa]'``); this module imports without it and
:func:`require_dspy` raises :class:`GepaUnavailable` with one line saying what to install.
"""

from __future__ import annotations

import importlib.util
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

from promptevo.agents.registry import calls_per_step
from promptevo.errors import PromptevoError
from promptevo.llm.errors import LLMBudgetError
from promptevo.llm.types import Completion
from promptevo.segments import Prompt, PromptSet, Segment

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.envs.base import TextEnv
    from promptevo.evaluation.rollout import EpisodeResult
    from promptevo.tasks import TaskConfig

DSPY_MISSING = "method gepa needs DSPy, which is not installed: install promptevo[gepa] (pip install 'promptevo[gepa]')"

#: Segments GEPA does not rewrite: the per-turn action protocol the parser depends on.
FIXED_SEGMENTS = frozenset({"format", "output_format"})
#: Segments whose whole text is one of these placeholders are fixed too (e.g. the env's own rules).
_PLACEHOLDER_ONLY = ("{mission}", "{actions}", "{instructions}")
#: Name of the segment that holds GEPA's instruction text in an optimized module.
INSTRUCTION_SEGMENT = "instruction"

Metric = Literal["success", "progression", "return"]


class GepaUnavailable(PromptevoError, RuntimeError):
    """DSPy (and so dspy.GEPA) is not installed; ``str(e)`` is one line."""


class GepaError(RuntimeError):
    """The GEPA baseline cannot run with these inputs; ``str(e)`` is one line."""


def dspy_available() -> bool:
    try:
        return importlib.util.find_spec("dspy") is not None
    except (ImportError, ValueError):  # e.g. sys.modules["dspy"] is None (import blocked)
        return False


def require_dspy() -> Any:
    """Import and return ``dspy`` (with GEPA), or raise :class:`GepaUnavailable`."""
    if not dspy_available():
        raise GepaUnavailable(DSPY_MISSING)
    try:
        import dspy
    except Exception as e:  # noqa: BLE001 - a broken install is as good as none
        raise GepaUnavailable(f"{DSPY_MISSING} (import failed: {' '.join(str(e).split())[:200]})") from None
    if not hasattr(dspy, "GEPA"):
        raise GepaUnavailable(f"{DSPY_MISSING} (this dspy has no dspy.GEPA; need dspy>=3.0)")
    return dspy


# -- prompt modules <-> GEPA instruction texts -------------------------------------------------------
def is_fixed(segment: Segment) -> bool:
    return segment.name in FIXED_SEGMENTS or segment.text.strip() in _PLACEHOLDER_ONLY


def optimizable_text(prompt: Prompt) -> str:
    """The text GEPA optimizes for one module: non-fixed segments joined by blank lines."""
    return "\n\n".join(s.text for s in prompt.segments if not is_fixed(s) and s.text.strip())


def with_instruction(prompt: Prompt, text: str) -> Prompt:
    """``prompt`` with its optimizable segments replaced by one ``instruction`` segment holding ``text``.

    The new segment takes the place of the first optimizable segment; fixed segments keep their order.
    If ``text`` equals the current optimizable text, ``prompt`` is returned unchanged.
    """
    if text.strip() == optimizable_text(prompt).strip():
        return prompt
    out: list[Segment] = []
    placed = False
    for s in prompt.segments:
        if is_fixed(s):
            out.append(s)
        elif not placed:
            out.append(Segment(INSTRUCTION_SEGMENT, text.strip()))
            placed = True
    if not placed:
        out.insert(0, Segment(INSTRUCTION_SEGMENT, text.strip()))
    # a fixed segment might already be called "instruction": keep names unique
    names = [s.name for s in out]
    if names.count(INSTRUCTION_SEGMENT) > 1:
        out = [s if not (s.name == INSTRUCTION_SEGMENT and is_fixed(s)) else Segment("instruction_fixed", s.text)
               for s in out]
    return Prompt(tuple(out))


def compose_prompts(base: PromptSet, texts: dict[str, str]) -> PromptSet:
    """``base`` with each module named in ``texts`` given that instruction text (others unchanged)."""
    ps = base
    for module, text in texts.items():
        ps = ps.replace_module(module, with_instruction(ps.module(module), text))
    return ps


def seed_texts(prompts: PromptSet) -> dict[str, str]:
    """GEPA's seed candidate: the optimizable text of every module that has some."""
    return {m: optimizable_text(p) for m, p in prompts.modules if optimizable_text(p).strip()}


# -- episode summaries for GEPA's reflection ------------------------------------------------------
def _clip(text: Any, n: int) -> str:
    t = " ".join(str(text or "").split())
    return t if len(t) <= n else t[: n - 3] + "..."


def _shown_steps(traj: list[dict], max_steps: int) -> list[tuple[int, dict] | None]:
    """Indexes of the steps to show: all, or the first 2 and the last ``max_steps - 2`` (None = gap)."""
    items = list(enumerate(traj))
    if len(items) <= max_steps:
        return list(items)
    head, tail = items[:2], items[-(max_steps - 2):]
    return [*head, None, *tail]


def trajectory_text(result: "EpisodeResult", module: str = "system", *, max_steps: int = 10,
                    chars: int = 240) -> str:
    """What ``module`` saw and did in the episode, compressed for a reflection prompt."""
    lines: list[str] = []
    for item in _shown_steps(result.trajectory, max(3, max_steps)):
        if item is None:
            lines.append("... (steps omitted) ...")
            continue
        t, st = item
        obs = _clip(st.get("observation"), chars)
        desc = _clip(st.get("description"), chars) if st.get("description") else ""
        flag = "" if st.get("valid", True) else " [INVALID: the environment rejected it]"
        if not st.get("parsed", True):
            flag += " [no parsable action in the reply]"
        if module == "descriptor":
            lines.append(f"Step {t}: observation: {obs}\n  description written: {desc or '(none)'}")
        elif module == "actor":
            lines.append(f"Step {t}: description: {desc or obs}\n  reply: {_clip(st.get('reply'), chars)}\n"
                         f"  action: {st.get('action')}{flag}")
        else:
            lines.append(f"Step {t}: observation: {obs}\n  reply: {_clip(st.get('reply'), chars)}\n"
                         f"  action: {st.get('action')}{flag}")
    return "\n".join(lines) if lines else "(no steps were played)"


def outputs_text(result: "EpisodeResult", module: str = "system") -> str:
    """The module's outputs over the episode (actions, or descriptions for the descriptor)."""
    if module == "descriptor":
        return " | ".join(_clip(st.get("description"), 120) for st in result.trajectory[-5:]) or "(none)"
    acts = [str(st.get("action")) + ("" if st.get("valid", True) else " (invalid)") for st in result.trajectory]
    return ", ".join(acts) if acts else "(none)"


def score_of(result: "EpisodeResult", metric: Metric) -> float:
    if result.error:
        return 0.0
    if metric == "success":
        return 1.0 if result.success else 0.0
    if metric == "progression":
        return float(result.progression)
    return float(result.return_)


def episode_feedback(result: "EpisodeResult", metric: Metric = "success", *, last: int = 5) -> str:
    """Feedback text for GEPA's reflection: mission, outcome, invalid actions and the last steps."""
    parts = [f"Mission: {result.mission}"]
    if result.error:
        parts.append(f"Outcome: the episode was aborted after {result.steps} steps by an LLM error ({_clip(result.error, 160)}).")
    elif result.success:
        parts.append(f"Outcome: SUCCESS in {result.steps} steps (return {result.return_:.3f}; fewer steps is better).")
    else:
        why = "hit the step limit" if result.truncated or result.steps > 0 else "ended"
        parts.append(f"Outcome: FAILURE: the mission was not completed; the episode {why} after {result.steps} "
                     f"steps (progression {result.progression:.2f}).")
    parts.append(f"Score ({metric}): {score_of(result, metric):.3f}.")
    if result.steps:
        parts.append(f"Invalid actions: {result.invalid_actions} of {result.steps} steps"
                     + (" (each wasted a turn)." if result.invalid_actions else "."))
        if result.parse_failures:
            parts.append(f"Replies without a parsable <|ACTION|>...<|END|> block holding a valid action: "
                         f"{result.parse_failures}.")
        acts = [str(st.get("action")) for st in result.trajectory]
        if len(acts) >= 6 and len(set(acts[-6:])) <= 2 and not result.success:
            parts.append(f"The agent ended in a loop: last actions {', '.join(acts[-6:])}.")
        tail = result.trajectory[-last:]
        shown = "; ".join(f"step {len(result.trajectory) - len(tail) + i}: {st.get('action')}"
                          + ("" if st.get("valid", True) else " (invalid)") for i, st in enumerate(tail))
        parts.append(f"Last steps: {shown}.")
        final_obs = _clip(result.trajectory[-1].get("observation"), 300)
        parts.append(f"Last observation before the final action: {final_obs}")
    return "\n".join(parts)


# -- gateway plumbing ------------------------------------------------------------------------------
class RoleGateway:
    """A view of a :class:`~promptevo.llm.Gateway` that files every call under ``<prefix>-<role>``.

    The agent only uses ``complete`` and ``config``; usage stays on the wrapped gateway.
    """

    def __init__(self, gateway: Any, prefix: str = "gepa"):
        self.inner = gateway
        self.prefix = prefix

    @property
    def config(self) -> Any:
        return self.inner.config

    @property
    def usage(self) -> Any:
        return self.inner.usage

    def _role(self, role: str) -> str:
        return f"{self.prefix}-{role}"

    def complete(self, messages: list[dict], *, role: str = "agent", **kw: Any) -> Any:
        return self.inner.complete(messages, role=self._role(role), **kw)

    async def acomplete(self, messages: list[dict], *, role: str = "agent", **kw: Any) -> Any:
        return await self.inner.acomplete(messages, role=self._role(role), **kw)


def _text_content(content: Any) -> str:
    """OpenAI-style content (a string or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                out.append(str(part.get("text") or ""))
            else:
                out.append(str(part))
        return "\n".join(x for x in out if x)
    return str(content)


def _plain_messages(prompt: str | None, messages: list[dict] | None) -> list[dict]:
    if messages:
        return [{"role": str(m.get("role") or "user"), "content": _text_content(m.get("content"))} for m in messages]
    return [{"role": "user", "content": str(prompt or "")}]


_LM_CLASS: type | None = None
_LM_LOCK = threading.Lock()


_EMPTY_COMPLETION = Completion(text="", prompt_tokens=0, completion_tokens=0, cost=0.0, latency_s=0.0, cached=False,
                               model="", finish_reason="budget")


def gateway_lm_class() -> type:
    """``GatewayLM``: a ``dspy.BaseLM`` whose calls are ``gateway.complete(messages, role=role)``.

    Built on first use so this module imports without DSPy. ``__call__``/``acall`` are overridden to
    return ``[reply text]`` (what DSPy's adapters expect); DSPy's own cache is not used, the gateway's
    is. ``forward`` returns an OpenAI-shaped response for code paths that call it directly.
    """
    global _LM_CLASS
    if _LM_CLASS is not None:
        return _LM_CLASS
    dspy = require_dspy()
    with _LM_LOCK:
        if _LM_CLASS is not None:
            return _LM_CLASS
        from types import SimpleNamespace

        class GatewayLM(dspy.BaseLM):  # type: ignore[misc, name-defined]
            def __init__(self, gateway: Any, role: str = "gepa-reflection"):
                cfg = gateway.config
                super().__init__(model=f"promptevo-gateway/{cfg.model}", temperature=cfg.temperature,
                                 max_tokens=cfg.max_tokens, cache=False, num_retries=0)
                self.gateway = gateway
                self.role = role

            def __deepcopy__(self, memo: dict) -> "GatewayLM":  # the gateway holds locks and a database
                return type(self)(self.gateway, self.role)

            def copy(self, **kwargs: Any) -> "GatewayLM":
                new = type(self)(self.gateway, kwargs.pop("role", self.role))
                new.kwargs.update(kwargs)
                return new

            def _call_kw(self, kwargs: dict) -> dict:
                kw: dict[str, Any] = {"role": self.role}
                if kwargs.get("temperature") is not None:
                    kw["temperature"] = kwargs["temperature"]
                if kwargs.get("max_tokens") is not None:
                    kw["max_tokens"] = kwargs["max_tokens"]
                if kwargs.get("stop"):
                    kw["stop"] = kwargs["stop"]
                return kw

            def _complete(self, prompt: str | None, messages: list[dict] | None, kwargs: dict) -> Any:
                try:
                    return self.gateway.complete(_plain_messages(prompt, messages), **self._call_kw(kwargs))
                except LLMBudgetError:  # the budget is spent: no call is made; GEPA stops at its next check
                    return _EMPTY_COMPLETION

            def __call__(self, prompt: str | None = None, *, messages: list[dict] | None = None,
                         **kwargs: Any) -> list[str]:
                return [self._complete(prompt, messages, kwargs).text]

            async def acall(self, prompt: str | None = None, *, messages: list[dict] | None = None,
                            **kwargs: Any) -> list[str]:
                try:
                    c = await self.gateway.acomplete(_plain_messages(prompt, messages), **self._call_kw(kwargs))
                except LLMBudgetError:
                    c = _EMPTY_COMPLETION
                return [c.text]

            def forward(self, prompt: str | None = None, messages: list[dict] | None = None, **kwargs: Any) -> Any:
                c = self._complete(prompt, messages, kwargs)
                msg = SimpleNamespace(content=c.text, role="assistant", tool_calls=None)
                usage = {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
                         "total_tokens": c.prompt_tokens + c.completion_tokens}
                return SimpleNamespace(choices=[SimpleNamespace(message=msg, finish_reason=c.finish_reason or "stop")],
                                       usage=usage, model=c.model, cache_hit=c.cached, _hidden_params={})

        GatewayLM.__module__ = __name__
        GatewayLM.__qualname__ = "GatewayLM"
        _LM_CLASS = GatewayLM
    return _LM_CLASS


# -- the baseline --------------------------------------------------------------------------------
@dataclass
class GepaConfig:
    budget_calls: int  # LLM calls (agent + reflection) GEPA may spend
    metric: Metric = "success"
    minibatch_size: int = 3  # GEPA's reflection minibatch
    concurrency: int = 4  # episodes in parallel (GEPA's num_threads)
    seed: int = 0
    use_merge: bool = True  # dspy.GEPA's default
    max_metric_calls: int | None = None  # episodes; default derived from budget_calls
    log_dir: str | None = None  # GEPA's run directory (its state files)
    agent_options: dict = field(default_factory=dict)  # extra make_agent options

    def __post_init__(self) -> None:
        if self.budget_calls < 1:
            raise GepaError(f"budget_calls must be >= 1 (got {self.budget_calls})")
        if self.metric not in ("success", "progression", "return"):
            raise GepaError(f"unknown metric {self.metric!r} (use success, progression or return)")


@dataclass
class GepaResult:
    best_prompts: PromptSet
    best_texts: dict[str, str]
    candidates: list[dict]  # {"index", "fingerprint", "val_score", "parents"}
    best_index: int
    stop_reason: str
    episodes: int  # episodes (GEPA metric calls) played
    max_metric_calls: int
    usage: dict  # {"agent": snapshot, "reflection": snapshot}
    wall_s: float

    def to_dict(self) -> dict:
        return {"best_prompts": self.best_prompts.to_dict(), "best_fingerprint": self.best_prompts.fingerprint(),
                "best_texts": self.best_texts, "candidates": self.candidates, "best_index": self.best_index,
                "stop_reason": self.stop_reason, "episodes": self.episodes,
                "max_metric_calls": self.max_metric_calls, "usage": self.usage, "wall_s": round(self.wall_s, 3)}


class _Shared:
    """Runtime context of the episode program; never deep-copied (GEPA copies programs per candidate)."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)
        self.lock = threading.Lock()
        self.episodes = 0

    def __deepcopy__(self, memo: dict) -> "_Shared":
        return self

    def __copy__(self) -> "_Shared":
        return self


def derived_max_metric_calls(budget_calls: int, agent_name: str) -> int:
    """Upper bound on episodes within ``budget_calls``: every step of every episode costs at least
    ``calls_per_step`` calls (the call-budget stopper is the binding limit)."""
    return max(1, budget_calls // calls_per_step(agent_name))


def _total_calls(*gateways: Any) -> int:
    seen: list[Any] = []
    n = 0
    for gw in gateways:
        u = getattr(gw, "usage", None)
        if u is None or any(u is s for s in seen):
            continue
        seen.append(u)
        n += int(u.total()["calls"])
    return n


def run_gepa(
    task: "TaskConfig",
    agent_name: str,
    initial_prompts: PromptSet,
    *,
    agent_gateway: Any,
    reflection_gateway: Any,
    train_seeds: Sequence[int],
    val_seeds: Sequence[int],
    config: GepaConfig,
    env_factory: Callable[["TaskConfig"], "TextEnv"] | None = None,
) -> GepaResult:
    """Optimize ``initial_prompts`` of ``agent_name`` on ``task`` with ``dspy.GEPA``.

    GEPA reflects on minibatches of ``train_seeds`` and tracks its Pareto front on ``val_seeds``.
    Returns the best candidate as a PromptSet (evaluate it on test seeds like any other).
    """
    dspy = require_dspy()
    from promptevo.agents.registry import make_agent, needs_llm
    from promptevo.evaluation.rollout import run_episode
    from promptevo.tasks import make_env

    if not needs_llm(agent_name):
        raise GepaError("the random agent has no prompts for GEPA to optimize")
    texts0 = seed_texts(initial_prompts)
    if not texts0:
        raise GepaError(f"agent {agent_name!r}: the prompts have no optimizable text (only fixed segments)")
    if not train_seeds or not val_seeds:
        raise GepaError("GEPA needs at least one training seed and one validation seed")
    for gw in (agent_gateway, reflection_gateway):
        if hasattr(gw, "check"):
            gw.check()  # a bad model name or missing key fails here, not inside GEPA's threads
    env_factory = env_factory or make_env
    agent_gw = RoleGateway(agent_gateway, "gepa")
    shared = _Shared(task=task, agent_name=agent_name, base=initial_prompts, gateway=agent_gw,
                     metric=config.metric, env_factory=env_factory, options=dict(config.agent_options))

    def play(seed: int, texts: dict[str, str]) -> "EpisodeResult":
        prompts = compose_prompts(shared.base, texts)

        def factory() -> Any:
            return make_agent(shared.agent_name, shared.gateway, prompts, **dict(shared.options))

        res = run_episode(shared.task, factory, int(seed), env_factory=shared.env_factory, keep_messages="none")
        with shared.lock:
            shared.episodes += 1
        return res

    class EpisodeProgram(dspy.Module):
        """Plays one episode of the task per call; one predictor per optimized prompt module."""

        def __init__(self) -> None:
            super().__init__()
            self.shared = shared
            self.module_names = list(texts0)
            for name, text in texts0.items():
                setattr(self, name, dspy.Predict(dspy.Signature("mission: str, trajectory: str -> outputs: str", text)))

        def forward(self, seed: int) -> Any:
            preds = {name: getattr(self, name) for name in self.module_names}
            texts = {name: p.signature.instructions for name, p in preds.items()}
            res = play(int(seed), texts)
            trace = dspy.settings.trace
            if trace is not None:  # what each module saw and did, for GEPA's reflective dataset
                for name, p in preds.items():
                    inputs = {"mission": res.mission, "trajectory": trajectory_text(res, name)}
                    trace.append((p, inputs, dspy.Prediction(outputs=outputs_text(res, name))))
            return dspy.Prediction(seed=int(seed), success=bool(res.success), progression=float(res.progression),
                                   return_=float(res.return_), steps=int(res.steps),
                                   score=score_of(res, shared.metric),
                                   feedback=episode_feedback(res, shared.metric), error=res.error)

    for name in texts0:
        if hasattr(dspy.Module, name):
            raise GepaError(f"prompt module name {name!r} clashes with a dspy.Module attribute")

    def metric(gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
               pred_trace: Any = None) -> Any:
        return dspy.Prediction(score=float(pred.score), feedback=str(pred.feedback))

    budget = int(config.budget_calls)
    stop_state = {"reason": ""}

    def call_budget_stopper(gepa_state: Any) -> bool:
        used = _total_calls(agent_gateway, reflection_gateway)
        if used >= budget:
            stop_state["reason"] = f"LLM-call budget reached ({used} >= {budget})"
            return True
        return False

    max_metric_calls = config.max_metric_calls or derived_max_metric_calls(budget, agent_name)
    reflection_lm = gateway_lm_class()(reflection_gateway, "gepa-reflection")
    default_lm = gateway_lm_class()(agent_gw.inner, "gepa-agent")
    optimizer = dspy.GEPA(
        metric=metric,
        max_metric_calls=max_metric_calls,
        reflection_lm=reflection_lm,
        reflection_minibatch_size=config.minibatch_size,
        use_merge=config.use_merge,
        num_threads=config.concurrency,
        track_stats=True,
        log_dir=config.log_dir,
        seed=config.seed,
        warn_on_score_mismatch=False,
        gepa_kwargs={"stop_callbacks": [call_budget_stopper]},
    )
    trainset = [dspy.Example(seed=int(s)).with_inputs("seed") for s in train_seeds]
    valset = [dspy.Example(seed=int(s)).with_inputs("seed") for s in val_seeds]
    if config.log_dir:
        Path(config.log_dir).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with dspy.context(lm=default_lm):
        optimized = optimizer.compile(EpisodeProgram(), trainset=trainset, valset=valset)
    wall = time.perf_counter() - t0

    def texts_of(program: Any) -> dict[str, str]:
        return {name: getattr(program, name).signature.instructions for name in texts0}

    best_texts = texts_of(optimized)
    best = compose_prompts(initial_prompts, best_texts)
    meta = {**dict(initial_prompts.meta), "optimizer": "gepa (dspy.GEPA)", "agent": agent_name}
    best = PromptSet(best.modules, tuple(meta.items()))
    cands: list[dict] = []
    best_index = 0
    details = getattr(optimized, "detailed_results", None)
    if details is not None:
        best_index = int(getattr(details, "best_idx", 0))
        scores = list(getattr(details, "val_aggregate_scores", []) or [])
        parents = list(getattr(details, "parents", []) or [])
        for i, prog in enumerate(getattr(details, "candidates", []) or []):
            ps = compose_prompts(initial_prompts, texts_of(prog))
            cands.append({"index": i, "fingerprint": ps.fingerprint(),
                          "val_score": float(scores[i]) if i < len(scores) else None,
                          "parents": parents[i] if i < len(parents) else None})
    reason = stop_state["reason"] or (
        f"GEPA stopped after {shared.episodes} episodes (max_metric_calls {max_metric_calls})")
    usage = {"agent": agent_gateway.usage.snapshot(), "reflection": reflection_gateway.usage.snapshot()} \
        if reflection_gateway is not agent_gateway else {"agent": agent_gateway.usage.snapshot()}
    return GepaResult(best_prompts=best, best_texts=best_texts, candidates=cands, best_index=best_index,
                      stop_reason=reason, episodes=shared.episodes, max_metric_calls=max_metric_calls,
                      usage=usage, wall_s=wall)


def estimate_episode_calls(task: "TaskConfig", agent_name: str) -> int:
    """Worst-case LLM calls of one episode (step limit x calls per step); for budget messages."""
    steps = task.max_steps or 128
    return int(math.ceil(steps * calls_per_step(agent_name)))
