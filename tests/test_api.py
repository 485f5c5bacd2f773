"""The public Python API: promptevo.optimize / evaluate / register_env / register_agent, the README's
example, gymnasium registration on import, and the third game (toy-text) driven through the API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import promptevo
from promptevo.llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]


def test_public_api_is_importable_and_documented():
    for name in ("optimize", "evaluate", "register_env", "register_agent", "PromptSet", "OptimizeConfig"):
        obj = getattr(promptevo, name)
        assert obj.__doc__, name
    out = subprocess.run([sys.executable, "-c", "import promptevo; help(promptevo.optimize)"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "test split" in out.stdout


def test_import_promptevo_registers_the_gymnasium_env():
    code = ("import promptevo, gymnasium\n"
            "env = gymnasium.make('promptevo/MAPFFrozenLake-v0', preset='single')\n"
            "obs, info = env.reset(seed=3)\n"
            "print(type(obs).__name__, 'mission' in info)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["str", "True"]


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Python API"):]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = _readme_example()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "0.0"  # the initial agent walks left
    best_id, rate = lines[-1].split()[:2]
    assert best_id == "c1" and float(rate) == 1.0


def test_register_agent_makes_an_agent_available_everywhere(tmp_path):
    from promptevo.agents import make_agent, register_agent
    from promptevo.agents.base import AgentError
    from promptevo.agents.random_agent import RandomAgent

    class AlwaysFirst(RandomAgent):
        name = "always-first"

        def act(self, observation, info):
            from promptevo.agents.base import Decision

            return Decision(action=self.space.valid[0], reply="", calls=[], parsed=True)

    register_agent("always-first", AlwaysFirst, description="the first valid action", needs_llm=False,
                   replace=True)
    summary = promptevo.evaluate("frozenlake", agent="always-first", episodes=3)
    assert summary["n"] == 3 and summary["success_rate"] == 0.0
    assert make_agent("always-first", None).name == "always-first"
    with pytest.raises(AgentError, match="already registered"):
        register_agent("always-first", AlwaysFirst)
    with pytest.raises(AgentError, match="must match"):
        register_agent("Bad Name", AlwaysFirst)


def _toytext_llm(messages, params):
    first = messages[0]["content"]
    if '"edits"' in first:  # mutator: add a rule that makes the actor walk the right way
        return json.dumps({"edits": [{"module": "actor", "op": "add", "segment": "route",
                                      "text": "Route: right, right, down, down, down, right.",
                                      "rationale": "the agent walks into the top-left corner"}]})
    if '"attributions"' in first:
        return json.dumps({"attributions": [], "failure_modes": ["stuck at the start"], "proposals": []})
    if "Route:" in first and messages[0]["role"] == "system" and "choose the next action" in first:
        line = next((x for x in messages[-1]["content"].splitlines() if x.startswith("Recent actions")), "")
        steps = len(line.split(":", 1)[1].split(",")) if "oldest first" in line else 0
        route = ["right", "right", "down", "down", "down", "right"]
        return f"<|ACTION|>{route[min(steps, 5)]}<|END|>"
    if "choose the next action" in first:
        return "<|ACTION|>left<|END|>"
    return "You are somewhere on the lake."  # the descriptor


def test_optimize_and_evaluate_on_the_toytext_game(tmp_path):
    """The third game, added as one module + task files + prompt files, runs through optimize and eval."""
    with ScriptedLLM.install(_toytext_llm):
        res = promptevo.optimize(task="frozenlake", agent="two-stage", model="fake/scripted", generations=1,
                                 children=1, episodes=8, evidence_episodes=4, validation_episodes=12,
                                 test_episodes=6, baseline=None, results_dir=str(tmp_path), run="fl", quiet=True,
                                 agent_options={"recent_actions": 8}, no_cache=True, operators=["mutate"],
                                 screen="off")
        summary = promptevo.evaluate("frozenlake", agent="two-stage", model="fake/scripted", episodes=3,
                                     prompts=res.best_prompts, recent_actions=8, no_cache=True)
    rows = {r["name"].split(" ")[0]: r for r in res.report["rows"]}
    assert rows["initial"]["success_rate"] == 0.0 and rows["best"]["success_rate"] == 1.0
    assert res.report["test_split"]["n"] == 6
    assert summary["split"] == "test" and summary["success_rate"] == 1.0


def test_optimize_cli_on_the_toytext_game_with_the_test_double(tmp_path):
    code = ("import sys\nfrom promptevo.cli import main\n"
            "from promptevo.llm import ScriptedLLM\n"
            "sys.path.insert(0, %r)\n"
            "from test_api import _toytext_llm\n"
            "with ScriptedLLM.install(_toytext_llm):\n"
            "    sys.argv = ['promptevo', 'optimize', '--task', 'frozenlake', '--model', 'fake/scripted', '-g', '1',"
            " '-k', '1', '-n', '8', '--evidence-episodes', '4', '--validation-episodes', '8', '--test-episodes', '4',"
            " '--baseline', 'none', '--no-cache', '--results-dir', %r, '--run', 'cli']\n"
            "    main()\n") % (str(ROOT / "tests"), str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    ck = json.loads((tmp_path / "cli" / "checkpoint.json").read_text())
    s = ck["splits"]
    assert s["test"] and s["validation"] and s["train"]
    assert not set(s["train"]) & set(s["validation"]) and not set(s["validation"]) & set(s["test"])
    assert "Test split: n = 4" in out.stdout + out.stderr or "Test split: n = 4" in (tmp_path / "cli" / "report.md").read_text()


def test_evaluate_a_list_of_tasks_writes_one_run_and_resumes(tmp_path):
    """``promptevo eval`` is this call: a list of tasks gives per-task rows and an overall one, the run folder
    is refused a second time unless ``resume``, which plays only the seeds not yet finished."""
    from promptevo.api import EvalError

    seen: list[tuple[str, int, int]] = []
    ended: list[str] = []
    s = promptevo.evaluate(["goto", "pickup"], agent="random", episodes=2, split="train", results_dir=tmp_path,
                           run_name="two", on_task=lambda name, total, done: seen.append((name, total, done)),
                           on_result=lambda name, r: ended.append(name))
    assert sorted(s["tasks"]) == ["goto", "pickup"] and s["overall"]["n"] == 4 and s["complete"]
    assert seen == [("goto", 2, 0), ("pickup", 2, 0)] and ended == ["goto", "goto", "pickup", "pickup"]
    assert "success_rate" not in s  # per task only: a list has no single task's figures at the top
    with pytest.raises(EvalError, match="already has episodes"):
        promptevo.evaluate("goto", agent="random", episodes=2, split="train", results_dir=tmp_path, run_name="two")
    seen.clear()
    one = promptevo.evaluate("goto", agent="random", episodes=3, split="train", results_dir=tmp_path, run_name="two",
                             resume=True, on_task=lambda name, total, done: seen.append((name, total, done)))
    assert seen == [("goto", 3, 2)] and one["n"] == 3 and one["seeds"] == [0, 1, 2]
    assert len((tmp_path / "two" / "episodes.jsonl").read_text().splitlines()) == 5
    with pytest.raises(EvalError, match="--seeds must be"):
        promptevo.evaluate("goto", agent="random", split="dev")
