"""The optional strategies that act around the validation gate (the loop calls them through hooks):

* :func:`update_skills` (``--skills FILE``: the rule bank): a machine-written edit
  (mutate, induce, rules) that was accepted or promoted becomes a skill (with the estimate that earned it:
  validation gain, n, success rate with its 95% interval and p-value when promoted, the training gain when
  only accepted; its author, operator, answer format and evidence); every library skill tried as a
  child records how it fared. Trials are keyed by (run, candidate), so a crash between the library write
  and the checkpoint cannot record a use twice;
* :func:`validity_report` (``--backtest``): before a promotion, EvoTrainer-style checks: the candidate
  replayed on the most recent earlier generations' training seeds (backtest, :func:`earlier_seeds`), a
  leak check of the edit against the training missions, the train/validation generalization gap and
  behaviour on the validation seeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from promptevo.evaluation.statistics import summarize_records
from promptevo.optim.diagnostics import missions, validity
from promptevo.optim.hooks import LoopView
from promptevo.optim.propose.skills import SkillLibrary
from promptevo.optim.state import Candidate, GenerationRecord, author_of


#: operators whose accepted or promoted edits the skill library (the rule bank) keeps
BANKED_OPERATORS = frozenset({"mutate", "induce", "rule"})


def update_skills(engine: LoopView, rec: GenerationRecord) -> None:
    cfg, st = engine.cfg, engine.state
    if not cfg.skills:
        return
    lib = SkillLibrary.load(cfg.skills)
    run = engine.run_dir.name
    family = engine.task.family
    for cid in rec.children:
        c = st.candidates[cid]
        skill = (c.source or {}).get("skill")
        if c.operator == "skill" and skill and skill in lib:
            gain = (c.gate or {}).get("mean_diff", (c.verdict or {}).get("mean_diff"))
            lib.record_use(skill, cfg.task, run, c.status, gain, candidate=c.id)
    gate = rec.gate or {}
    # the bank keeps the machine-written rules (mutate, induce, rules) that were accepted or promoted, with
    # their evidence; a skill child is already in it (its use is recorded above), a hint is in its hint
    # library, prunes, deletions and crossovers carry no reusable text
    for cid in rec.children:
        c = st.candidates[cid]
        if c.operator not in BANKED_OPERATORS or not c.edit or c.status not in ("promoted", "accepted", "not-promoted", "vetoed"):
            continue
        promoted = c.status == "promoted" and gate.get("candidate") == c.id
        src = c.source or {}
        evidence = {k: v for k, v in (src.get("induce") or {}).items() if k in (
            "table", "heldout_accuracy", "majority_accuracy", "fit_states", "heldout_states")} or None
        fmt = (src.get("induce") or {}).get("format") or src.get("format")
        if promoted:
            row = summarize_records(c.validation)
            sk = lib.from_promotion(c.edit, cfg.task, family, run, heldout_gain=float(gate.get("mean_diff") or 0.0),
                                    n=int(gate.get("n") or 0), train_gain=(c.verdict or {}).get("mean_diff"),
                                    validation_rate=row["success_rate"], validation_ci95=list(row["ci95"]),
                                    p_value=gate.get("p_value"), author=author_of(c), operator=c.operator,
                                    format=fmt, evidence=evidence)
        else:
            v = c.verdict or {}
            sk = lib.from_promotion(c.edit, cfg.task, family, run, heldout_gain=float(v.get("mean_diff") or 0.0),
                                    n=int(v.get("n") or 0), train_gain=v.get("mean_diff"), author=author_of(c),
                                    operator=c.operator, status="accepted", format=fmt, evidence=evidence)
        if sk is not None:
            engine.emit("note", generation=rec.index, message=(
                f"rule {sk.id} ({c.operator}, {sk.status}) kept in {cfg.skills}: {c.edit.get('module')}."
                f"{c.edit.get('segment')}, gain {sk.gain:+.3f} over {sk.n} seeds"))
    lib.save(cfg.skills)


def earlier_seeds(generations: Sequence[GenerationRecord], g: int, played: Iterable[Any],
                  limit: int | None = None) -> list[int]:
    """Training seeds of generations before ``g`` that the best prompt was ``played`` on, taken from the
    most recent generation back (acceptance seeds before evidence seeds), at most ``limit``; ascending.

    Seeds are drawn from a shuffled pool, so recency comes from the generation records, not from the seed
    numbers. Seeds of generation ``g`` itself are never included (the pool wraps around on long runs).
    """
    have = {int(s) for s in played}
    current = {int(s) for r in generations if r.index == g for s in (*r.accept_seeds, *r.evidence_seeds)}
    out: list[int] = []
    for rec in sorted((r for r in generations if r.index < g), key=lambda r: -r.index):
        for s in (*rec.accept_seeds, *rec.evidence_seeds):
            if int(s) in have and int(s) not in current and int(s) not in out:
                out.append(int(s))
    if limit is not None:
        out = out[: max(0, limit)]
    return sorted(out)


def _prompt_text(c: Candidate) -> str:
    return "\n".join(seg.text for _, p in c.prompt_set().modules for seg in p.segments)


def validity_report(engine: LoopView, g: int, top: Candidate, best: Candidate, gate: dict, *,
                    run_backtest: bool) -> dict[str, Any]:
    cfg, st = engine.cfg, engine.state
    bt_child = bt_best = None
    bt: list[int] = []
    if run_backtest:
        bt = earlier_seeds(st.generations, g, best.train, limit=cfg.backtest_episodes or cfg.episodes)
        if bt:
            engine.emit("phase", generation=g, text=f"backtest of {top.id} on {len(bt)} earlier seeds")
            engine.eval_candidate(top, "train", bt)
            engine.eval_candidate(best, "train", bt)
            bt_child, bt_best = top.scores("train", bt), best.scores("train", bt)
    store = engine.store
    train_eps = [e for s in sorted(int(x) for x in best.train) if (e := store.get(best.fingerprint, s))]
    vs = engine.validation_seeds()
    child_v = [e for s in vs if (e := store.get(top.fingerprint, s))]
    best_v = [e for s in vs if (e := store.get(best.fingerprint, s))]
    edit = top.edit or {}
    report = validity(
        edit_text=(edit.get("text") or "") if edit.get("op") != "delete" else None,
        parent_text=_prompt_text(best),
        train_missions=missions(train_eps), heldout_missions=missions(best_v),
        train_diff=(top.verdict or {}).get("mean_diff") if top.operator != "prune" else None,
        heldout_diff=gate.get("mean_diff") if top.operator != "prune" else None,
        min_train_gain=max(cfg.accept_margin, 1e-9),
        backtest_child=bt_child, backtest_best=bt_best,
        child_episodes=child_v, parent_episodes=best_v,
    )
    out = report.to_dict()
    out["backtest_seeds"] = bt
    out.setdefault("ok", report.ok)
    return out
