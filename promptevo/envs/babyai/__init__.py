"""BabyAI as a text game, exactly as BALROG renders it (levels, egocentric view, text env, bot)."""

from promptevo.envs.babyai import family  # noqa: F401  (registers the env family "babyai")
