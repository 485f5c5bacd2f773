"""Plugins from other packages: the modules an entry-point group names, imported on demand (each registers
what it brings when imported: an env family, an operator...)."""

from __future__ import annotations

from importlib import metadata


def entry_point_names(group: str) -> list[str]:
    """Names in entry-point ``group`` (none when another package's metadata is broken)."""
    try:
        return [ep.name for ep in metadata.entry_points(group=group)]
    except Exception:  # noqa: BLE001 - broken metadata of another package must not break promptevo
        return []


def load_entry_points(group: str, error: type[Exception], what: str, name: str | None = None) -> None:
    """Import the entry points of ``group`` (only ``name`` when given); one that fails raises ``error``
    with one line naming it (``what``: "env family", "operator")."""
    try:
        eps = metadata.entry_points(group=group)
    except Exception:  # noqa: BLE001 - broken metadata of another package must not break promptevo
        return
    for ep in eps:
        if name is None or ep.name == name:
            try:
                ep.load()
            except Exception as e:  # noqa: BLE001 - name the package that failed
                raise error(f"{what} {ep.name!r} from entry point {ep.value!r} failed to load: "
                            f"{type(e).__name__}: {e}") from None


__all__ = ["entry_point_names", "load_entry_points"]
