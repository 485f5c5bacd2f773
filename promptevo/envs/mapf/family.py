"""The ``mapf`` env family: task parameters ``preset`` (a preset in ``tasks/mapf/``) and any generator
knobs of :class:`~promptevo.envs.mapf.generator.MAPFConfig` (``rows = 4``, ``slip_prob = 0.1``, ...),
merged over the preset."""

from __future__ import annotations

from typing import Any

from promptevo.envs.base import TextEnv
from promptevo.envs.mapf.generator import MAPFConfig, MAPFConfigError, load_mapf_preset, make_mapf_config
from promptevo.envs.registry import register_env


def mapf_config(params: dict[str, Any]) -> MAPFConfig:
    """The effective generator config of a MAPF task's ``[env]`` table: its preset with the knobs merged
    over it. Raises MAPFConfigError (one line)."""
    preset = params.get("preset")
    if not preset:
        raise MAPFConfigError("family 'mapf' needs preset (a preset name in tasks/mapf/)")
    knobs = {k: v for k, v in params.items() if k != "preset"}
    unknown = [k for k in knobs if k not in MAPFConfig.model_fields]
    if unknown:
        raise MAPFConfigError(f"unknown MAPF knob {unknown[0]!r} (valid knobs: {', '.join(MAPFConfig.model_fields)})")
    base = load_mapf_preset(preset)
    if not knobs:
        return base
    return make_mapf_config({**base.model_dump(), **knobs}, f"{preset!r} + knobs")


def check(params: dict[str, Any]) -> dict[str, Any]:
    mapf_config(params)  # raises MAPFConfigError (a ValueError) on a bad preset or knob
    return dict(params)


def params_for(config: MAPFConfig, preset: str) -> dict[str, Any]:
    """``[env]`` parameters whose effective config is exactly ``config`` (preset kept as the named base)."""
    return {"preset": preset, **config.model_dump()}


def make(params: dict[str, Any]) -> TextEnv:
    from promptevo.envs.mapf.env import MAPFFrozenLakeEnv  # gymnasium is imported only to play

    return MAPFFrozenLakeEnv(mapf_config(params))


register_env("mapf", make, check=check, description="MAPF-FrozenLake: multi-agent path finding on a frozen lake")
