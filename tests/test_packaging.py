"""Packaging: the task configs and prompts (top-level ``tasks/`` and ``prompts/`` of the repository) are
found through :mod:`promptevo.resources`, ship inside the wheel, and can be replaced by a user's folders.

The fast tests run against the installed promptevo (an editable install in development and CI). The slow
ones build a wheel from a clean copy of the source tree and install it (and an editable install) into a
fresh virtual environment outside the repository, then look for every file again from another folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from promptevo import resources
from promptevo.resources import PROMPTS_ENV, TASKS_ENV, ResourceError

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def found_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def repo_files(name: str) -> list[str]:
    return found_files(REPO / name)


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    """No user folder during a test, and whatever a test (or use_dirs) sets is undone after it."""
    for var in (TASKS_ENV, PROMPTS_ENV):
        monkeypatch.setenv(var, "")  # records the value before the test, restored after it
        monkeypatch.delenv(var)


def test_every_task_and_prompt_file_is_found_through_resources():
    assert found_files(resources.tasks_dir()) == repo_files("tasks") != []
    assert found_files(resources.prompts_dir()) == repo_files("prompts") != []
    assert resources.tasks_dir() == resources.shipped_tasks_dir()
    assert resources.prompts_dir() == resources.shipped_prompts_dir()
    from promptevo.tasks import list_tasks, load_task

    names = list_tasks()
    assert names == sorted(p.stem for p in (REPO / "tasks").glob("*.toml"))
    for name in names:
        assert load_task(name).name == name
    from promptevo.segments import PromptSet

    for rel in repo_files("prompts"):
        if rel.endswith(".md"):
            assert PromptSet.load(resources.prompts_dir() / rel).modules, rel


def test_package_data_covers_every_file_and_every_package_is_listed():
    st = PYPROJECT["tool"]["setuptools"]
    assert st["package-dir"] == {"promptevo._data.tasks": "tasks", "promptevo._data.prompts": "prompts"}
    data = st["package-data"]
    for pkg, folder in (("promptevo._data.tasks", "tasks"), ("promptevo._data.prompts", "prompts")):
        suffixes = {g.rsplit("*", 1)[-1] for g in data[pkg]}
        missed = [f for f in repo_files(folder) if not any(f.endswith(s) for s in suffixes)]
        assert not missed, f"add a glob for these files to [tool.setuptools.package-data] {pkg}: {missed}"
    assert "llm/data/*.toml" in data["promptevo"]
    have = {p.parent.relative_to(REPO).as_posix().replace("/", ".") for p in (REPO / "promptevo").rglob("__init__.py")}
    listed = set(st["packages"]) - {"promptevo._data.tasks", "promptevo._data.prompts"}
    assert have - listed == set(), f"add to [tool.setuptools] packages in pyproject.toml: {have - listed}"
    assert listed - have == set(), f"listed in pyproject.toml but not packages: {listed - have}"


def test_extras_and_dependencies():
    proj = PYPROJECT["project"]
    assert any(d.startswith("matplotlib") for d in proj["dependencies"])
    assert proj["optional-dependencies"]["mlflow"] == ["mlflow>=2.10"]
    assert "mlflow>=2.10" in proj["optional-dependencies"]["dev"]


def test_local_models_data_is_a_package_resource():
    from importlib import resources as ir

    text = ir.files("promptevo.llm").joinpath("data/local_models.toml").read_text(encoding="utf-8")
    assert tomllib.loads(text)


def test_user_folders_replace_the_shipped_ones(tmp_path, monkeypatch):
    from promptevo.tasks import TaskError, list_tasks, load_task

    tasks = tmp_path / "my tasks"
    tasks.mkdir()
    goto = (REPO / "tasks" / "goto.toml").read_text()
    (tasks / "mine.toml").write_text(goto.replace('name = "goto"', 'name = "mine"'))
    prompts = tmp_path / "my prompts"
    prompts.mkdir()
    resources.use_dirs(tasks=tasks, prompts=prompts)
    assert os.environ[TASKS_ENV] == str(tasks.resolve()) and os.environ[PROMPTS_ENV] == str(prompts.resolve())
    assert resources.tasks_dir() == tasks.resolve() and resources.prompts_dir() == prompts.resolve()
    assert list_tasks() == ["mine"] and load_task("mine").name == "mine"
    with pytest.raises(TaskError):
        load_task("goto")  # the shipped folder is replaced, not merged
    # a needed prompt file missing from the user's folder: one line naming the folder and the file
    from promptevo.agents.registry import AgentError, default_prompt_path

    with pytest.raises(AgentError) as e:
        default_prompt_path("two-stage", load_task("mine"), "plain")
    msg = str(e.value)
    assert "\n" not in msg and str(prompts.resolve() / "babyai" / "plain" / "two-stage.md") in msg
    from promptevo.optim.reflect.llm_json import TemplateError, load_template

    with pytest.raises(TemplateError) as e:
        load_template("analyzer")
    msg = str(e.value)
    assert "\n" not in msg and str(prompts.resolve() / "optimizer" / "analyzer.md") in msg
    # one folder at a time; a missing folder changes nothing
    monkeypatch.delenv(PROMPTS_ENV)
    with pytest.raises(ResourceError, match=r"^--prompts-dir .*nope: no such folder$"):
        resources.use_dirs(tasks=REPO / "tasks", prompts=tmp_path / "nope")
    assert os.environ[TASKS_ENV] == str(tasks.resolve()) and PROMPTS_ENV not in os.environ
    resources.use_dirs(prompts=REPO / "prompts")
    assert resources.prompts_dir() == (REPO / "prompts").resolve() and resources.tasks_dir() == tasks.resolve()


# -- slow: a real wheel and a real editable install, in a fresh venv outside the repository ------------


CHECK = r"""
import json, sys
from pathlib import Path
import promptevo, promptevo.resources as r
from promptevo.tasks import list_tasks

def files(d):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() and "__pycache__" not in p.parts)

from importlib import resources as ir
ir.files("promptevo.llm").joinpath("data/local_models.toml").read_text()
print(json.dumps({"package": promptevo.__file__, "tasks": files(r.tasks_dir()), "prompts": files(r.prompts_dir()),
                  "list": list_tasks()}))
"""


def _copy_source(dest: Path) -> Path:
    """The files git would commit (tracked and not ignored), copied: a build from it has no stale output."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                         check=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src = REPO / rel
        if src.is_file() and not rel.startswith("results/"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    return dest


def _venv(path: Path) -> Path:
    """A fresh venv that reuses this interpreter's installed dependencies (a .pth line), so that no
    dependency is downloaded: promptevo itself is what is installed into it."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    py = path / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "zz_promptevo_test_deps.pth").write_text("\n".join(deps) + "\n")
    return py


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wheel", "editable"])
def test_install_finds_every_file(kind, tmp_path):
    src = _copy_source(tmp_path / "src")
    py = _venv(tmp_path / "venv")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop(TASKS_ENV, None)
    env.pop(PROMPTS_ENV, None)
    if kind == "wheel":
        subprocess.run([str(py), "-m", "pip", "wheel", str(src), "-w", str(tmp_path / "dist"), "--no-deps", "-q"],
                       check=True, env=env, timeout=300)
        (wheel,) = (tmp_path / "dist").glob("promptevo-*.whl")
        names = set(zipfile.ZipFile(wheel).namelist())
        for folder in ("tasks", "prompts"):
            missing = [f for f in repo_files(folder) if f"promptevo/_data/{folder}/{f}" not in names]
            assert not missing, missing
        assert "promptevo/llm/data/local_models.toml" in names
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, env=env,
                       timeout=300)
    else:
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "-e", str(src)], check=True, env=env,
                       timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = subprocess.run([str(py), "-c", CHECK], cwd=work, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    pkg = Path(got["package"])
    if kind == "wheel":
        assert tmp_path / "venv" in pkg.parents  # the installed copy, not the repository
    else:
        assert pkg == src / "promptevo" / "__init__.py"
    assert got["tasks"] == repo_files("tasks") and got["prompts"] == repo_files("prompts")
    assert got["list"] == sorted(p.stem for p in (REPO / "tasks").glob("*.toml"))
