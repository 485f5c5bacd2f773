"""MAPF-FrozenLake: generator, optimal solver, text env (and gymnasium env), curriculum."""

from promptevo.envs.mapf import family  # noqa: F401  (registers the env family "mapf")
