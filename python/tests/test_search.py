"""The schedule search (plan/search/search.hpp) and the planner's search_plan, from Python."""

from __future__ import annotations

import math

import pytest

import ppsched


def _uneven(p: int) -> ppsched.CostModel:
    # The last rank holds an LM head: twice the others' forward and backward.
    return ppsched.CostModel(
        stages=[
            ppsched.StageCost(forward=2.0, backward_input=2.2, backward_weight=0.7, activation_bytes=1e6)
            if r == p - 1
            else ppsched.StageCost(forward=1.0, backward_input=1.1, backward_weight=0.7, activation_bytes=1e6)
            for r in range(p)
        ]
    )


def test_search_beats_or_matches_every_fixed_family():
    res = ppsched.search_schedule(ranks=4, microbatches=8, costs=_uneven(4))
    assert res.validation.ok
    assert res.makespan == res.simulation.makespan == pytest.approx(res.best.makespan)
    assert res.best is not None and res.candidates[res.winner].name == res.best.name
    assert res.why and "\n" not in res.why
    assert ppsched.is_lowered(res.lowered) and not ppsched.is_lowered(res.schedule)
    fam = res.best_family
    assert fam is not None and fam.kind == "fixed family" and res.makespan <= fam.makespan * (1 + 1e-12)
    # Every fixed family that fits, simulated alone on the same costs, is no faster.
    for c in res.candidates:
        if c.kind == "fixed family" and c.fits and c.timed:
            assert res.makespan <= c.makespan * (1 + 1e-12), c
    assert {c.timing for c in res.candidates} <= {"bound", "simulated", "exact"}
    assert "SearchResult(schedule=" in repr(res) and "Candidate(name=" in repr(res.best)


def test_search_keeps_to_the_cap_and_says_when_nothing_does():
    capped = ppsched.search_schedule(ranks=4, microbatches=8, costs=_uneven(4), memory_cap_microbatches=2.0)
    assert capped.best.peak_microbatches <= 2.0 + 1e-9
    assert max(m.peak_microbatches for m in capped.validation.memory) <= 2.0 + 1e-9
    with pytest.raises(ppsched.Error):
        ppsched.search_schedule(ranks=4, microbatches=8, costs=_uneven(4), memory_cap_microbatches=0.1)
    with pytest.raises(ppsched.Error):
        ppsched.search_schedule(ranks=4, microbatches=8, costs=_uneven(3))  # 3 stage costs for 4 ranks
    with pytest.raises(ppsched.Error, match="objective"):
        ppsched.search_schedule(ranks=2, microbatches=2, costs=_uneven(2), objective="fastest")


def test_search_knobs():
    only_families = ppsched.search_schedule(
        ranks=2, microbatches=4, costs=_uneven(2), chunks=[1], greedy=False, dualpipev=False, v_blocks=False
    )
    assert all(c.kind == "fixed family" for c in only_families.candidates)
    assert all(c.chunks == 1 for c in only_families.candidates if c.built)  # the V families are listed, unbuilt
    full_b = ppsched.search_schedule(ranks=2, microbatches=4, costs=_uneven(2), split_backward=False)
    assert all(a.op not in ("I", "W") for prog in full_b.schedule.programs for a in prog)


def test_search_plan_from_a_profile():
    layers = [ppsched.Layer(name=f"l{i}", forward=1.0 + (i == 7), backward_input=1.0, backward_weight=0.5,
                            activation_bytes=1e6, param_bytes=1e6) for i in range(8)]
    profile = ppsched.Profile(ppsched.LayerGraph(layers))
    sp = ppsched.search_plan(profile, ranks=2, microbatches=4)
    assert sp.recommended is not None and sp.plan.recommended is not None
    assert sp.recommended.name == sp.plan.recommended.name and sp.recommended.fits
    assert sp.why and sp.candidates
    fixed = ppsched.plan(profile, ranks=2, microbatches=4).recommended
    assert sp.recommended.makespan <= fixed.makespan * (1 + 1e-9)
    assert "SearchedPlan(recommended=" in repr(sp)
    nothing = ppsched.search_plan(profile, ranks=2, microbatches=4, memory_cap=1.0)
    assert nothing.recommended is None and nothing.plan.reason


def test_placement_helpers_are_checked_before_allocating():
    assert ppsched.looped_placement(2, 3) == [0, 1, 0, 1, 0, 1]
    assert ppsched.v_shape_placement(3) == [0, 1, 2, 2, 1, 0]
    assert ppsched.one_stage_per_rank_placement(3) == [0, 1, 2]
    for call, args in [
        (ppsched.looped_placement, (2**31 - 1, 2**31 - 1)),
        (ppsched.looped_placement, (0, 2)),
        (ppsched.v_shape_placement, (2**31 - 1,)),
        (ppsched.one_stage_per_rank_placement, (-1,)),
    ]:
        with pytest.raises(ppsched.Error):
            call(*args)
    assert not math.isnan(ppsched.search_schedule(ranks=1, microbatches=1, costs=_uneven(1)).makespan)
