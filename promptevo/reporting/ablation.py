"""``--ablate``: what each segment of the best prompts is worth, measured on the validation seeds by playing
without it (counterfactual ablation). Written to ``ablation.json`` and shown in the report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from promptevo.fileio import write_json_atomic
from promptevo.optim.reflect.ablation import counterfactual_ablation
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.optim.engine import Engine


def ablate_best(engine: "Engine") -> list[dict]:
    best = engine.state.best
    vs = engine.validation_seeds()
    engine.emit("phase", generation=None, text=f"ablation of {best.id} on {len(vs)} validation seeds")

    def run(ps: PromptSet, seeds: list[int]) -> list[dict]:
        eps = engine.play(ps.fingerprint(), ps, seeds, "validation")
        return [eps[s] for s in seeds if s in eps]

    rows = counterfactual_ablation(best.prompt_set(), vs, run)
    write_json_atomic(engine.run_dir / "ablation.json", {"candidate": best.id, "seeds": vs, "rows": rows})
    for r in rows:
        engine.emit("note", generation=None, message=f"ablation {r['module']}.{r['segment']}: success "
                    f"{r['delta_success']:+.2f}, score {r['delta_return']:+.3f} (n={r['n']})")
    return rows
