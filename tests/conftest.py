"""Shared test set-up: keep LiteLLM offline before anything imports it."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import promptevo  # noqa: E402,F401  (sets the offline defaults before litellm is imported)
