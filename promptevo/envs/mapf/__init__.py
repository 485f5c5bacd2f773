"""MAPF-FrozenLake: generator, optimal solver, text env (and gymnasium env), curriculum."""
