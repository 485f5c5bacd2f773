"""BabyAI's names, without importing minigrid: goals, actions, feedback styles (used to check task files)."""

from __future__ import annotations

#: The five BALROG BabyAI goals (task names after ``BabyAI-MixedTrainLocal-v0/``).
BABYAI_GOALS: tuple[str, ...] = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")

#: Text actions, index = minigrid action id (``done`` is not exposed).
ACTIONS: tuple[str, ...] = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
DEFAULT_ACTION = "go forward"

#: Feedback prefixes BALROG puts before the observation after an invalid action ("current" since
#: BALROG commit c347aa8, 2025-01; "legacy" before, used by the 2024 leaderboard runs).
FEEDBACK_STYLES: tuple[str, ...] = ("current", "legacy")
