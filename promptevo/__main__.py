"""``python -m promptevo``: the command line."""

from promptevo.cli import main

main()
