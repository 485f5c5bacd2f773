"""Reflection: the evidence proposers read (LLM analysis, evidence cards, behaviour signatures, ablation)."""
