"""The state of an optimization run and its checkpoint.

:class:`RunState` holds every candidate (with lineage, per-seed records per split, decisions), one
:class:`GenerationRecord` per generation (which records how far the generation got, so a resumed run
continues exactly there), the seeds of each split and the usage so far. :func:`save_checkpoint` writes it
atomically after every step; :func:`load_checkpoint` reads it back (one clear error when it is corrupt).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from promptevo.errors import PromptevoError
from promptevo.evaluation.store import Entry, EpisodeStore
from promptevo.fileio import write_json_atomic
from promptevo.optim.config import OptimizeConfig
from promptevo.segments import PromptSet

CHECKPOINT = "checkpoint.json"
CHECKPOINT_VERSION = 2
#: the statuses of a candidate that won its race (promoted or not, or vetoed by the backtest afterwards)
ACCEPTED_STATUSES = frozenset({"accepted", "promoted", "not-promoted", "vetoed"})
SplitName = Literal["train", "validation", "test"]


class RunError(PromptevoError, RuntimeError):
    """A run cannot start or continue; ``str(e)`` is one line meant for the user."""


class RunStopped(RunError):
    """The run stopped before its end because episodes could not be played (LLM outage, failing server):
    everything finished is kept and ``--resume`` continues it; ``str(e)`` is one line with that command."""


class Candidate(BaseModel):
    """One prompt set tried by the run."""

    model_config = ConfigDict(extra="forbid")

    id: str
    fingerprint: str
    prompts: dict
    parent: str | None = None
    generation: int = 0
    operator: str = "initial"  # initial | mutate | delete | crossover | hint | skill | prune | induce
    source: dict | None = None  # operator details: hint id, skill id, crossover parents, ablation row, author
    edit: dict | None = None
    analysis: str | None = None  # path of the generation's evidence file (relative to the run dir)
    train: dict[str, dict] = Field(default_factory=dict)  # seed -> compact record
    validation: dict[str, dict] = Field(default_factory=dict)
    test: dict[str, dict] = Field(default_factory=dict)
    race: dict | None = None  # rounds played, stop reason
    verdict: dict | None = None  # training-seed acceptance against the parent
    gate: dict | None = None  # validation gate
    status: str = "new"  # new | initial | screened-out | stopped | accepted | rejected | promoted | not-promoted | vetoed
    tokens: int = 0
    cost: float = 0.0
    prompt_tokens_saved: int | None = None
    validity: dict | None = None
    screen: dict | None = None  # replay of recorded states before racing (optim.screen)

    def prompt_set(self) -> PromptSet:
        return PromptSet.from_dict(self.prompts)

    def records(self, split: SplitName) -> dict[str, dict]:
        return getattr(self, split)

    def scores(self, split: SplitName, seeds: list[int] | None = None, key: str = "score") -> dict[int, float]:
        """Per-seed scores (``key``: score, success, return, progress, progression) on ``split``."""
        keep = None if seeds is None else {int(s) for s in seeds}
        return {int(s): float(r.get(key) or 0.0) for s, r in self.records(split).items()
                if keep is None or int(s) in keep}


class GenerationRecord(BaseModel):
    """How far a generation got; every step is persisted before the next starts."""

    model_config = ConfigDict(extra="forbid")

    index: int
    parent: str
    mode: Literal["mutate", "prune"] = "mutate"
    evidence_seeds: list[int]
    accept_seeds: list[int]
    expert_seeds: list[int] = Field(default_factory=list)  # training seeds the game's expert played
    evidence: str | None = None  # path of analyses/gen-NNN.json once reflected
    evidence_kind: str | None = None  # raw | cards | none
    children: list[str] = Field(default_factory=list)
    proposed: bool = False
    raced: bool = False
    gate: dict | None = None
    skills_applied: bool = False
    done: bool = False
    optimizer_usage: dict[str, dict] = Field(default_factory=dict)
    episodes_saved: int = 0  # training episodes racing did not play


class RunState(BaseModel):
    """Everything a run needs to continue after a crash."""

    model_config = ConfigDict(extra="forbid")

    version: int = CHECKPOINT_VERSION
    created: float = Field(default_factory=time.time)
    updated: float = Field(default_factory=time.time)
    config: OptimizeConfig
    splits: dict[str, list[int]] = Field(default_factory=dict)  # seeds each split may use
    candidates: dict[str, Candidate] = Field(default_factory=dict)
    generations: list[GenerationRecord] = Field(default_factory=list)
    history: list[dict] = Field(default_factory=list)  # edits and outcomes, read by the mutator
    initial_id: str = "c0"
    best_id: str = "c0"
    baseline: dict = Field(default_factory=dict)  # {"agent", "key", "test": {seed: record}}
    phase: Literal["optimize", "final", "done"] = "optimize"
    played: dict[str, list[int]] = Field(default_factory=dict)  # split -> seeds actually played
    usage: dict = Field(default_factory=lambda: {"calls": 0, "tokens": 0, "cost": 0.0})
    episodes_run: int = 0
    wall_s: float = 0.0  # seconds spent in this run, over every resume
    store_lines: int = 0  # episode-store lines the usage above covers (a crash can leave more)
    # key (fingerprint, baseline:<agent>) -> split -> seeds the engine asked to play, saved before it plays
    # them: a store line outside it was not written by this run and is refused (None: a checkpoint written
    # before schedules were kept)
    scheduled: dict[str, dict[str, list[int]]] | None = Field(default_factory=dict)
    stop_reason: str = ""
    warnings: list[str] = Field(default_factory=list)
    final: dict = Field(default_factory=dict)  # final test table once computed

    def gen(self, g: int) -> GenerationRecord | None:
        for rec in self.generations:
            if rec.index == g:
                return rec
        return None

    def next_id(self) -> str:
        return f"c{len(self.candidates)}"

    @property
    def best(self) -> Candidate:
        return self.candidates[self.best_id]

    @property
    def initial(self) -> Candidate:
        return self.candidates[self.initial_id]


def save_checkpoint(run_dir: Path, state: RunState) -> None:
    state.updated = time.time()
    # compact: the C encoder (indented JSON goes through the pure-Python one, 10x slower on big runs)
    write_json_atomic(run_dir / CHECKPOINT, state.model_dump(mode="json"), indent=None)


def load_checkpoint(run_dir: str | Path) -> RunState:
    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        raise RunError(f"no checkpoint to resume: {path} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"checkpoint version {data.get('version')!r}; this promptevo reads version "
                             f"{CHECKPOINT_VERSION} (start a new run)")
        if "scheduled" not in data:  # written before schedules were kept: nothing to check lines against
            data["scheduled"] = None
        state = RunState.model_validate(data)
        if state.initial_id not in state.candidates or state.best_id not in state.candidates:
            raise ValueError("initial_id/best_id not among candidates")
    except (ValueError, KeyError, TypeError, ValidationError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RunError(f"corrupt checkpoint {path}: {msg}") from None
    bad = fingerprint_mismatch(data.get("candidates") or {})
    if bad:
        raise RunError(f"checkpoint {path}: {bad}")
    return state


def unscheduled(scheduled: dict[str, dict[str, list[int]]] | None, settings: str, e: Entry) -> str | None:
    """Why a store line is not an episode the run scheduled (``scheduled``: :attr:`RunState.scheduled`;
    ``settings``: the run's agent-settings digest), or None when it is (or the checkpoint predates
    schedules)."""
    if scheduled is None:
        return None
    where = scheduled.get(e.key) or {}
    ok = e.seed in where.get(e.split, []) if e.split is not None else any(e.seed in v for v in where.values())
    if not ok:
        return f"the run never scheduled {e.key[:24]} on {e.split or 'any'} seed {e.seed} (not written by this run)"
    if e.settings is not None and e.settings != settings:
        return "played with other agent settings than this run's"
    return None


def open_run_store(path: Path, state: RunState, settings: str) -> tuple[EpisodeStore, list[str]]:
    """The run's episode store, every line nobody scheduled refused (:func:`unscheduled`), and the lines to
    warn about (a repaired last record, each refused line, a checkpoint that predates schedules)."""
    store = EpisodeStore(path)
    notes = [f"note: {store.recovered}"] if store.recovered else []
    refused = store.refused + store.refuse(lambda e: unscheduled(state.scheduled, settings, e))
    notes += [f"warning: {line}" for line in refused]
    if state.scheduled is None and len(store):
        notes.append("note: this checkpoint was written before episodes were scheduled; the episode store's "
                     "lines are checked against their checksums only")
    return store, notes


def fingerprint_mismatch(candidates: dict) -> str | None:
    """One line naming the first candidate (raw checkpoint dicts) whose prompt texts no longer give its
    recorded fingerprint (edited after the run wrote them: its scores belong to other texts), else None."""
    for cid, c in candidates.items():
        if not isinstance(c, dict) or not isinstance(c.get("prompts"), dict):
            continue
        try:
            now = PromptSet.from_dict(c["prompts"]).fingerprint()
        except Exception as e:  # noqa: BLE001 - an unreadable prompt set is the same kind of damage
            return f"candidate {cid}'s prompts cannot be read ({type(e).__name__}); the file was damaged or edited"
        if now != c.get("fingerprint"):
            return (f"candidate {cid}'s prompt texts give fingerprint {now}, the run recorded "
                    f"{c.get('fingerprint')}: they were edited after the run played them, so its scores "
                    "belong to other texts; restore the file or start a new run")
    return None


def resolve_run_dir(run: str, results_dir: str = "results") -> Path:
    """A run folder given as a path, or as a run name under ``results_dir`` (command-line convenience)."""
    run_dir = Path(run)
    if not (run_dir / CHECKPOINT).exists() and (Path(results_dir) / run / CHECKPOINT).exists():
        run_dir = Path(results_dir) / run
    return run_dir


def lineage(candidates: dict[str, Candidate], cid: str) -> list[Candidate]:
    """Candidates from the initial prompt to ``cid`` (inclusive), oldest first."""
    out, seen = [], set()
    cur: str | None = cid
    while cur is not None and cur in candidates and cur not in seen:
        seen.add(cur)
        out.append(candidates[cur])
        cur = candidates[cur].parent
    return list(reversed(out))


def induced_rule(candidates: dict[str, Candidate], cid: str) -> tuple[str, dict] | None:
    """(candidate id, induction record) of the newest candidate in ``cid``'s lineage whose edit wrote an
    induced table into the prompts (``induce`` and the compile operators), or None."""
    for c in reversed(lineage(candidates, cid)):
        rec = (c.source or {}).get("induce")
        if rec and rec.get("table") and rec.get("fields"):
            return c.id, rec
    return None


def final_compliance(candidates: dict[str, Candidate], played: dict[str, tuple[Candidate, list]],
                     analyse: Callable[[dict, list], dict], warn: Callable[[str], None]) -> dict[str, dict]:
    """The compliance analysis (``analyse(induction record, episodes)``) of each ``who -> (candidate, its
    test episodes)`` whose lineage carries an induced rule; a note for one that carries none. An analysis
    that fails is warned about and left out (it must not lose a finished run)."""
    out: dict[str, dict] = {}
    for who, (c, eps) in played.items():
        rule = induced_rule(candidates, c.id)
        if rule is None:
            out[who] = {"note": f"{c.id}'s prompts carry no induced rule"}
            continue
        try:
            out[who] = {"candidate": c.id, "rule_of": rule[0], **analyse(rule[1], eps)}
        except Exception as e:  # noqa: BLE001
            warn(f"warning: compliance analysis of {c.id} failed ({type(e).__name__}: {e})")
    return out


#: operators whose edits carry game knowledge a person typed (the hint library, the initial prompts)
PERSON_OPERATORS = frozenset({"initial", "hint"})


def author_of(c: Candidate) -> str:
    """Who wrote a candidate's edit: ``person`` (game knowledge a person typed: the initial prompts, the
    hint library, a skill recorded as person-written) or ``machine`` (derived by the optimizer, an LLM call
    or a program, from evidence or the game's expert)."""
    src = c.source or {}
    if src.get("author") in ("person", "machine"):
        return str(src["author"])
    return "person" if c.operator in PERSON_OPERATORS else "machine"


def segment_authors(candidates: dict[str, Candidate], cid: str) -> list[dict]:
    """For each segment of ``cid``'s prompts, the candidate of its lineage that last wrote it (added or
    rewrote its text), that candidate's operator and :func:`author_of`; segments of the initial prompts
    are the initial candidate's."""
    owner: dict[tuple[str, str], Candidate] = {}
    texts: dict[tuple[str, str], str] = {}
    for c in lineage(candidates, cid):
        ps = c.prompt_set()
        now = {(m, s.name): s.text for m, p in ps.modules for s in p.segments}
        for key, text in now.items():
            if texts.get(key) != text:
                owner[key] = c
        texts = now
    return [{"segment": f"{m}.{s}", "candidate": owner[(m, s)].id, "operator": owner[(m, s)].operator,
             "author": author_of(owner[(m, s)])} for (m, s) in texts]


def record_of(ep: dict, score: float) -> dict:
    """The compact per-seed record a candidate keeps of an episode."""
    return {
        "success": bool(ep.get("success")),
        "score": float(score),
        "return": float(ep.get("return_", ep.get("return", 0.0)) or 0.0),
        "progression": float(ep.get("progression") or 0.0),
        "progress": float(ep.get("progress") if ep.get("progress") is not None else float(bool(ep.get("success")))),
        "steps": int(ep.get("steps") or 0),
        "tokens": int(ep.get("prompt_tokens") or 0) + int(ep.get("completion_tokens") or 0),
        "cost": float(ep.get("cost") or 0.0),
    }
