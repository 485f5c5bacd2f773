"""Settings of one optimization run (:class:`OptimizeConfig`), stored in the run's checkpoint."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator, model_validator

from promptevo.errors import PromptevoError

Fitness = Literal["success", "return", "progress", "progression"]
AcceptRule = Literal["margin", "sign", "wilcoxon", "bootstrap", "always"]
PromoteRule = Literal["sign", "wilcoxon", "bootstrap", "margin"]
DEFAULT_MODEL = "local/qwen2.5-coder-1.5b"


#: named sizes of a run (explicit flags win over a preset); the README states what each costs and its power
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"generations": 2, "children": 2, "episodes": 10, "evidence_episodes": 4, "validation_episodes": 40,
              "test_episodes": 50},
    "standard": {"generations": 4, "children": 3, "episodes": 32, "evidence_episodes": 8, "validation_episodes": 150,
                 "test_episodes": 100},
    "thorough": {"generations": 6, "children": 4, "episodes": 48, "evidence_episodes": 8, "validation_episodes": 300,
                 "test_episodes": 200},
}


class ConfigError(PromptevoError, ValueError):
    """A setting is wrong; ``str(e)`` is one line naming the option."""


def default_run_name(task: str, agent: str) -> str:
    """A run's folder name when none is given: ``<task>-<agent>-<timestamp>`` (optimize and eval alike)."""
    return f"{task}-{agent}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


class OptimizeConfig(BaseModel):
    """Settings of one optimization run (``extra`` keys are refused)."""

    model_config = ConfigDict(extra="forbid")

    # what is optimized
    task: str = Field(description="task name (see `promptevo tasks`; required unless --resume)")
    preset: Literal["quick", "standard", "thorough"] | None = Field(default=None, description="named run sizes: "
        "quick = 2 generations x 2 children x 10 training seeds, 40 validation, 50 test; standard = the defaults "
        "(4 x 3 x 32, 150, 100); thorough = 6 x 4 x 48, 300, 200. Explicit sizes win; a new command-line run on a "
        "local/ model gets quick")
    agent: str = Field(default="two-stage", description="agent whose prompts are optimized")
    init: str = Field(default="plain", description="initial default prompts: plain, guided or compact "
                      "(prompts/<family>/<init>/)")
    prompts: str | None = Field(default=None, description="initial PromptSet file (.md/.json); overrides init")
    agent_options: dict[str, Any] = Field(default_factory=dict, description="agent keyword options, e.g. history")
    # models
    model: str = Field(default=DEFAULT_MODEL, description="agent LLM (LiteLLM model string)")
    api_base: str | None = Field(default=None, description="server URL for the agent model")
    optimizer_model: str | None = Field(default=None, description="LLM for the analyzer and the operators "
                                        "(default: model)")
    optimizer_api_base: str | None = Field(default=None, description="server URL for the optimizer model "
                                           "(default: api_base when the models match)")
    no_cache: bool = Field(default=False, description="do not use the LLM response cache")
    temperature: float = Field(default=0.0, ge=0, le=2, description="agent sampling temperature")
    timeout: float = Field(default=120.0, gt=0, description="seconds one LLM call may take before it is retried "
                           "(a retry prints one line)")
    max_steps: int | None = Field(default=None, ge=1, description="cap on steps per episode (default: the "
                                  "env's own limit, BALROG's 64/128 for BabyAI)")
    agent_max_tokens: int = Field(default=512, ge=16, description="max tokens per agent LLM call")
    price_in: float | None = Field(default=None, ge=0, description="USD per million prompt tokens, for models "
                                   "without a known price")
    price_out: float | None = Field(default=None, ge=0, description="USD per million completion tokens")
    # the loop
    generations: int = Field(default=4, ge=0, description="generations")
    children: int = Field(default=3, ge=1, description="children proposed per generation")
    episodes: int = Field(default=32, ge=1, description="training seeds a child is compared on (paired; raced in "
                          "batches of a quarter, a half, all)")
    evidence_episodes: int | None = Field(default=8, ge=1, description="training seeds the parent is played on for "
                                          "the analyzer's evidence; disjoint from the acceptance seeds")
    validation_episodes: int = Field(default=150, ge=1, description="validation seeds of the promotion gate")
    test_episodes: int = Field(default=100, ge=1, description="test seeds played once at the end")
    final_test: bool = Field(default=True, description="play the test split at the end (a curriculum's stages "
                             "do not: the curriculum plays its target's test seeds once, at its end)")
    fitness: Fitness = Field(default="success", description="per-episode score the loop optimizes (progress: "
                             "the env's dense signal)")
    allow_negative_margins: bool = Field(default=False, description="accept a negative accept_margin or "
                                         "promote_margin (a child worse than its parent may then win)")
    accept_rule: AcceptRule = Field(default="margin", description="training-seed acceptance of a child")
    accept_margin: float = Field(default=0.0, allow_inf_nan=False,
                                 description="mean paired training difference needed")
    promote_rule: PromoteRule = Field(default="sign", description="paired test of the validation gate")
    gate: Literal["sequential", "fixed"] = Field(default="sequential", description="validation gate: sequential "
                                                 "(looks at 25/50/75/100% of the seeds, O'Brien-Fleming-type alpha "
                                                 "spending, stops as soon as the evidence decides) or fixed (all "
                                                 "seeds, one test)")
    promote_margin: float = Field(default=0.0, allow_inf_nan=False,
                                  description="with promote_rule margin: mean validation difference")
    max_segment_tokens: int | None = Field(default=None, ge=16, description="longest segment text an operator "
                                           "may write, in tokens (4 characters each); default: twice the "
                                           "parent's prompts, at least 512; a longer child is refused")
    alpha: float = Field(default=0.05, gt=0, lt=1, description="run-wide level of the promotion tests")
    correction: Literal["bonferroni", "none"] = Field(default="bonferroni", description="split alpha over "
                                                      "the generations' promotion tests")
    race: bool = Field(default=True, description="evaluate children on growing batches and stop hopeless ones "
                       "(off: every child plays all training seeds)")
    race_alpha: float = Field(default=0.2, gt=0, lt=1, description="level at which a child that is worse than "
                              "its parent is stopped early")
    operators: list[str] = Field(default_factory=lambda: ["induce", "mutate"], description="proposal operators, "
                                 "comma separated, from the operator registry (`promptevo operators` says what "
                                 "each does; hints is the person-written library)")
    expert_seeds: list[int] | None = Field(default=None, description="seeds the game's expert plays (default: "
                                           "expert_episodes fresh training seeds per generation)")
    screen: Literal["filter", "audit", "off"] = Field(default="filter", description="replay recorded states "
                                                      "with each child before racing (needs an expert): filter "
                                                      "drops children that fix nothing, audit only records")
    rule_samples: int = Field(default=3, ge=1, description="rules operator: replies asked per disagreement cluster")
    screen_states: int = Field(default=24, ge=1, description="recorded states the screen replays per child")
    expert_episodes: int = Field(default=20, ge=0, description="training seeds the game's expert plays per "
                                 "generation (labelled states for induced rules; no LLM calls)")
    hints: str | None = Field(default=None, description="hint library file, or 'builtin' for the family's "
                              "shipped library (used by the hints operator, the person-written one)")
    loop_cutoff: bool = Field(default=True, description="stop an episode whose state repeats exactly and "
                              "replay the cycle (deterministic agents only; off: play to the step limit)")
    failure_share: float = Field(default=0.25, gt=0, le=1, description="stop the run (resumable, non-zero exit) "
                                 "when more than this share of the episodes of one evaluation could not be played "
                                 "because the LLM failed")
    # budgets (the final test evaluation always runs)
    budget_llm_calls: int | None = Field(default=None, ge=1, description="stop after this many LLM calls")
    budget_tokens: int | None = Field(default=None, ge=1, description="stop after this many tokens")
    budget_dollars: float | None = Field(default=None, gt=0, description="stop after this much spend (USD)")
    budget_episodes: int | None = Field(default=None, ge=1, description="stop after this many episodes")
    # stop conditions (each recorded as the stop reason; the final test split is still played, and --resume
    # with a larger limit continues the run)
    max_hours: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="time limit (over "
                                    "every resume); checked between steps")
    patience: int | None = Field(default=None, ge=1, description="stop after this many generations in a row "
                                 "without a promotion")
    target_success: float | None = Field(default=None, gt=0, le=1, description="stop once the best prompts' "
                                         "validation success rate reaches this")
    concurrency: int | None = Field(default=None, ge=1, description="episodes in flight (default: 1 for "
                                    "local/ models, 4 otherwise)")
    seed: int = Field(default=0, description="run seed: draws the training seeds")
    baseline: str | None = Field(default="robust-cot", description="agent shown as baseline in the final "
                                 "table ('none' to skip)")
    ablate_best: bool = Field(default=False, description="at the end, re-run validation seeds with each segment "
                              "of the best prompts removed (counterfactual ablation)")
    # the optimizer LLM
    max_trajectories: int = Field(default=6, ge=1, description="episodes the analyzer reads per generation")
    max_steps_shown: int = Field(default=30, ge=4, description="steps of one episode the analyzer reads")
    optimizer_temperature: float = Field(default=0.7, ge=0, le=2, description="optimizer sampling temperature")
    optimizer_max_tokens: int = Field(default=2048, ge=64, description="max tokens per analyzer/mutator reply")
    # optional strategies (off by default)
    evidence: Literal["raw", "cards", "auto"] = Field(default="raw", description="analyzer reads raw trajectories, "
                                                      "evidence cards, or auto (cards above cards_above tokens)")
    cards_above: int = Field(default=4000, ge=0, description="with evidence auto: raw prompt tokens above which "
                             "cards are used")
    prune_at: float | None = Field(default=None, ge=0, le=1, description="scaffold pruning once validation "
                                   "success >= this rate")
    skills: str | None = Field(default=None, description="rule bank / skill library (JSON, created if missing): "
                               "machine-written rules accepted or promoted here are kept with their evidence and "
                               "counters, and offered as children to runs on other tasks")
    skill_children: int = Field(default=1, ge=0, description="children per generation that insert a skill")
    backtest: bool = Field(default=False, description="before promoting, replay on earlier generations' seeds and "
                           "run validity diagnostics")
    backtest_episodes: int | None = Field(default=None, ge=1, description="earlier seeds replayed by backtest "
                                          "(default: episodes)")
    ray: bool = Field(default=False, description="play episodes as Ray tasks (also when RAY_ADDRESS is set); "
                      "needs promptevo[ray]")
    mlflow: bool = Field(default=False, description="log the run to MLflow (./mlruns or MLFLOW_TRACKING_URI); "
                         "needs promptevo[mlflow]")
    # where
    results_dir: str = Field(default="results", description="where run folders go")
    run: str | None = Field(default=None, description="run name; default <task>-<agent>-<timestamp>")
    resume: bool = False

    @field_serializer("api_base", "optimizer_api_base")
    def _no_credentials(self, url: str | None) -> str | None:
        """Credentials in a server URL (``http://user:key@host``) are never written (checkpoint, report,
        logs, MLflow): the stored URL has ``***`` in their place; a resume must be given the URL again."""
        from promptevo.llm.secrets import redact_url  # imports the llm package: only when a config is written

        return redact_url(url)

    @field_validator("operators")
    @classmethod
    def _known_operators(cls, v: list[str]) -> list[str]:
        from promptevo.optim.propose.registry import OperatorError, check_operators

        try:
            return check_operators(v)
        except OperatorError as e:
            raise ValueError(str(e)) from None

    @field_validator("accept_margin", "promote_margin")
    @classmethod
    def _margin(cls, v: float, info: Any) -> float:
        if v < 0 and not info.data.get("allow_negative_margins"):
            raise ValueError(f"{v} is negative: a child worse than its parent would win; give "
                             "--allow-negative-margins to mean it")
        return v

    @model_validator(mode="after")
    def _check(self) -> "OptimizeConfig":
        if "hints" in self.operators and not self.hints:
            object.__setattr__(self, "hints", "builtin")
        return self

    def run_path(self) -> Path:
        name = self.run or default_run_name(self.task, self.agent)
        p = Path(name)
        return p if (p.is_absolute() or len(p.parts) > 1) else Path(self.results_dir) / name

    @property
    def effective_concurrency(self) -> int:
        if self.concurrency is not None:
            return self.concurrency
        from promptevo.llm.types import default_concurrency  # the llm package loads litellm: only when asked

        return default_concurrency(self.model)

    @property
    def effective_evidence_episodes(self) -> int:
        return self.evidence_episodes or self.episodes


#: Fields that must not change when a run is resumed (they define what the stored episodes mean).
IDENTITY_FIELDS = ("task", "agent", "init", "prompts", "agent_options", "model", "seed", "episodes",
                   "evidence_episodes", "validation_episodes", "test_episodes", "fitness", "max_steps",
                   "agent_max_tokens", "temperature")

#: the identity fields an episode's outcome depends on besides its prompts (which its key names)
PLAY_FIELDS = ("task", "agent", "agent_options", "model", "max_steps", "agent_max_tokens", "temperature")


def settings_digest(cfg: "OptimizeConfig") -> str:
    """A short digest of :data:`PLAY_FIELDS`: stored with every episode, checked on resume."""
    blob = json.dumps({f: getattr(cfg, f) for f in PLAY_FIELDS}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


#: fields whose command-line flag is not ``--<field with dashes>``
FLAGS = {"budget_llm_calls": "--budget-calls", "ablate_best": "--ablate", "agent_options": "--history"}


def flag_of(field: str) -> str:
    """The command-line flag of a config field, as a user types it."""
    return FLAGS.get(field, "--" + field.replace("_", "-"))


#: the sections of the settings, in the order of ``--help`` and of a config file; every field but
#: ``resume`` (per invocation) is in exactly one. The TOML file has one table per section.
SECTIONS: dict[str, tuple[str, ...]] = {
    "loop": ("task", "preset", "seed", "generations", "children", "episodes", "evidence_episodes",
             "validation_episodes", "test_episodes", "fitness", "final_test", "failure_share"),
    "agent": ("agent", "init", "prompts", "agent_options", "model", "api_base", "temperature", "timeout",
              "max_steps", "agent_max_tokens", "loop_cutoff", "concurrency", "no_cache"),
    "race": ("accept_rule", "accept_margin", "allow_negative_margins", "race", "race_alpha"),
    "gate": ("promote_rule", "gate", "promote_margin", "alpha", "correction"),
    "screen": ("screen", "screen_states"),
    "operators": ("operators", "optimizer_model", "optimizer_api_base", "max_segment_tokens", "rule_samples",
                  "expert_episodes", "expert_seeds", "hints", "optimizer_max_tokens", "optimizer_temperature",
                  "max_trajectories", "max_steps_shown"),
    "strategies": ("evidence", "cards_above", "prune_at", "skills", "skill_children", "backtest",
                   "backtest_episodes", "ray"),
    "budget": ("budget_llm_calls", "budget_tokens", "budget_dollars", "budget_episodes", "max_hours", "patience",
               "target_success", "price_in", "price_out"),
    "output": ("baseline", "ablate_best", "mlflow", "results_dir", "run"),
}

#: what each section is about (the titles of ``promptevo optimize --help``)
SECTION_TITLES = {
    "loop": "loop: task, sizes and seeds", "agent": "agent: the prompts' player and its LLM",
    "race": "race: acceptance on paired training seeds", "gate": "gate: promotion on validation seeds",
    "screen": "screen: recorded states replayed before racing", "operators": "operators and the optimizer LLM",
    "strategies": "strategies (optional; off by default)", "budget": "budget and stopping",
    "output": "output",
}


def section_of(field: str) -> str:
    """The section a config field belongs to (KeyError for ``resume`` and unknown names)."""
    for name, fields in SECTIONS.items():
        if field in fields:
            return name
    raise KeyError(field)


#: the preset of a new run on a local model when none is named: sizes that finish in hours on 2 cores
LOCAL_PRESET = "quick"


def with_local_preset(given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with ``preset = LOCAL_PRESET`` when it is a new run on a ``local/`` model that names no
    preset and leaves some size unset (``promptevo optimize`` applies it; the Python API keeps the
    standard defaults)."""
    if "preset" in given or given.get("resume") or set(PRESETS["standard"]) <= set(given) \
            or not str(given.get("model") or DEFAULT_MODEL).startswith("local/"):
        return dict(given)
    return {**given, "preset": LOCAL_PRESET}


def with_preset(given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with the sizes of its ``preset`` filled in where no explicit value was given."""
    name = given.get("preset")
    if name is None:
        return dict(given)
    if name not in PRESETS:
        raise ConfigError(f"--preset: unknown preset {name!r} (use {', '.join(PRESETS)})")
    return {**PRESETS[name], **given}


def validate_config(given: dict[str, Any]) -> OptimizeConfig:
    """OptimizeConfig from option values (a preset's sizes filled in where not given); a bad value is one
    ConfigError line naming its flag as typed (``--budget-calls``, ``--operators``), and the value when it
    is one of a list."""
    try:
        return OptimizeConfig.model_validate(with_preset(given))
    except ValidationError as e:
        d = e.errors()[0]
        loc = [x for x in d.get("loc", ()) if isinstance(x, str)]
        msg = str(d.get("msg", "")).removeprefix("Value error, ")
        if loc and d.get("input") is not None and not isinstance(d.get("input"), (dict, list)):
            msg += f" (got {d['input']!r})"
        raise ConfigError(f"{flag_of(loc[0])}: {msg}" if loc else msg) from None


# -- runs as files -----------------------------------------------------------------------------------
#: settings a config file never carries (where a run lives and whether it resumes are per invocation)
NOT_IN_FILE = ("run", "resume")


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def config_toml(cfg: OptimizeConfig) -> str:
    """The resolved settings of a run as TOML, one table per section of :data:`SECTIONS`
    (``promptevo optimize --config FILE`` repeats it); unset options are left out, credentials in server
    URLs are masked."""
    d = cfg.model_dump(mode="json")
    lines = ["# promptevo optimize settings: `promptevo optimize --config <this file>` repeats the run"]
    for section, fields in SECTIONS.items():
        rows = [f"{k} = {_toml_value(d[k])}" for k in fields if k not in NOT_IN_FILE and d.get(k) is not None]
        if rows:
            lines += ["", f"[{section}]", *rows]
    return "\n".join(lines) + "\n"


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Option values from a TOML file: one table per section (``[loop]`` ``generations = 3``), as
    :func:`config_toml` writes it, or flat keys (run folders of earlier versions); keys as fields or as
    flags (``validation_episodes`` or ``validation-episodes``); ``history`` is the agent's option. One
    ConfigError line on a missing or unreadable file, an unknown section or an unknown key, naming the
    valid choices."""
    import difflib
    import tomllib

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--config {p}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"--config {p}: not a readable TOML file ({' '.join(str(e).split())})") from None
    fields = set(OptimizeConfig.model_fields) - set(NOT_IN_FILE)

    def closest(key: str, valid: Any) -> str:
        near = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
        return f" (did you mean {near[0]!r}?)" if near else ""

    entries: list[tuple[str, str, Any]] = []  # (section or "", key, value)
    for k, v in data.items():
        if isinstance(v, dict) and k.replace("-", "_") != "agent_options":
            if k not in SECTIONS:
                raise ConfigError(f"--config {p}: unknown section [{k}]{closest(k, SECTIONS)}; sections: "
                                  + ", ".join(SECTIONS))
            entries += [(k, kk, vv) for kk, vv in v.items()]
        else:
            entries.append(("", k, v))
    out: dict[str, Any] = {}
    for section, k, v in entries:
        key = k.replace("-", "_")
        if key == "history" and section in ("", "agent"):
            out.setdefault("agent_options", {})["history"] = v
            continue
        if section and key not in SECTIONS[section]:
            where = f" (it is in [{section_of(key)}])" if key in fields else closest(key, SECTIONS[section])
            raise ConfigError(f"--config {p}: [{section}] has no setting {k!r}{where}; [{section}] has: "
                              + ", ".join(x for x in SECTIONS[section] if x not in NOT_IN_FILE))
        if key not in fields:
            raise ConfigError(f"--config {p}: unknown setting {k!r}{closest(key, fields)}")
        if key == "agent_options" and isinstance(v, dict):
            out["agent_options"] = {**out.get("agent_options", {}), **v}
            continue
        out[key] = v
    return out
