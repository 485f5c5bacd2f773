"""Validity diagnostics: leak, generalization gap, backtest, behaviour checks, combined report."""

from types import SimpleNamespace

from promptevo.optim.diagnostics import (
    BacktestResult,
    Veto,
    backtest,
    backtest_result,
    behaviour_checks,
    behaviour_stats,
    content_ngrams,
    coordinates,
    generalization_gap,
    leak_check,
    missions,
    normalize_observation,
    observations,
    validity,
)

TRAIN = ["go to the red ball", "go to the green key", "go to the purple door"]
HELDOUT = ["go to the blue box", "go to the yellow key", "go to the red door", "go to the grey ball"]
PARENT = "You control a player in BabyAI. Choose the single best next action."


def test_leak_flags_a_hard_coded_training_object():
    v = leak_check("Always go to the red ball first.", PARENT, TRAIN, HELDOUT)
    assert isinstance(v, Veto) and v.check == "leak"
    assert v.details["phrases"] == ["red ball"]  # "the red ball" is not listed again
    assert "'red ball'" in v.reason
    assert "purple door" in leak_check("The purple door is where you go.", PARENT, TRAIN, HELDOUT).details["phrases"]


def test_leak_ignores_generic_instructions_and_shared_phrasing():
    generic = ("Go to the object named in the mission. Turn until the target is in front, then go forward "
               "until it is 1 step forward. Pick up the key you need and open the door.")
    assert leak_check(generic, PARENT, TRAIN, HELDOUT) is None
    # "go to the red" is shared with the held-out "go to the red door"; colours alone are not phrases
    assert leak_check("Go to the red object or the ball.", PARENT, TRAIN, HELDOUT) is None
    # a phrase the parent already has is not introduced by the edit
    assert leak_check("Remember the red ball.", PARENT + " The red ball matters.", TRAIN, HELDOUT) is None
    # a phrase of a held-out mission is not a training-seed specific
    assert leak_check("Go to the grey ball.", PARENT, TRAIN + ["go to the grey ball"], HELDOUT) is None
    # without held-out missions specifics cannot be told apart from phrasing
    assert leak_check("Always go to the red ball.", PARENT, TRAIN, []) is None
    # word boundaries: "red balloon" is not "red ball"
    assert leak_check("Ignore the red balloon.", PARENT, TRAIN, HELDOUT) is None


def test_content_ngrams_skip_stop_word_edges():
    grams = content_ngrams("go to the red ball")
    assert ("red", "ball") in grams
    assert ("to", "the") not in grams and ("the", "red") not in grams and ("go", "to") not in grams
    assert all(g[0] not in {"to", "the"} and g[-1] not in {"to", "the"} for g in grams)


def test_leak_flags_coordinates_copied_from_training_observations():
    obs = ["Step 0 of 25.\n- agent 1: at (0,1), goal a at (4,0); next to it: up edge",
           "Step 1 of 25.\n- agent 1: at (1,1), goal a at (4,0)"]
    v = leak_check("The goal is at (4, 0): go down first.", "Positions are (row, column).", [], ["x"], obs)
    assert v is not None and v.details["coordinates"] == [[4, 0]] and "(4, 0)" in v.reason
    assert leak_check("Head for row 4 col 0.", "", [], ["x"], obs).details["coordinates"] == [[4, 0]]
    # coordinates not in the training observations, or already in the parent, are fine
    assert leak_check("Avoid (7, 7).", "", [], ["x"], obs) is None
    assert leak_check("Start at (0, 1).", "Agents often start at (0,1).", [], ["x"], obs) is None
    # without observations only mission phrases are checked
    assert leak_check("The goal is at (4, 0).", "", [], ["x"]) is None
    assert coordinates("(2,3) and row 5, column 6 and row 1 col 2") == {(2, 3), (5, 6), (1, 2)}


def test_generalization_gap():
    v = generalization_gap(0.5, 0.0)
    assert v is not None and v.check == "generalization_gap" and "+0.500" in v.reason
    assert generalization_gap(0.5, -0.2) is not None
    assert generalization_gap(0.5, 0.1) is None  # it also gained on held-out seeds
    assert generalization_gap(0.05, -0.3) is None  # no real training gain to be suspicious of
    assert generalization_gap(0.5, -0.05, tolerance=-0.1) is None  # small held-out loss forgiven
    assert generalization_gap(0.5, 0.1, tolerance=0.2) is not None  # held-out gain too small
    assert generalization_gap(None, 0.0) is None and generalization_gap(0.5, None) is None


def test_backtest_result_and_veto():
    child = {1: 1.0, 2: 0.0, 3: 0.0, 4: 1.0, 9: 1.0}
    best = {"1": 1.0, "2": 1.0, "3": 1.0, "4": 0.0}  # checkpoint-style string seeds
    r = backtest_result(child, best)
    assert r == BacktestResult(n=4, mean_diff=-0.25, wins=1, losses=2, ties=1, seeds=(1, 2, 3, 4))
    v = backtest(child, best)
    assert v is not None and v.check == "backtest" and v.details["n"] == 4 and v.details["losses"] == 2
    assert "1W/2L/1T" in v.reason and "-0.250" in v.reason
    assert backtest(child, best, tolerance=0.25) is None
    assert backtest(child, best, min_pairs=5) is None  # not enough historical evidence
    assert backtest({1: 0.0}, {2: 1.0}) is None  # no common seed
    assert backtest({1: 1.0, 2: 1.0}, {1: 1.0, 2: 0.0}) is None  # better than the incumbent
    assert backtest({1: 0.5}, {1: 0.5}) is None  # equal is fine at tolerance 0


def _ep(actions, obs=None, invalid=None, **kw):
    obs = obs or [f"o{i}" for i in range(len(actions))]
    traj = [{"t": i, "observation": o, "action": a, "valid": invalid is None or i not in invalid}
            for i, (o, a) in enumerate(zip(obs, actions))]
    return {"steps": len(actions), "invalid_actions": len(invalid or ()), "trajectory": traj, **kw}


def test_behaviour_flags_more_invalid_actions():
    parent = [_ep(["go forward"] * 10)]
    child = [_ep(["go forward"] * 10, invalid={0, 1, 2})]
    vetoes = behaviour_checks(child, parent)
    assert [v.check for v in vetoes] == ["invalid_actions"]
    assert "30.0%" in vetoes[0].reason and vetoes[0].details["child"]["invalid"] == 3
    assert behaviour_checks(child, parent, max_invalid_increase=0.3) == []
    assert behaviour_checks(parent, child) == []  # fewer invalid actions is never a problem


def test_behaviour_flags_loops_and_ignores_step_counters():
    parent = [_ep(["turn left", "go forward", "go forward", "pick up"], obs=["a", "b", "c", "d"])]
    # the same two (observation, action) pairs over and over; MAPF-style step counters differ each step
    obs = [f"Step {i} of 25. agent 1 at (0,1)" if i % 2 == 0 else f"Step {i} of 25. agent 1 at (0,2)" for i in range(8)]
    child = [_ep(["right", "left"] * 4, obs=obs)]
    stats = behaviour_stats(child)
    assert stats.traj_steps == 8 and stats.repeats == 6 and stats.loop_rate == 0.75
    vetoes = behaviour_checks(child, parent)
    assert [v.check for v in vetoes] == ["loops"] and "75.0%" in vetoes[0].reason
    assert normalize_observation("Step 3 of 25. x\n y") == "x y"
    # the same observation with a different action is not a loop
    assert behaviour_stats([_ep(["a", "b", "c"], obs=["s", "s", "s"])]).repeats == 0


def test_behaviour_accepts_objects_fallbacks_and_skips_errors():
    obj = SimpleNamespace(steps=None, invalid_actions=None, error=None,
                          trajectory=[{"observation": "x", "action": "a", "valid": False},
                                      {"observation": "x", "action": "a", "valid": True}])
    errored = {"error": "LLMError", "steps": 50, "invalid_actions": 50, "trajectory": []}
    s = behaviour_stats([obj, errored])
    assert (s.episodes, s.steps, s.invalid, s.repeats) == (1, 2, 1, 1)
    # no trajectories on one side: only the invalid-action rate is compared
    bare = [{"steps": 10, "invalid_actions": 0}]
    assert behaviour_checks([_ep(["a"] * 10, obs=["s"] * 10)], bare) == []
    assert behaviour_checks([], []) == []


def test_missions_and_observations_helpers():
    eps = [{"mission": "go to the red ball", "trajectory": [{"observation": "o1"}, {"observation": "o2"}]},
           SimpleNamespace(mission="go to the red ball", trajectory=[{"observation": "o3"}]),
           {"mission": "open the door"}]
    assert missions(eps) == ["go to the red ball", "open the door"]
    assert observations(eps) == ["o1", "o2", "o3"]


def test_validity_combines_the_checks_that_have_inputs():
    empty = validity()
    assert empty.ok and empty.checks == [] and empty.to_dict()["vetoes"] == []
    good = validity(edit_text="Face the target first.", parent_text=PARENT, train_missions=TRAIN,
                    heldout_missions=HELDOUT, train_diff=0.3, heldout_diff=0.2,
                    backtest_child={1: 1.0}, backtest_best={1: 1.0},
                    child_episodes=[_ep(["a", "b"])], parent_episodes=[_ep(["a", "b"])])
    assert good.ok and good.checks == ["leak", "generalization_gap", "backtest", "behaviour"]
    assert good.backtest is not None and good.backtest.n == 1
    assert good.summary().startswith("valid")
    bad = validity(edit_text="Always go to the red ball.", parent_text=PARENT, train_missions=TRAIN,
                   heldout_missions=HELDOUT, train_diff=0.5, heldout_diff=-0.1,
                   backtest_child={1: 0.0, 2: 0.0}, backtest_best={1: 1.0, 2: 0.0})
    assert not bad.ok
    assert [v.check for v in bad.vetoes] == ["leak", "generalization_gap", "backtest"]
    d = bad.to_dict()
    assert d["ok"] is False and d["backtest"]["mean_diff"] == -0.5 and len(d["vetoes"]) == 3
    assert "leak:" in bad.summary() and "backtest:" in bad.summary()


def test_leak_check_on_real_babyai_missions_and_the_guided_prompts():
    from pathlib import Path

    from promptevo.segments import PromptSet
    from promptevo.tasks import load_task, make_env

    task = load_task("goto")
    env = make_env(task)
    try:
        train = [env.reset(s)[1]["mission"] for s in task.seed_list("train")[:10]]
        heldout = [env.reset(s)[1]["mission"] for s in task.seed_list("validation")[:10]]
    finally:
        env.close()
    guided = PromptSet.load(Path(__file__).resolve().parent.parent / "prompts/babyai/guided/two-stage.md")
    text = "\n".join(s.text for _, p in guided.modules for s in p.segments)
    assert leak_check(text, "", train, heldout) is None  # hand-written generic prompts are not leaks
    only_train = [" ".join(m.split()[-2:]) for m in train if not any(" ".join(m.split()[-2:]) in h for h in heldout)]
    assert only_train, "expected some training object that no held-out mission names"
    v = leak_check(f"Always go to the {only_train[0]}.", text, train, heldout)
    assert v is not None and v.details["phrases"] == [only_train[0]]
