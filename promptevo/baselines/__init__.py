"""Baselines to compare with: DSPy GEPA at an equal budget, and the comparison driver."""
