"""Proposal operators: LLM mutator, pruner, skill library, hint library, crossover."""
