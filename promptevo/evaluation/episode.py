"""One played episode: :class:`EpisodeResult` (what the rollout returns and the store keeps)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class EpisodeResult:
    task: str
    seed: int
    mission: str
    success: bool
    progression: float
    return_: float
    steps: int
    invalid_actions: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    llm_calls: int
    wall_s: float
    env_stats: dict = field(default_factory=dict)
    trajectory: list[dict] = field(default_factory=list)
    error: str | None = None
    parse_failures: int = 0
    cached_calls: int = 0
    agent: str = ""
    truncated: bool = False
    faults: dict = field(default_factory=dict)  # empty_replies, call_errors, clipped_texts, length_truncated
    progress: float | None = None  # the env's dense progress estimate at the end (None: the env has none)
    failure: str | None = None  # why an episode failed early without an error (e.g. context overflow)
    loop_cut: dict | None = None  # {"at", "first", "period", "replayed_steps"} when the loop cut-off replayed

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["return"] = d.pop("return_")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeResult":
        d = dict(d)
        if "return" in d:
            d["return_"] = d.pop("return")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def without_trajectory(self) -> "EpisodeResult":
        return EpisodeResult.from_dict({**self.to_dict(), "trajectory": []})
