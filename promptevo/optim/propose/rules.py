"""The ``rules`` operator: narrow, schema-forced requests a small optimizer model can answer.

Open-ended reflection over trajectories is out of reach for a 1.5B model (its analyses copy the
template). One disagreement cluster at a time is not: the request shows the anonymised observation lines
of the states where the agent chose one action and the game's expert another
(:func:`~promptevo.optim.reflect.expert.disagreement_clusters`) and asks for one rule, and optionally the
answer format that makes the agent write what the rule reads, as JSON (``{"rule", "format"}``, forced by
the reply schema where the provider can). Several samples per cluster at the optimizer's temperature.

A program then drops replies that are unusable before any episode is played:

* empty, too long, or a copy of the template's example;
* instance-specific: naming a word of the cluster's missions' things (a colour, an object) or a number;
* a duplicate or near-duplicate (``difflib`` ratio >= :data:`NEAR_DUPLICATE`) of a rule already tried on
  this lineage (the run's history of edits: a memory of rejected rules) or of another sample.

The template (``prompts/optimizer/rule.md``) carries no game rule: its example shows the reply's shape.
What survives becomes a child (the rule inserted before the answer format, the format rewritten when the
reply gave one) and meets the screen and the race like every other child.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from promptevo.optim.evidence import Evidence
from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.answer_format import acting_module, format_rewrite, rule_edit
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.reflect.features import tokens
from promptevo.optim.reflect.llm_json import example_strings, load_template, render_template
from promptevo.segments import PromptSet, apply_edit

NEAR_DUPLICATE = 0.85
MAX_RULE_CHARS = 400


class RuleReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    rule: str
    format: str | None = None


@dataclass
class RuleSample:
    cluster: int
    rule: str
    format: str | None
    kept: bool
    reason: str = ""

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "rule": self.rule, "format": self.format, "kept": self.kept,
                "reason": self.reason or None}


@dataclass
class RuleRound:
    samples: list[RuleSample] = field(default_factory=list)
    usage: dict = field(default_factory=lambda: {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0})
    errors: list[str] = field(default_factory=list)

    @property
    def kept(self) -> list[RuleSample]:
        return [s for s in self.samples if s.kept]

    def to_dict(self) -> dict:
        return {"samples": [s.to_dict() for s in self.samples], "usage": self.usage, "errors": self.errors}


def _norm(text: str) -> str:
    return " ".join(tokens(text))


def near_duplicate(text: str, others: Iterable[str], ratio: float = NEAR_DUPLICATE) -> bool:
    """True when ``text`` equals or nearly equals (word sequence similarity) one of ``others``."""
    a = _norm(text)
    return any(a == _norm(o) or difflib.SequenceMatcher(None, a, _norm(o)).ratio() >= ratio for o in others if o)


def instance_words(cluster: dict) -> set[str]:
    """Words of the things named in a cluster's example missions that are not in its anonymised lines
    (colours, kinds...): a rule naming one of them speaks about one instance."""
    shapes = {w for p, _ in cluster.get("patterns") or [] for w in tokens(p)}
    named: set[str] = set()
    for ex in cluster.get("examples") or []:
        for line in ex.get("lines") or []:
            named |= set(tokens(line))
    return {w for w in named - shapes if not w.isdigit()}


def check_rule(text: str, cluster: dict, tried: Sequence[str], forbid: Iterable[str] = ()) -> str:
    """Why a written rule is unusable ('' when it is usable)."""
    t = " ".join(str(text or "").split())
    if not t:
        return "empty"
    if len(t) > MAX_RULE_CHARS:
        return f"longer than {MAX_RULE_CHARS} characters"
    if any(f and f in t for f in forbid):
        return "copies the template's example"
    if re.search(r"\d", t):
        return "names a number"
    hits = sorted(instance_words(cluster) & set(tokens(t)))
    if hits:
        return f"names a particular thing ({', '.join(hits[:3])})"
    if near_duplicate(t, tried):
        return "same as a rule already tried"
    return ""


def build_messages(cluster: dict, actions: str, tried: Sequence[str]) -> list[dict]:
    system_t, user_t = load_template("rule")
    examples = "\n".join(f"- {n} x {p}" for p, n in (cluster.get("patterns") or [])[:6]) or "- (none)"
    values = {"agent_action": cluster["agent"], "expert_action": cluster["expert"], "count": cluster["count"],
              "examples": examples, "actions": actions,
              "tried": "\n".join(f"- {r}" for r in list(tried)[-6:]) or "(none)"}
    return [{"role": "system", "content": render_template(system_t, **values)},
            {"role": "user", "content": render_template(user_t, **values)}]


def write_rules(clusters: Sequence[dict], gateway: Any, *, actions: str, tried: Sequence[str], samples: int = 3,
                max_clusters: int = 2, temperature: float | None = None, max_tokens: int | None = None,
                seed: int = 0) -> RuleRound:
    """Ask for ``samples`` rules per cluster (the largest ``max_clusters`` clusters where some line names the
    mission's things) and check each (:func:`check_rule`)."""
    out = RuleRound()
    seen = list(tried)
    lm = OptimizerLM.of(gateway)
    usable = [c for c in clusters if c.get("with_line")][:max_clusters]
    for ci, cluster in enumerate(usable):
        msgs = build_messages(cluster, actions, seen)
        forbid = example_strings(msgs[0]["content"])
        for k in range(samples):
            reply, _raw, err, usage = lm.json(msgs, role="rules", parse=lambda o: RuleReply.model_validate(o),
                                              temperature=temperature, max_tokens=max_tokens, schema=RuleReply,
                                              seed=seed * 100 + ci * 10 + k, retries=0)
            for key in out.usage:
                out.usage[key] += usage.get(key, 0)
            if reply is None:
                out.errors.append(f"cluster {ci + 1} sample {k + 1}: {err or 'no usable reply'}")
                continue
            why = check_rule(reply.rule, cluster, seen, forbid)
            fmt = reply.format if reply.format and "<|ACTION|>" in reply.format else None
            out.samples.append(RuleSample(ci + 1, " ".join(reply.rule.split()), fmt, not why, why))
            if not why:
                seen.append(reply.rule)
    return out


def segment_name(rule: str) -> str:
    return "rule-" + hashlib.sha256(_norm(rule).encode()).hexdigest()[:6]


class RulesOperator:
    """``rules``: up to ``k`` children, each one rule the optimizer LLM wrote for one disagreement cluster,
    or a log line saying why there is none."""

    name = "rules"
    author = "machine"
    reads = ("expert",)
    summary = ("the optimizer LLM writes one rule per disagreement cluster with the game's expert (schema-forced, "
               "instance-specific and already-tried rules dropped)")

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        if "rules" in ctx.record:
            return []
        clusters = Evidence.of(evidence).clusters
        if not clusters:
            ctx.record["rules"] = {"note": "no disagreement clusters"}
            ctx.log.append("rules: no disagreement clusters with the expert (no expert, or the agent agrees); no child")
            return []
        game = ctx.game
        tried = [str((h.get("edit") or {}).get("text") or "") for h in ctx.proposal.history]
        env = game.env_factory(game.task)
        try:
            env.reset(game.task.seed_list("train")[0])
            actions = env.action_space().describe()
        finally:
            env.close()
        rnd = write_rules(clusters, ctx.lm, actions=actions, tried=tried, samples=ctx.cfg.rule_samples,
                          seed=ctx.seed)
        ctx.record["rules"] = rnd.to_dict()
        ctx.usage["rules"] = dict(rnd.usage)
        module = acting_module(parent)
        out: list[Proposal] = []
        for sample in rnd.kept:
            if len(out) >= k:
                break
            edit = rule_edit(parent, module, segment_name(sample.rule), sample.rule,
                             f"written by the optimizer for disagreement cluster {sample.cluster}")
            try:
                child = apply_edit(parent, edit)
                fmt = format_rewrite(child, module, sample.format, "the answer shape the rule needs") if sample.format else None
                if fmt is not None:
                    child = apply_edit(child, fmt)
            except ValueError:
                continue
            if not ctx.new_child(child):
                continue
            out.append(Proposal(child, "rule", edit.to_dict(), {"author": "machine", "cluster": sample.cluster,
                                                               "format": sample.format}))
        dropped = len(rnd.samples) - len(rnd.kept)
        ctx.log.append(f"rules: {len(rnd.samples)} written, {dropped} dropped before any episode"
                       + (f" ({'; '.join(sorted({s.reason for s in rnd.samples if not s.kept}))})" if dropped else "")
                       + (f"; {len(rnd.errors)} unusable replies" if rnd.errors else ""))
        return out


register_operator(RulesOperator())

__all__ = ["RuleReply", "RuleRound", "RuleSample", "RulesOperator", "check_rule", "instance_words", "near_duplicate",
           "segment_name", "write_rules"]
