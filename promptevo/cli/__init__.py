"""Command line interface: ``promptevo eval | tasks | models | optimize | curriculum | compare | export | report``."""

from promptevo.cli.app import app, main

__all__ = ["app", "main"]
