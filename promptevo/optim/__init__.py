"""The optimizer: adapter interface, engine, selection, run state, reflection and proposal operators."""
