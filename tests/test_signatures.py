"""Behaviour signatures (promptevo.evaluation.signatures and the BabyAI detectors) on hand-made
trajectories: every detector fires on its pattern and stays quiet on a near miss."""

from __future__ import annotations

import json
import logging

import pytest

from promptevo.envs.babyai.signatures import (
    Target,
    detect,
    parse_mission,
    parse_observation,
)
from promptevo.envs.registry import register_env
from promptevo.evaluation.rollout import EpisodeResult
from promptevo.envs.behaviour import STEPS_PER_SEED, STEPS_TOTAL, Occurrence, Signature, clean_observation
from promptevo.evaluation.signatures import render_signatures, signatures_to_dict, summarize_signatures

FEEDBACK = ("\n\nYour previous output did not contain a valid action. Defaulted to action: go forward\n\n"
            "Observation:\n")


def episode(seed, steps, *, mission="go to the grey key", success=False, **extra):
    """An episode dict from (observation, action) pairs or step dicts (missing keys filled in)."""
    traj = []
    for t, s in enumerate(steps):
        if isinstance(s, tuple):
            s = {"observation": s[0], "action": s[1]}
        rec = {"t": t, "executed_action": s["action"], "parsed": True, "valid": True, "reward": 0.0, "done": False}
        rec.update(s)
        traj.append(rec)
    return {"task": "t", "seed": seed, "mission": mission, "success": success, "trajectory": traj, **extra}


def kinds(sigs):
    return {s.kind: s for s in sigs}


def generic(eps):
    return kinds(summarize_signatures(eps))


# -- observation cleaning --------------------------------------------------------------------------------
def test_clean_observation_strips_feedback_events_and_counters():
    assert clean_observation(FEEDBACK + "a wall 2 steps left") == "a wall 2 steps left"
    legacy = "\n\nYour previous output action: 'run\naway' is not a valid action. Defaulted to action: go forward\n"
    assert clean_observation(legacy + "a wall 2 steps left") == "a wall 2 steps left"
    mapf = "Step 3 of 40. Agents home: 0 of 1.\nLast step: agent 1 hit a wall going up.\nMap:\n. 1 ."
    assert clean_observation(mapf) == clean_observation("Step 4 of 40. Agents home: 0 of 1.\nMap:\n. 1 .")
    assert clean_observation(None) is None
    assert clean_observation("") == ""


# -- generic detectors ------------------------------------------------------------------------------------
def test_repeated_state_run_and_cycle():
    run = episode(1, [("a", "turn left"), ("x", "toggle"), ("x", "toggle"), ("x", "drop"), ("b", "go forward")])
    sig = generic([run])["repeated_state"]
    assert sig.seeds == [1] and sig.steps == ["S1.1"] and "3 steps in a row" in sig.detail
    cycle = episode(2, [("a", "go forward"), ("b", "turn left"), ("a", "go forward"), ("b", "turn left"),
                        ("a", "go forward")])
    sig = generic([cycle])["repeated_state"]
    assert sig.count == 2 and sig.steps == ["S2.2", "S2.4"]  # one per trip round the 2-step cycle
    assert "repeated_state" not in generic([episode(3, [("a", "go forward"), ("b", "go forward"), ("a", "turn left")])])


def test_no_effect_action_ignores_turns_and_waits_and_feedback():
    ep = episode(4, [("a wall 1 step forward", "go forward"), (FEEDBACK + "a wall 1 step forward", "turn left"),
                     ("a wall 1 step forward", "stay"), ("a wall 1 step forward", "pick up"),
                     ("a wall 1 step forward", "go forward"), ("b", "x")])
    sig = generic([ep])["no_effect_action"]
    assert sig.steps == ["S4.0", "S4.3"] and sig.count == 2  # not the turn (S4.1), the stay (S4.2) or S4.4
    mapf = episode(5, [("Step 0 of 9.\n1 .", "agent 1: up, agent 2: stay"), ("Step 1 of 9.\nLast step: bump.\n1 .", "up")],
                   mission="m")
    assert generic([mapf])["no_effect_action"].steps == ["S5.0"]
    assert "no_effect_action" not in generic([episode(6, [("a", "agent 1: stay, agent 2: wait"), ("a", "up")])])


def test_turn_oscillation_alternation_and_spin():
    alt = episode(7, [(str(i), a) for i, a in enumerate(["go forward", "turn left", "turn right", "turn left", "go forward"])])
    sig = generic([alt])["turn_oscillation"]
    assert sig.steps == ["S7.1"] and "alternated 3 times" in sig.detail
    assert "turn_oscillation" not in generic([episode(8, [("a", "turn left"), ("b", "turn right"), ("c", "go forward")])])
    spin = episode(9, [(str(i), "turn right") for i in range(4)])
    sig = generic([spin])["turn_oscillation"]
    assert sig.steps == ["S9.0"] and "spinning" in sig.detail
    moves = episode(10, [("a", "left"), ("b", "right"), ("c", "left"), ("d", "right")], mission="m")
    assert generic([moves])["turn_oscillation"].count == 1


def test_invalid_and_unparsed_steps():
    ep = episode(11, [{"observation": "a", "action": "fly", "executed_action": "go forward", "valid": False},
                      {"observation": "b", "action": "go forward", "parsed": False, "reply": "I think... hmm"},
                      ("c", "turn left")])
    found = generic([ep])
    assert found["invalid_action"].steps == ["S11.0"] and "'fly'" in found["invalid_action"].detail
    assert found["unparsed_reply"].steps == ["S11.1"]


def test_stuck_repeating_action_needs_eight_and_no_success():
    eight = episode(12, [(str(i), "go forward") for i in range(8)] + [("z", "turn left")])
    assert generic([eight])["stuck_repeating_action"].steps == ["S12.0"]
    seven = episode(13, [(str(i), "go forward") for i in range(7)])
    assert "stuck_repeating_action" not in generic([seven])
    won = episode(14, [(str(i), "go forward") for i in range(8)], success=True)
    assert "stuck_repeating_action" not in generic([won])


def test_aggregation_citations_shares_and_order():
    many = [episode(s, [("a wall 1 step forward", "go forward")] * 6 + [("b", "turn left")]) for s in range(6)]
    rare = episode(99, [("x", "fly"), ("y", "turn left")])
    rare["trajectory"][0]["valid"] = False
    sigs = summarize_signatures(many + [rare])
    by = kinds(sigs)
    ne = by["no_effect_action"]
    assert ne.count == 30 and ne.episodes == 6 and ne.share == pytest.approx(6 / 7)
    assert len(ne.steps) == STEPS_TOTAL and ne.steps[:STEPS_PER_SEED + 1] == ["S0.0", "S0.1", "S0.2", "S1.0"]
    assert by["invalid_action"].seeds == [99] and by["invalid_action"].share == pytest.approx(1 / 7)
    assert [s.share for s in sigs] == sorted((s.share for s in sigs), reverse=True)
    assert sigs[-1].kind == "invalid_action"


def test_accepts_episode_results_and_empty_input():
    res = EpisodeResult.from_dict({**episode(15, [("a", "go forward"), ("a", "go forward")]), "return": 0.0,
                                   "progression": 0.0, "steps": 2, "invalid_actions": 0, "prompt_tokens": 0,
                                   "completion_tokens": 0, "cost": 0.0, "llm_calls": 0, "wall_s": 0.0})
    assert kinds(summarize_signatures([res]))["no_effect_action"].seeds == [15]
    assert summarize_signatures([]) == []
    assert render_signatures([]) == ""


# -- BabyAI detectors --------------------------------------------------------------------------------------
def test_parse_mission_forms():
    assert parse_mission("go to the grey key") == [Target("goto", "grey", "key")]
    assert parse_mission("pick up the blue ball") == [Target("pickup", "blue", "ball")]
    assert parse_mission("open the door") == [Target("open", None, "door")]
    assert parse_mission("put the red ball next to the blue box") == [Target("pickup", "red", "ball"),
                                                                       Target("putnext", "blue", "box")]
    assert parse_mission("pick up a ball, then go to the grey key") == [Target("pickup", None, "ball", True),
                                                                         Target("goto", "grey", "key")]
    assert parse_mission("go to the yellow key after you pick up the blue ball") == [
        Target("pickup", "blue", "ball", True), Target("goto", "yellow", "key")]
    assert parse_mission("win the game") == []


def test_parse_observation_lines():
    objs, walls, carried = parse_observation(FEEDBACK + "You carry a red ball\na wall 1 step forward\n"
                                             "a grey key 2 steps left and 3 steps forward\na closed blue door 1 step right")
    assert carried == ("red", "ball") and walls == {"a wall 1 step forward"}
    assert [(o.color, o.type, o.state, o.side, o.forward) for o in objs] == [
        ("grey", "key", None, -2, 3), ("blue", "door", "closed", 1, 0)]


def test_babyai_wall_door_and_object_bumps_through_the_family():
    ep = episode(20, [("a wall 1 step forward", "go forward"), ("a wall 1 step forward", "turn left"),
                      ("a closed red door 1 step forward", "go forward"), ("a blue ball 1 step forward", "go forward"),
                      ("a wall 2 steps forward", "go forward")])
    by = kinds(summarize_signatures([ep], family="babyai"))
    assert by["wall_bump"].steps == ["S20.0"] and "wall" in by["wall_bump"].detail
    assert by["closed_door_bump"].steps == ["S20.2"]
    assert by["object_bump"].steps == ["S20.3"]


def test_target_visible_not_approached():
    far = "a grey key 1 step left and 3 steps forward"
    idle = episode(21, [(far, "turn right"), ("a wall 2 steps left", "turn left"), (far, "turn right"),
                        ("a wall 2 steps left", "turn left"), (far, "go forward"), (far, "turn left")])
    sig = kinds(detect([idle]))["target_visible_not_approached"]
    assert sig.steps == ["S21.0"] and "grey key 4 steps away" in sig.detail
    close = episode(22, [(far, "go forward"), ("a grey key 1 step left and 2 steps forward", "go forward"),
                         ("a grey key 1 step left and 1 step forward", "turn left"), ("a grey key 1 step right", "x"),
                         ("a grey key 1 step right", "x"), ("a grey key 1 step right", "x")])
    assert "target_visible_not_approached" not in kinds(detect([close]))
    # another object in view is not the target
    other = episode(23, [("a red ball 3 steps forward", "turn left")] * 6)
    assert "target_visible_not_approached" not in kinds(detect([other]))


def test_target_moves_on_after_the_pickup_of_a_two_part_mission():
    box = "a red box 3 steps forward"
    steps = [("You carry a blue ball\n" + box, "turn left")] * 3 + [(box, "turn left")] * 3
    ep = episode(24, steps, mission="pick up the blue ball, then go to the red box")
    assert kinds(detect([ep]))["target_visible_not_approached"].steps == ["S24.0"]
    ep = episode(25, steps, mission="pick up the blue ball, then go to the green key")
    assert "target_visible_not_approached" not in kinds(detect([ep]))


def test_pickup_not_facing():
    ep = episode(26, [("a blue ball 1 step left", "pick up"), ("a red box 1 step forward", "pick up"),
                      ("a blue ball 1 step forward", "pick up"), ("You carry a blue ball", "pick up")],
                 mission="pick up the blue ball")
    sig = kinds(detect([ep]))["pickup_not_facing"]
    assert sig.steps == ["S26.0", "S26.1", "S26.3"] and sig.count == 3


def test_plan_progress_from_progress_detail():
    eps = [episode(30, [("a", "turn left")], progress_detail={"plan_start": 8, "plan_end": 8}),
           episode(31, [("a", "turn left")], progress_detail={"plan_start": 6, "plan_end": 2}),
           episode(32, [("a", "turn left")], success=True, progress_detail={"plan_start": 5, "plan_end": 0}),
           episode(33, [("a", "turn left")])]
    sig = kinds(detect(eps))["plan_progress"]
    assert sig.seeds == [30, 31] and sig.share == 0.5 and sig.steps[0] == "S30.0"
    assert "7.0 to 5.0" in sig.detail and "1 of 2 got no closer" in sig.detail
    assert "plan_progress" not in kinds(detect(eps[2:]))


# -- robustness and output ---------------------------------------------------------------------------------
def test_broken_family_detector_warns_instead_of_crashing(caplog):
    def broken(episodes):
        raise RuntimeError("boom")

    register_env("sigtest_broken", lambda p: None, signatures=broken, replace=True)
    ep = episode(40, [("a", "go forward"), ("a", "go forward")])
    with caplog.at_level(logging.WARNING, logger="promptevo.evaluation.signatures"):
        sigs = summarize_signatures([ep], family="sigtest_broken", extra=[lambda eps: [Occurrence("mine", 40, 1)], broken])
    assert {"no_effect_action", "mine"} <= set(kinds(sigs))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("boom" in w and "\n" not in w for w in warnings)
    with caplog.at_level(logging.WARNING, logger="promptevo.evaluation.signatures"):
        assert summarize_signatures([ep], family="no_such_family_xyz")
    assert "no_such_family_xyz" in caplog.records[-1].getMessage()


def test_render_is_compact_and_dicts_are_json():
    eps = [episode(s, [("a wall 1 step forward", "go forward")] * 9 + [("x", "fly")]) for s in range(5)]
    sigs = summarize_signatures(eps, family="babyai")
    text = render_signatures(sigs, max_items=2)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[-1].startswith("- (") and all(len(line) < 250 for line in lines)
    assert lines[0].startswith("- 100% of episodes (5), ") and "[S0.0 S0.1 S0.2 S1.0]" in lines[0]
    data = json.loads(json.dumps(signatures_to_dict(sigs)))
    assert data[0].keys() == {"kind", "seeds", "steps", "count", "episodes", "share", "detail"}
    assert all(isinstance(s, Signature) for s in sigs)
