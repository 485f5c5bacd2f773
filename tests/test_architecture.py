"""The package's shape: no import cycles, no use of another module's private names, no huge modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "promptevo"
MAX_LINES = 700


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(path: Path, name: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) for every import in the file, nested ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("promptevo"):
                    out.append((a.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([mod] if mod else []))
            if not mod.startswith("promptevo"):
                continue
            names = [a.name for a in node.names]
            # 'from promptevo.llm import local' imports the submodule promptevo.llm.local
            subs = [f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES]
            if subs:
                out += [(s, [], node.lineno) for s in subs]
                rest = [n for n in names if f"{mod}.{n}" not in MODULES]
                if rest:
                    out.append((mod, rest, node.lineno))
            else:
                out.append((mod, names, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for mod, _, _ in _imports(path, name):
            if mod in MODULES and mod != name and not (mod == "promptevo" and name.count(".") >= 1):
                deps.add(mod)
        g[name] = deps
    return g


def test_no_import_cycles():
    """No module imports (at any depth, lazily or not) a module that imports it back. The package root
    ``promptevo`` (the public API, loaded lazily) is left out: every module is inside it."""
    g = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in g:
        if v not in index:
            strong(v)
    assert not sccs, f"import cycles: {sccs}"


def test_no_private_names_across_modules():
    bad = []
    for name, path in MODULES.items():
        for mod, names, line in _imports(path, name):
            if mod == name:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{path.relative_to(PKG.parent)}:{line} imports {mod}.{n}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_over_700_lines(name):
    n = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{name} has {n} lines (split it by concept)"


#: the floors: a package never imports the ones listed for it (at any depth, lazily or not)
FORBIDDEN = {
    "promptevo.envs": ("promptevo.optim", "promptevo.api", "promptevo.cli", "promptevo.reporting",
                       "promptevo.baselines", "promptevo.evaluation", "promptevo.agents", "promptevo.tasks"),
    "promptevo.llm": ("promptevo.optim", "promptevo.api", "promptevo.cli", "promptevo.reporting",
                      "promptevo.evaluation", "promptevo.envs", "promptevo.baselines"),
    "promptevo.evaluation": ("promptevo.optim", "promptevo.api", "promptevo.cli", "promptevo.reporting",
                             "promptevo.baselines"),
    # the optimizer is below the API: nothing in it runs back up (curriculum, which does, lives beside api)
    "promptevo.optim": ("promptevo.api", "promptevo.cli", "promptevo.baselines", "promptevo.curriculum"),
}


def test_floors_hold_and_nothing_imports_the_cli():
    bad = []
    for name, path in MODULES.items():
        for mod, _, line in _imports(path, name):
            where = f"{path.relative_to(PKG.parent)}:{line} imports {mod}"
            if mod.startswith("promptevo.cli") and not name.startswith(("promptevo.cli", "promptevo.__main__")):
                bad.append(where + " (nothing below the command line imports it)")
            for pkg, banned in FORBIDDEN.items():
                if name.startswith(pkg) and mod.startswith(banned):
                    bad.append(where)
    assert not bad, "\n".join(bad)
