"""Evidence cards: one short structured summary per group of episodes with the same outcome.

Instead of showing the analyzer several raw trajectories, a generation's episodes are

1. grouped deterministically (:func:`group_episodes`) by outcome (``success``, ``failure: ran out of
   steps``, ``failure: episode ended without success``, ``aborted (LLM error)``), failures further split
   by a dominant behaviour tag computed from the trajectory (``looping``, ``invalid actions``), each group
   with its statistics and one representative episode;
2. summarised by ONE optimizer LLM call (gateway role ``"cards"``, template
   ``prompts/optimizer/cards.md``) that reads each group's statistics plus its representative trajectory
   and writes the card texts (what happened, where it failed, what helped, ``S<seed>.<step>`` refs).

The numbers on a card always come from the grouping, never from the LLM. :func:`build_cards` never raises
on a bad reply: unusable replies give cards whose texts are built from the statistics (``ok=False``).
:meth:`CardSet.render` is the compact text the analyzer reads (``analyze(..., evidence=...)``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.optim.reflect.llm_json import example_strings, fit_to_budget, load_template, render_template
from promptevo.optim.reflect.render import field_of, flat, render_episode, stats_line

SUCCESS = "success"
OUT_OF_STEPS = "failure: ran out of steps"
ENDED = "failure: episode ended without success"
ABORTED = "aborted (LLM error)"
OUTCOMES = (SUCCESS, OUT_OF_STEPS, ENDED, ABORTED)

LOOPING = "looping"
INVALID = "invalid actions"
TAGS = (None, LOOPING, INVALID)

#: A failed episode is tagged "invalid actions" when at least this share of its steps was invalid/unparsed.
INVALID_SHARE = 0.3
#: ... else "looping" when it has at least LOOP_MIN_STEPS steps and at least this share of them repeat an
#: earlier (observation, action) pair.
LOOP_SHARE = 0.5
LOOP_MIN_STEPS = 6
#: Longest card text field (characters), whoever wrote it.
MAX_FIELD_CHARS = 400
MAX_REFS = 6


# -- deterministic grouping ------------------------------------------------------------------------


def _traj(r: Any) -> list[dict]:
    return [st or {} for st in (field_of(r, "trajectory", []) or [])]


def _step_no(st: dict, i: int) -> int:
    n = st.get("t", st.get("step", i))
    try:
        return int(n)
    except (TypeError, ValueError):
        return i


def _seed(r: Any) -> int:
    try:
        return int(field_of(r, "seed", -1))
    except (TypeError, ValueError):
        return -1


def _ret(r: Any) -> float:
    return float(field_of(r, "return_", field_of(r, "return", 0.0)) or 0.0)


def _steps(r: Any) -> int:
    s = field_of(r, "steps")
    return int(s) if s is not None else len(_traj(r))


def _truncated(r: Any) -> bool:
    t = r.get("truncated") if isinstance(r, dict) else getattr(r, "truncated", None)
    if t is not None:
        return bool(t)
    traj = _traj(r)  # older records: ran out of steps when the last step did not end the episode
    return bool(traj) and not traj[-1].get("done", False)


def episode_outcome(r: Any) -> str:
    """One of :data:`OUTCOMES`."""
    if field_of(r, "error"):
        return ABORTED
    if field_of(r, "success"):
        return SUCCESS
    return OUT_OF_STEPS if _truncated(r) else ENDED


def _bad_step(st: dict) -> bool:
    return st.get("valid") is False or st.get("parsed") is False


def _invalid_steps(r: Any) -> int:
    traj = _traj(r)
    if traj:
        return sum(_bad_step(st) for st in traj)
    return int(field_of(r, "invalid_actions", 0) or 0)


def _sig(st: dict) -> tuple[str, str]:
    return (str(st.get("observation", st.get("obs", ""))), str(st.get("action", "")))


def behaviour_tag(r: Any) -> str | None:
    """``"invalid actions"``, ``"looping"`` or None for one episode (see the module constants)."""
    traj = _traj(r)
    n = len(traj) or _steps(r)
    if n and _invalid_steps(r) / n >= INVALID_SHARE:
        return INVALID
    if len(traj) >= LOOP_MIN_STEPS:
        repeats = len(traj) - len({_sig(st) for st in traj})
        if repeats / len(traj) >= LOOP_SHARE:
            return LOOPING
    return None


def group_key(outcome: str, tag: str | None) -> str:
    return outcome if tag is None else f"{outcome} ({tag})"


@dataclass
class EpisodeGroup:
    """Episodes sharing one outcome (and behaviour tag), with their statistics."""

    key: str
    outcome: str
    tag: str | None
    episodes: list[Any]
    seeds: list[int]
    n: int
    share: float
    mean_return: float
    mean_progression: float
    mean_steps: float
    invalid_rate: float
    top_actions: list[tuple[str, int]] = field(default_factory=list)
    representative: Any = None

    @property
    def rep_seed(self) -> int:
        return _seed(self.representative)

    def stats_text(self, total: int | None = None) -> str:
        """One line of the group's statistics (used in the cards prompt and in :meth:`CardSet.render`)."""
        return _stats_text(self.n, total, self.share, self.seeds, self.mean_return, self.mean_progression,
                           self.mean_steps, self.invalid_rate, self.top_actions)


def _stats_text(n: int, total: int | None, share: float, seeds: Sequence[int], mean_return: float,
                mean_progression: float, mean_steps: float, invalid_rate: float,
                top_actions: Sequence[Sequence[Any]]) -> str:
    of = f" of {total}" if total else ""
    acts = ", ".join(f"{a} x{c}" for a, c in top_actions) or "none"
    return (
        f"{n}{of} episodes ({share:.0%}), seeds {', '.join(str(s) for s in seeds)}; mean return "
        f"{mean_return:.3f}, mean progression {mean_progression:.2f}, mean steps {mean_steps:.1f}; "
        f"invalid-action rate {invalid_rate:.0%}; most common actions: {acts}"
    )


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _representative(outcome: str, eps: Sequence[Any]) -> Any:
    if outcome == SUCCESS:  # the best, shortest win shows what works
        return min(eps, key=lambda r: (-_ret(r), _steps(r), _seed(r)))
    return min(eps, key=lambda r: (_ret(r), _seed(r)))  # the worst failure


def group_episodes(results: Sequence[Any], *, top_k: int = 5) -> list[EpisodeGroup]:
    """Group ``results`` (EpisodeResult objects or dicts) by outcome and behaviour tag.

    Pure and deterministic: the same episodes in any order give the same groups, ordered by outcome
    (:data:`OUTCOMES`), then tag (none, looping, invalid actions).
    """
    results = list(results)
    total = len(results)
    buckets: dict[tuple[int, int], list[Any]] = {}
    for r in results:
        outcome = episode_outcome(r)
        tag = behaviour_tag(r) if outcome in (OUT_OF_STEPS, ENDED) else None
        buckets.setdefault((OUTCOMES.index(outcome), TAGS.index(tag)), []).append(r)
    groups: list[EpisodeGroup] = []
    for (oi, ti), eps in sorted(buckets.items()):
        eps = sorted(eps, key=lambda r: (_seed(r), _ret(r)))
        outcome, tag = OUTCOMES[oi], TAGS[ti]
        steps = [_steps(r) for r in eps]
        actions = Counter(str(st.get("action", "")) for r in eps for st in _traj(r) if st.get("action") is not None)
        top = sorted(actions.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
        n_steps = sum(steps)
        groups.append(
            EpisodeGroup(
                key=group_key(outcome, tag),
                outcome=outcome,
                tag=tag,
                episodes=eps,
                seeds=[_seed(r) for r in eps],
                n=len(eps),
                share=len(eps) / total,
                mean_return=_mean([_ret(r) for r in eps]),
                mean_progression=_mean([float(field_of(r, "progression", 0.0) or 0.0) for r in eps]),
                mean_steps=_mean([float(s) for s in steps]),
                invalid_rate=(sum(_invalid_steps(r) for r in eps) / n_steps) if n_steps else 0.0,
                top_actions=top,
                representative=_representative(outcome, eps),
            )
        )
    return groups


# -- cards -----------------------------------------------------------------------------------------


class EvidenceCard(BaseModel):
    """One group's card: measured numbers plus a short text (from the LLM, or from the statistics)."""

    model_config = ConfigDict(extra="ignore")
    group: str
    n: int
    seeds: list[int] = Field(default_factory=list)
    share: float = 0.0
    mean_return: float = 0.0
    mean_progression: float = 0.0
    mean_steps: float = 0.0
    invalid_rate: float = 0.0
    top_actions: list[tuple[str, int]] = Field(default_factory=list)
    what_happened: str = ""
    where_failed: str = ""
    what_helped: str = ""
    refs: list[str] = Field(default_factory=list)
    source: Literal["llm", "fallback"] = "fallback"


class CardSet(BaseModel):
    """The cards of one batch of episodes, with the LLM call's raw reply, usage and status."""

    ok: bool
    cards: list[EvidenceCard] = Field(default_factory=list)
    error: str | None = None
    raw: str = ""
    usage: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    n_episodes: int = 0
    prompt_fingerprint: str = ""

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CardSet":
        return cls.model_validate(d)

    def render(self) -> str:
        """Compact text of the cards for the analyzer prompt."""
        if not self.cards:
            return "(no episodes)"
        out: list[str] = []
        for i, c in enumerate(self.cards, 1):
            out.append(f"[G{i}] {c.group}")
            out.append("  " + _stats_text(c.n, self.n_episodes, c.share, c.seeds, c.mean_return, c.mean_progression,
                                          c.mean_steps, c.invalid_rate, c.top_actions))
            note = " (from statistics only)" if c.source == "fallback" else ""
            if c.what_happened:
                out.append(f"  what happened{note}: {c.what_happened}")
            if c.where_failed:
                out.append(f"  where it failed: {c.where_failed}")
            if c.what_helped:
                out.append(f"  what helped: {c.what_helped}")
            if c.refs:
                out.append(f"  refs: {', '.join(c.refs)}")
        return "\n".join(out)


def _card_for(group: EpisodeGroup, **text: Any) -> EvidenceCard:
    return EvidenceCard(
        group=group.key,
        n=group.n,
        seeds=list(group.seeds),
        share=round(group.share, 4),
        mean_return=round(group.mean_return, 4),
        mean_progression=round(group.mean_progression, 4),
        mean_steps=round(group.mean_steps, 2),
        invalid_rate=round(group.invalid_rate, 4),
        top_actions=list(group.top_actions),
        **text,
    )


def _ref(seed: int, st: dict, i: int) -> str:
    return f"S{seed}.{_step_no(st, i)}"


def fallback_card(group: EpisodeGroup) -> EvidenceCard:
    """A card whose texts are built from the statistics and the representative trajectory alone."""
    rep = group.representative
    seed = _seed(rep)
    traj = _traj(rep)
    refs: list[str] = []
    where = ""
    eps = "episode" if group.n == 1 else "episodes"
    verb = {
        SUCCESS: "succeeded",
        OUT_OF_STEPS: "ran out of steps",
        ENDED: "ended without success",
        ABORTED: "were aborted by an LLM error",
    }[group.outcome]
    happened = f"{group.n} {eps} {verb} (mean {group.mean_steps:.1f} steps, progression {group.mean_progression:.2f})"
    if group.top_actions:
        a, c = group.top_actions[0]
        happened += f"; the most common action was {a!r} ({c} times)"
    happened += "."
    if group.tag == LOOPING and traj:
        counts = Counter(_sig(st) for st in traj)
        sig, c = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        idx = [i for i, st in enumerate(traj) if _sig(st) == sig]
        refs = [_ref(seed, traj[i], i) for i in idx[:2]]
        where = f"repeated action {sig[1]!r} on the same observation {c} times (first at {refs[0]})."
    elif group.tag == INVALID and traj:
        idx = [i for i, st in enumerate(traj) if _bad_step(st)]
        refs = [_ref(seed, traj[i], i) for i in idx[:2]]
        where = f"{group.invalid_rate:.0%} of the actions were invalid or unparsed (first at {refs[0]})." if refs else ""
    elif group.outcome == ABORTED:
        if traj:
            refs = [_ref(seed, traj[-1], len(traj) - 1)]
        where = f"the LLM call failed: {flat(field_of(rep, 'error', ''), 160)}"
    elif group.outcome in (OUT_OF_STEPS, ENDED) and traj:
        refs = [_ref(seed, traj[-1], len(traj) - 1)]
        where = (f"still short of the goal at the last step {refs[0]}." if group.outcome == OUT_OF_STEPS
                 else f"the episode ended at {refs[0]} without success.")
    helped = ""
    if group.outcome == SUCCESS:
        if traj:
            refs = [_ref(seed, traj[-1], len(traj) - 1)]
        helped = f"reached the goal in {group.mean_steps:.1f} steps on average" + (f" (e.g. {refs[0]})." if refs else ".")
    return _card_for(group, what_happened=happened, where_failed=where, what_helped=helped, refs=refs,
                     source="fallback")


# -- the LLM call ----------------------------------------------------------------------------------


def _text(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, list):
        return "; ".join(str(x) for x in v)
    if isinstance(v, (int, float, dict)):
        return str(v)
    return v


class CardText(BaseModel):
    """One card as the LLM writes it (numbers are not taken from the reply)."""

    model_config = ConfigDict(extra="ignore")
    group: str = ""
    what_happened: str = ""
    where_failed: str = ""
    what_helped: str = ""
    refs: list[Any] = Field(default_factory=list)

    @field_validator("group", "what_happened", "where_failed", "what_helped", mode="before")
    @classmethod
    def _str(cls, v: Any) -> Any:
        return _text(v)

    @field_validator("refs", mode="before")
    @classmethod
    def _refs(cls, v: Any) -> Any:
        if v is None:
            return []
        return v if isinstance(v, list) else [v]


class CardsReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    cards: list[CardText]


_GID_RE = re.compile(r"^\s*(?:g|group)?\s*#?\s*(\d+)\b", re.IGNORECASE)
_REF_RE = re.compile(r"S\s*(-?\d+)\s*[.:]\s*(\d+)", re.IGNORECASE)


def _match_group(label: str, groups: Sequence[EpisodeGroup]) -> int | None:
    norm = " ".join(label.lower().split())
    for i, g in enumerate(groups):
        if norm == g.key.lower():
            return i
    m = _GID_RE.match(label)
    if m and 1 <= int(m.group(1)) <= len(groups):
        return int(m.group(1)) - 1
    return None


def _clean_refs(raw: Sequence[Any], group: EpisodeGroup) -> tuple[list[str], list[str]]:
    """(refs of steps that exist in this group's episodes as ``S<seed>.<step>``, dropped ref texts)."""
    known: dict[int, set[int] | None] = {}
    for r in group.episodes:
        traj = _traj(r)
        known[_seed(r)] = {_step_no(st, i) for i, st in enumerate(traj)} if traj else None
    out: list[str] = []
    dropped: list[str] = []
    for item in raw:
        if isinstance(item, dict):
            pairs = [(item.get("seed"), item.get("step"))]
        else:
            pairs = [(m.group(1), m.group(2)) for m in _REF_RE.finditer(str(item))]
            if not pairs:
                dropped.append(str(item))
        for s, t in pairs:
            try:
                s_i, t_i = int(s), int(t)
            except (TypeError, ValueError):
                dropped.append(str(item))
                continue
            steps = known.get(s_i, set())
            if s_i not in known or (steps is not None and t_i not in steps):
                dropped.append(f"S{s_i}.{t_i}")
                continue
            ref = f"S{s_i}.{t_i}"
            if ref not in out:
                out.append(ref)
    return out[:MAX_REFS], dropped


def _parser(groups: Sequence[EpisodeGroup]):
    def parse(obj: Any) -> dict[int, CardText]:
        reply = CardsReply.model_validate(obj)
        matched: dict[int, CardText] = {}
        for pos, c in enumerate(reply.cards):
            idx = _match_group(c.group, groups) if c.group.strip() else (pos if pos < len(groups) else None)
            if idx is not None and idx not in matched:
                matched[idx] = c
        if not matched:
            ids = ", ".join(f"G{i}" for i in range(1, len(groups) + 1))
            raise ValueError(f"no card names one of the groups ({ids}) in its 'group' field")
        return matched

    return parse


def build_cards_messages(
    results: Sequence[Any],
    *,
    env_instructions: str = "",
    max_steps_shown: int = 12,
    obs_chars: int = 120,
    template_path: str | Path | None = None,
    groups: Sequence[EpisodeGroup] | None = None,
) -> tuple[list[dict], list[EpisodeGroup]]:
    """(messages of the cards call, the groups they describe)."""
    groups = list(groups) if groups is not None else group_episodes(results)
    system_t, user_t = load_template("cards", template_path)
    blocks = []
    for i, g in enumerate(groups, 1):
        rep = render_episode(g.representative, max_steps_shown=max_steps_shown, obs_chars=obs_chars)
        blocks.append(
            f"## G{i}: {g.key}\n{g.stats_text(len(results))}\nRepresentative episode (seed {g.rep_seed}):\n{rep}"
        )
    values = {
        "env_instructions": env_instructions.strip() or "(not given)",
        "stats": stats_line(results),
        "n_groups": len(groups),
        "groups": "\n\n".join(blocks),
    }
    msgs = [
        {"role": "system", "content": render_template(system_t, **values)},
        {"role": "user", "content": render_template(user_t, **values)},
    ]
    return msgs, groups


def _clip(s: str) -> str:
    return flat(s, MAX_FIELD_CHARS)


def build_cards(
    prompts: Any,
    results: Sequence[Any],
    gateway: Any,
    *,
    env_instructions: str = "",
    max_steps_shown: int = 12,
    temperature: float | None = None,
    max_tokens: int | None = 1024,
    seed: int | None = None,
    constrained: bool | None = None,
    obs_chars: int = 120,
    template_path: str | Path | None = None,
) -> CardSet:
    """One evidence card per outcome group of ``results``, from ONE optimizer LLM call (role ``"cards"``).

    ``prompts`` (the PromptSet the episodes were played with) is only recorded by its fingerprint: the
    cards describe behaviour; the analyzer attributes it to segments. Never raises on a bad reply (the
    cards then carry texts built from the statistics, ``ok=False``); LLM configuration errors (missing
    key, unknown model) are re-raised, as in :meth:`promptevo.optim.optimizer_lm.OptimizerLM.json`.
    """
    results = list(results)
    fingerprint = prompts.fingerprint() if hasattr(prompts, "fingerprint") else ""
    if not results:
        return CardSet(ok=False, error="no episodes to summarise", prompt_fingerprint=fingerprint)
    lm = OptimizerLM.of(gateway)
    groups = group_episodes(results)
    # the representatives are shortened until the prompt fits the model's window
    msgs, groups = fit_to_budget(
        lambda k, oc: build_cards_messages(results, env_instructions=env_instructions, max_steps_shown=k,
                                           obs_chars=oc, template_path=template_path, groups=groups),
        [(max_steps_shown, obs_chars), (max(4, max_steps_shown // 2), min(obs_chars, 80)), (4, 60)],
        lm.prompt_budget("cards", max_tokens), lm.count_tokens)
    parsed, raw, err, usage = lm.json(
        msgs,
        role="cards",
        parse=_parser(groups),
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
        schema=CardsReply, constrained=constrained,
        forbid=example_strings(msgs[0]["content"]),
    )
    warnings: list[str] = []
    cards: list[EvidenceCard] = []
    for i, g in enumerate(groups):
        c = (parsed or {}).get(i)
        if c is None or not (c.what_happened.strip() or c.where_failed.strip() or c.what_helped.strip()):
            if parsed is not None:
                warnings.append(f"no usable card for G{i + 1} ({g.key}): texts built from statistics")
            cards.append(fallback_card(g))
            continue
        refs, dropped = _clean_refs(c.refs, g)
        if dropped:
            warnings.append(f"G{i + 1}: dropped refs not in this group's episodes: {', '.join(dropped[:5])}")
        cards.append(
            _card_for(g, what_happened=_clip(c.what_happened), where_failed=_clip(c.where_failed),
                      what_helped=_clip(c.what_helped), refs=refs, source="llm")
        )
    return CardSet(
        ok=parsed is not None,
        cards=cards,
        error=err if parsed is None else None,
        raw=raw,
        usage=usage,
        warnings=warnings,
        seeds=sorted({_seed(r) for r in results}),
        n_episodes=len(results),
        prompt_fingerprint=fingerprint,
    )
