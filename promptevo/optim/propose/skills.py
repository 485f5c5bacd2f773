"""Skill library: prompt segments that earned a promotion, kept for reuse on other tasks.

An idea from EvoTrainer: an edit that survived the validation gate is a small piece of know-how (a
"skill") worth remembering beyond the run that found it. The library stores each such edit's text
with where it was learned (task, family, run) and what it was measured to be worth (validation mean
paired difference when it was promoted, over how many seeds, and its training-seed gain). Later runs
on *other* tasks can :meth:`SkillLibrary.select` a few skills, show them to the mutator
(:func:`render`) or try them directly as a child (:func:`skill_edit`), and every such trial is
written back with :meth:`SkillLibrary.record_use`, so a skill that keeps failing somewhere stops being
offered there (backtesting on the library's own history).

The file is human-readable JSON::

    {"version": 1, "skills": [{"id": "...", "module": "actor", "segment": "strategy", "text": "...",
                               "task": "goto", "family": "babyai", "run": "...", "gain": 0.25, "n": 8,
                               "train_gain": 0.5, "created": "2025-...Z", "uses": [...]}]}

and is written atomically (temporary file + ``os.replace``). Apart from ``created`` timestamps,
everything here is deterministic.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from promptevo.optim.evidence import Evidence
from promptevo.errors import PromptevoError
from promptevo.fileio import write_json_atomic
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.answer_format import format_rewrite
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.reflect.llm_json import PROTECTED_SEGMENTS
from promptevo.optim.state import ACCEPTED_STATUSES
from promptevo.segments import Edit, PromptSet, apply_edit, check_name, sanitize_text

LIBRARY_VERSION = 1

#: Outcomes of a later trial that count as the skill having helped.
SUCCESS_OUTCOMES = frozenset({"promoted", "accepted and promoted", "helped", "success"})
#: Outcomes of a later trial in which the skill's child was accepted on training seeds.
ACCEPTED_OUTCOMES = ACCEPTED_STATUSES | {"accepted and promoted"}
#: Outcomes that say nothing about the skill's worth (still pending, or the trial broke).
NEUTRAL_OUTCOMES = frozenset({"accepted", "pending", "error", "skipped", "new", "evaluated"})


class SkillLibraryError(PromptevoError, ValueError):
    """The skill library file cannot be used; ``str(e)`` is one line meant for the user."""


def skill_id(module: str, segment: str, text: str) -> str:
    """Stable 12-hex-digit id of a skill: sha256 of module, segment and the sanitized text."""
    blob = "\x00".join([module, segment, sanitize_text(text)])
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def family_of(task: str) -> str:
    """Task family of a task name: ``"mapf"`` for MAPF-FrozenLake tasks, else ``"babyai"``."""
    return "mapf" if str(task).lower().startswith("mapf") else "babyai"


def _now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _norm(text: str) -> str:
    """Whitespace-collapsed, lower-cased text (to test whether a skill is already in a prompt)."""
    return " ".join(text.split()).lower()


def outcome_kind(outcome: str) -> str:
    """``"success"``, ``"neutral"`` or ``"failure"`` for a recorded trial outcome.

    Success: :data:`SUCCESS_OUTCOMES`; neutral: :data:`NEUTRAL_OUTCOMES`; anything else (``rejected``,
    ``not-promoted``, ``vetoed``, ``accepted on training seeds, failed the validation gate``, ...) is a failure.
    """
    o = str(outcome).strip().lower()
    if o in SUCCESS_OUTCOMES:
        return "success"
    if o in NEUTRAL_OUTCOMES:
        return "neutral"
    return "failure"


class SkillUse(BaseModel):
    """One later trial of a skill: where it was tried, what happened, the measured gain (if any)."""

    model_config = ConfigDict(extra="ignore")

    task: str
    run: str = ""
    candidate: str = ""
    outcome: str
    gain: float | None = None

    @property
    def kind(self) -> str:
        return outcome_kind(self.outcome)


class Skill(BaseModel):
    """A promoted segment edit, with where it was learned and what it was worth.

    ``id`` is filled from ``module``/``segment``/``text`` when left empty (see :func:`skill_id`).
    """

    model_config = ConfigDict(extra="ignore")

    id: str = ""
    module: str
    segment: str
    text: str
    task: str
    family: str
    run: str = ""
    gain: float = Field(description="validation mean paired difference when promoted")
    n: int = Field(0, ge=0, description="validation seeds behind `gain`")
    validation_rate: float | None = Field(None, description="validation success rate of the promoted prompt")
    validation_ci95: list[float] | None = Field(None, description="95% Wilson interval of validation_rate")
    p_value: float | None = Field(None, description="p-value of the promotion test")
    train_gain: float | None = None
    created: str = ""
    uses: list[SkillUse] = Field(default_factory=list)
    # rule-bank fields (absent in older files): who wrote it, how, the answer format it needs, its evidence
    author: Literal["machine", "person"] = "machine"
    operator: str = ""
    status: Literal["promoted", "accepted"] = "promoted"
    format: str | None = Field(None, description="answer-format text the rule needs (rewritten with it)")
    evidence: dict | None = None

    @field_validator("module", "segment")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        v = sanitize_text(v)
        if not v:
            raise ValueError("skill text is empty")
        return v

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        return str(v).strip().lower()

    @model_validator(mode="after")
    def _fill(self) -> "Skill":
        if not self.id:
            self.id = skill_id(self.module, self.segment, self.text)
        if not self.created:
            self.created = _now_iso()
        return self

    @property
    def successes(self) -> int:
        """Later trials in which the skill helped."""
        return sum(1 for u in self.uses if u.kind == "success")

    def failed_on(self, task: str) -> bool:
        """True when a recorded trial on ``task`` failed."""
        return any(u.task == task and u.kind == "failure" for u in self.uses)

    def counters(self) -> dict[str, Any]:
        """Per task: tried, accepted on training seeds, promoted (the run that found it counts as one
        trial); over all later trials: helpful (promoted) and harmful (rejected or worse)."""
        per: dict[str, dict[str, int]] = {self.task: {"tried": 1, "accepted": 1, "promoted": int(self.status == "promoted")}}
        for u in self.uses:
            row = per.setdefault(u.task, {"tried": 0, "accepted": 0, "promoted": 0})
            row["tried"] += 1
            row["accepted"] += u.outcome in ACCEPTED_OUTCOMES or u.kind == "success"
            row["promoted"] += u.kind == "success"
        return {"tasks": per, "helpful": self.successes, "harmful": sum(1 for u in self.uses if u.kind == "failure")}


class SkillLibrary:
    """An ordered collection of :class:`Skill` objects keyed by id, stored as one JSON file."""

    def __init__(self, skills: Iterable[Skill] = (), path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self._skills: dict[str, Skill] = {}
        for s in skills:
            self.add(s)

    # -- container ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._skills)

    def __iter__(self) -> Iterator[Skill]:
        return iter(list(self._skills.values()))

    def __contains__(self, sid: object) -> bool:
        return sid in self._skills

    def get(self, sid: str) -> Skill | None:
        return self._skills.get(sid)

    @property
    def skills(self) -> list[Skill]:
        return list(self._skills.values())

    # -- files --------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "SkillLibrary":
        """Read a library; a missing file gives an empty library (remembering ``path`` for save).

        Raises :class:`SkillLibraryError` (one line) when the file is not a valid skill library.
        """
        path = Path(path)
        if not path.exists():
            return cls(path=path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("skills"), list):
                raise ValueError("not a skill library (no 'skills' list)")
            if data.get("version", LIBRARY_VERSION) != LIBRARY_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r} (expected {LIBRARY_VERSION})")
            skills = [Skill.model_validate(s) for s in data["skills"]]
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err.get("loc", ()))
            raise SkillLibraryError(f"corrupt skill library {path}: skills.{loc}: {err.get('msg')}") from None
        except (ValueError, UnicodeDecodeError, OSError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise SkillLibraryError(f"corrupt skill library {path}: {msg}") from None
        return cls(skills, path=path)

    def to_dict(self) -> dict[str, Any]:
        return {"version": LIBRARY_VERSION, "skills": [s.model_dump() for s in self._skills.values()]}

    def save(self, path: str | Path | None = None) -> Path:
        """Write the library atomically as indented JSON (to ``path``, else the path it was loaded from)."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise SkillLibraryError("no path to save the skill library to")
        write_json_atomic(target, self.to_dict())
        self.path = target
        return target

    # -- updates ------------------------------------------------------------------------------
    def add(self, skill: Skill) -> Skill:
        """Add ``skill``; for an id already present keep the record with the higher gain.

        The recorded uses of both records are kept (merged, without exact duplicates). Returns the
        stored skill.
        """
        old = self._skills.get(skill.id)
        if old is None:
            self._skills[skill.id] = skill.model_copy(deep=True)
            return self._skills[skill.id]
        keep = skill if skill.gain > old.gain else old
        uses = list(old.uses)
        seen = {u.model_dump_json() for u in uses}
        for u in skill.uses:
            if u.model_dump_json() not in seen:
                uses.append(u)
                seen.add(u.model_dump_json())
        merged = keep.model_copy(deep=True, update={"uses": [u.model_copy() for u in uses]})
        self._skills[skill.id] = merged
        return merged

    def from_promotion(
        self,
        edit: dict | Edit,
        task: str,
        family: str,
        run: str,
        heldout_gain: float,
        n: int,
        train_gain: float | None = None,
        *,
        created: str | None = None,
        validation_rate: float | None = None,
        validation_ci95: list[float] | None = None,
        p_value: float | None = None,
        author: str = "machine",
        operator: str = "",
        status: str = "promoted",
        format: str | None = None,
        evidence: dict | None = None,
    ) -> Skill | None:
        """Turn a promoted edit into a skill and add it; None when it does not qualify.

        Only ``add``/``rewrite`` edits with non-empty text and a positive validation gain qualify (a
        deletion carries no reusable text). ``edit`` is an :class:`Edit` or its ``to_dict()``. The skill
        keeps the validation estimate that earned the promotion: gain, n, the success rate with its 95%
        interval and the test's p-value.
        """
        d = edit.to_dict() if isinstance(edit, Edit) else dict(edit or {})
        if str(d.get("op") or "").lower() not in ("add", "rewrite"):
            return None
        text = sanitize_text(str(d.get("text") or ""))
        if not text or heldout_gain is None or not float(heldout_gain) > 0:
            return None
        try:
            skill = Skill(module=str(d.get("module") or ""), segment=str(d.get("segment") or ""), text=text,
                          task=task, family=family, run=run, gain=float(heldout_gain), n=int(n),
                          validation_rate=validation_rate, validation_ci95=validation_ci95, p_value=p_value,
                          train_gain=None if train_gain is None else float(train_gain), created=created or "",
                          author=author, operator=operator, status=status, format=format, evidence=evidence)
        except ValidationError:
            return None
        return self.add(skill)

    def record_use(self, skill_id: str, task: str, run: str, outcome: str, gain: float | None = None,
                   candidate: str = "") -> Skill:
        """Append a trial record ``{task, run, candidate, outcome, gain}`` to a skill; returns the skill.

        Idempotent per (run, candidate): recording the same trial again (a resumed run replaying its last
        step) changes nothing."""
        skill = self._skills.get(skill_id)
        if skill is None:
            raise SkillLibraryError(f"no skill with id {skill_id!r} in the library")
        if candidate and any(u.run == run and u.candidate == candidate for u in skill.uses):
            return skill
        skill.uses.append(SkillUse(task=task, run=run, candidate=candidate, outcome=outcome,
                                   gain=None if gain is None else float(gain)))
        return skill

    # -- selection ----------------------------------------------------------------------------
    def select(self, task: str, family: str, prompts: PromptSet, k: int = 3) -> list[Skill]:
        """Up to ``k`` skills learned on OTHER tasks that are worth trying on ``task``.

        Excluded: skills learned on ``task`` itself, skills whose text is already in ``prompts`` (any
        module, whitespace and case ignored), and skills that failed in an earlier trial on ``task``.
        Ranked by: same family first, then higher validation gain, then more successful later uses, then
        id (so the order is deterministic). Skills with the same text are offered once.
        """
        if k <= 0:
            return []
        family = str(family).strip().lower()
        present = [_norm(s.text) for _, p in prompts.modules for s in p.segments]
        pool = [
            s for s in self._skills.values()
            if s.task != task and not s.failed_on(task) and not any(_norm(s.text) in t for t in present)
        ]
        pool.sort(key=lambda s: (s.family != family, -s.gain, -s.successes, s.id))
        out: list[Skill] = []
        texts: set[str] = set()
        for s in pool:
            if _norm(s.text) in texts:
                continue
            texts.add(_norm(s.text))
            out.append(s)
            if len(out) == k:
                break
        return out


# -- use in a run ----------------------------------------------------------------------------------


def render(skills: Iterable[Skill], max_chars: int = 400) -> str:
    """Compact text listing skills for the mutator's prompt: id, where it helped, gain, the text.

    Texts longer than ``max_chars`` are cut with "...". An empty list gives ``"(no skills)"``.
    """
    lines: list[str] = []
    for s in skills:
        used = f"; helped in {s.successes} of {len(s.uses)} later trials" if s.uses else ""
        lines.append(f"- skill {s.id} ({s.module}.{s.segment}) learned on {s.task} ({s.family}): {s.status}, "
                     f"{s.author}-written{' by ' + s.operator if s.operator else ''}, "
                     f"gain {s.gain:+.3f} over {s.n} seeds{used}")
        text = s.text if len(s.text) <= max_chars else s.text[: max(0, max_chars - 3)].rstrip() + "..."
        lines.extend("    " + ln for ln in text.splitlines())
    return "\n".join(lines) if lines else "(no skills)"


def _target_module(skill: Skill, prompts: PromptSet) -> str:
    names = prompts.module_names
    if not names:
        raise SkillLibraryError("the prompt set has no modules to insert a skill into")
    if skill.module in names:
        return skill.module
    for m, p in prompts.modules:
        if skill.segment in p.names:
            return m
    return names[-1]


def _unique_name(base: str, taken: Iterable[str]) -> str:
    taken = set(taken)
    base = base[:64].rstrip("-_") or "skill"
    if base not in taken:
        return base
    i = 2
    while True:
        suffix = f"-{i}"
        name = base[: 64 - len(suffix)].rstrip("-_") + suffix
        if name not in taken:
            return name
        i += 1


def skill_edit(skill: Skill, prompts: PromptSet, protected: frozenset[str] = PROTECTED_SEGMENTS) -> Edit:
    """An ``add`` edit that inserts ``skill`` as a new segment of ``prompts``.

    Module: the skill's own module when the prompt set has it, else the module holding a segment with
    the skill's segment name, else the last module. Segment name: ``skill-<segment>`` made unique
    within that module (``-2``, ``-3``, ...). Place: just before the first protected answer-format
    segment (``format``/``output_format``) when one follows another segment, else at the end of the
    module. The rationale names the skill id, so the trial can be traced back to the library.
    """
    module = _target_module(skill, prompts)
    names = prompts.module(module).names
    seg = skill.segment if skill.segment.startswith("skill-") else f"skill-{skill.segment}"
    name = check_name(_unique_name(seg, names))
    fmt = next((i for i, n in enumerate(names) if n in protected), None)
    if fmt is not None and fmt > 0:
        after: str | None = names[fmt - 1]
    else:
        after = names[-1] if names else None
    rationale = (f"reuse skill {skill.id} learned on {skill.task} ({skill.family}"
                 + (f", run {skill.run}" if skill.run else "")
                 + f"): validation gain {skill.gain:+.3f} over {skill.n} seeds")
    return Edit(op="add", module=module, segment=name, text=skill.text, rationale=rationale, after=after)


def skill_id_from_rationale(rationale: str) -> str | None:
    """The skill id named by a :func:`skill_edit` rationale (to record the trial's outcome), else None."""
    m = re.search(r"\bskill ([0-9a-f]{12})\b", rationale or "")
    return m.group(1) if m else None


class SkillsOperator:
    """Library skills learned on other tasks (``--skills FILE``), scheduled before the other operators."""

    name = "skills"
    author = "machine"  # each child carries its skill's own author
    reads = ()
    summary = "a rule kept in the rule bank (--skills) by an earlier run, with the answer format it needs"

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        lib = ctx.game.skill_library()
        task = ctx.game.task
        out = []
        for sk in lib.select(task.name, task.family, parent, k=3):
            if len(out) >= k:
                break
            e = skill_edit(sk, parent)
            child = apply_edit(parent, e)
            if sk.format:  # the answer shape the rule was found with
                fmt = format_rewrite(child, e.module, sk.format, f"skill {sk.id}: the answer shape it needs")
                child = apply_edit(child, fmt) if fmt is not None else child
            if not ctx.new_child(child):
                continue
            out.append(Proposal(child, "skill", e.to_dict(), {"skill": sk.id, "author": sk.author}))
        return out


register_operator(SkillsOperator())
