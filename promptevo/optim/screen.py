"""A cheap screen before racing: replay recorded decision states with a child's prompts.

Racing a child costs whole episodes (tens of LLM calls each). Many children of a small optimizer change
nothing the agent does: the same answer in every state. The screen asks the agent, with the child's
prompts and with the parent's, for one decision in each of a few recorded states of the parent's
evidence episodes whose expert action is known (:mod:`promptevo.optim.reflect.expert`), one LLM call per
state and prompt, no episode. A child *fixes* a state where it chooses the expert's action and the parent
did not, and *breaks* one where the parent chose the expert's action and it does not. Children that fix
no state (most often: they change no answer at all) or break clearly more than they fix
(:data:`BREAK_TOLERANCE`) are not raced (with ``mode="audit"`` every child races and the screen
only records its verdict, to measure how well it agrees with the race).

States are replayed without the agent's earlier messages (a history of one observation replays exactly;
longer histories and the two-stage agent's recent actions are dropped for both prompts alike). With the
response cache on, the parent's replies in states it already answered cost nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from promptevo.optim.reflect.expert import LabelledState, unique
from promptevo.segments import PromptSet

#: a child that fixes at least one state goes on to the race unless it breaks more than this many states
#: beyond those it fixes (a few replayed states are noisy: the race, not the screen, judges small margins)
BREAK_TOLERANCE = 1

#: ``decide(prompts, state) -> (action, parsed)``: one decision of the agent in a recorded state
Decide = Callable[[PromptSet, LabelledState], tuple[str, bool]]


def choose_states(states: Sequence[LabelledState], k: int) -> list[LabelledState]:
    """Up to ``k`` distinct states the agent played: about two thirds where it departed from the expert,
    taken round-robin over the (agent -> expert) clusters, the rest where it agreed (to catch breakage)."""
    mine = unique(s for s in states if s.agent is not None)
    groups: dict[tuple[str, str], list[LabelledState]] = defaultdict(list)
    agree = []
    for s in mine:
        if s.agent == s.expert:
            agree.append(s)
        else:
            groups[(str(s.agent), s.expert)].append(s)
    want_dis = min(sum(len(g) for g in groups.values()), max(k - len(agree), -(-2 * k // 3)))
    dis: list[LabelledState] = []
    queues = [list(g) for _, g in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    while len(dis) < want_dis and any(queues):
        for q in queues:
            if q and len(dis) < want_dis:
                dis.append(q.pop(0))
    return dis + agree[: k - len(dis)]


@dataclass
class ScreenResult:
    states: int = 0
    fixed: int = 0
    broken: int = 0
    child_agree: int = 0
    parent_agree: int = 0
    unparsed: int = 0
    changed: int = 0  # states where the child's action differs from the parent's
    keep: bool = True
    reason: str = ""
    wall_s: float = 0.0
    errors: int = 0
    details: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("states", "fixed", "broken", "child_agree", "parent_agree", "changed",
                                              "unparsed", "errors", "keep", "reason", "wall_s")} | {
            "details": self.details}


def screen(child: PromptSet, parent: PromptSet, states: Sequence[LabelledState], decide: Decide) -> ScreenResult:
    """The child's and the parent's decisions in ``states`` (see the module docstring). A state where a
    call fails for either prompt is left out (counted in ``errors``); no state left is no verdict: the
    child is kept."""
    t0 = time.perf_counter()
    res = ScreenResult()
    for s in states:
        try:
            pa, _ = decide(parent, s)
            ca, cparsed = decide(child, s)
        except Exception as e:  # noqa: BLE001 - an LLM failure loses this state, not the child
            res.errors += 1
            res.details.append({"cite": s.cite, "error": f"{type(e).__name__}: {str(e)[:120]}"})
            continue
        res.states += 1
        res.unparsed += not cparsed
        res.parent_agree += pa == s.expert
        res.child_agree += ca == s.expert
        res.fixed += ca == s.expert and pa != s.expert
        res.broken += pa == s.expert and ca != s.expert
        res.changed += ca != pa
        res.details.append({"cite": s.cite, "expert": s.expert, "parent": pa, "child": ca})
    res.wall_s = round(time.perf_counter() - t0, 2)
    if res.states == 0:
        res.reason = "no state could be replayed; kept without a verdict"
    elif res.fixed >= 1 and res.broken <= res.fixed + BREAK_TOLERANCE:
        res.reason = f"fixes {res.fixed} of {res.states} states, breaks {res.broken}"
    else:
        res.keep = False
        res.reason = (f"fixes {res.fixed} and breaks {res.broken} of {res.states} states (changed the answer in "
                      f"{res.changed})")
    return res


class Replayer(Protocol):
    """What the screen phase reads through a game's adapter: the recorded states of the parent's evidence
    with known expert actions, and one decision of the agent in such a state (a context manager: the envs
    it opens close on exit; ``cost`` counts decisions, calls and tokens)."""

    def screen_states(self, evidence: dict, k: int) -> list[LabelledState] | None: ...

    def replay(self) -> AbstractContextManager[tuple[Decide, dict]]: ...


def screen_phase(adapter: Any, mode: str, k: int, parent: PromptSet, evidence: dict, batch: Any) -> None:
    """The engine's phase between propose and race: each proposal of ``batch`` replayed on ``k`` recorded
    states against ``parent`` (:func:`screen`); its verdict goes with the proposal (``proposal.screen``:
    the engine drops the failing ones in ``filter`` mode), a row per child in ``batch.record["screen"]``
    and a log line per child that fails. Skipped with ``mode == "off"``, no proposals, or an adapter that
    cannot replay states (no :class:`Replayer` methods, or no expert for this game: ``screen_states`` is
    None)."""
    if mode == "off" or not batch.proposals or not all(hasattr(adapter, m) for m in ("screen_states", "replay")):
        return
    states = adapter.screen_states(evidence, k)
    if states is None:
        return
    if not states:
        batch.log.append("screen: no recorded states to replay; children go to the race unscreened")
        return
    rows = []
    with adapter.replay() as (decide, cost):
        for p in batch.proposals:
            res = screen(p.prompts, parent, states, decide)
            p.screen = res.to_dict()
            rows.append({"operator": p.operator, **{k: v for k, v in p.screen.items() if k != "details"}})
            if not res.keep:
                batch.log.append(f"screen: {p.operator} child {'dropped' if mode == 'filter' else 'would be dropped'}"
                                 f" ({res.reason})")
    batch.record["screen"] = {"mode": mode, "states": len(states), "children": rows, **cost}


__all__ = ["Decide", "Replayer", "ScreenResult", "choose_states", "screen", "screen_phase"]
