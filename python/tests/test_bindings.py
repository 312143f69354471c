"""The Python bindings of ppsched: each test calls the installed package (pip install .)."""

import copy
import math
import os
import pickle
import random
import re

import pytest

import ppsched

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILES = os.path.join(HERE, "..", "..", "examples", "profiles")


def family_sizes():
    """(family, ranks, microbatches) that every family accepts, two pipeline sizes."""
    for f in ppsched.families():
        for ranks in (2, 4):
            microbatches = 4 * ranks
            if f.accepts(ranks=ranks, microbatches=microbatches):
                yield f.name, ranks, microbatches


# ---------------------------------------------------------------- families


def test_families_round_trip():
    families = ppsched.families()
    assert [f.name for f in families] == ppsched.family_names()
    assert len(families) == 12
    for f in families:
        assert ppsched.family(f.name) == f
        assert ppsched.family(f.name.upper()) == f
        assert f.rule and f.summary
        assert f.placement in ("one stage per rank", "looped", "v-shape")
        assert f.chunks_for(2) == (2 if f.chunks == 0 else f.chunks)
        assert f.name in repr(f)
    assert ppsched.family("Interleaved1F1B").name == "interleaved-1f1b"
    assert ppsched.family("zb-v").chunks_for(4) == 2
    assert ppsched.family("1f1b").bubble_formula == "(p-1)(T_F+T_B)"
    assert ppsched.family("zb-v").bubble_formula is None


def test_make_schedule_fields():
    s = ppsched.make_schedule("1f1b", ranks=4, microbatches=8)
    assert (s.name, s.ranks, s.stages, s.microbatches) == ("1f1b", 4, 4, 8)
    assert s.placement == [0, 1, 2, 3]
    assert len(s.programs) == 4 and all(len(p) == 16 for p in s.programs)
    first = s.programs[0][0]
    assert (first.stage, first.op, first.microbatch, first.group) == (0, "F", 0, 0)
    assert str(first) == "0F0"
    assert repr(first) == "Action(stage=0, op='F', microbatch=0)"
    assert repr(s) == "Schedule(name='1f1b', ranks=4, stages=4, microbatches=8, actions=64)"
    assert str(s).startswith("schedule '1f1b': 4 ranks, 4 stages, 8 micro-batches\nrank 0: F0@s0 F1@s0")
    assert s == ppsched.make_schedule("1f1b", ranks=4, microbatches=8)
    assert s != ppsched.make_schedule("gpipe", ranks=4, microbatches=8)
    assert pickle.loads(pickle.dumps(s)) == s
    assert copy.deepcopy(s) == s
    # chunks: None is the family's own; looped families take two unless told.
    assert ppsched.make_schedule("zb-v", ranks=4, microbatches=8).stages == 8
    assert ppsched.make_schedule("interleaved-1f1b", ranks=4, microbatches=8).stages == 8
    assert ppsched.make_schedule("interleaved-1f1b", ranks=4, microbatches=8, chunks=3).stages == 12
    zb = ppsched.make_schedule("zb-h1", ranks=2, microbatches=4)
    assert zb.split_backward and {a.op for p in zb.programs for a in p} == {"F", "I", "W"}


# ---------------------------------------------------------------- CSV and action strings


@pytest.mark.parametrize("family,ranks,microbatches", list(family_sizes()))
def test_every_family_csv_round_trip(family, ranks, microbatches):
    s = ppsched.make_schedule(family, ranks=ranks, microbatches=microbatches)
    lowered = ppsched.lower(s)
    assert lowered.lowered and not s.lowered
    for comms, expected in ((False, s), (True, lowered)):
        text = ppsched.to_pytorch_csv(s, comms=comms)
        assert text.count("\r\n") == ranks
        assert ("SEND_F" in text) == comms
        back = ppsched.from_pytorch_csv(text, microbatches=microbatches, name=s.name)
        assert back == expected
        back = ppsched.from_pytorch_csv(text, placement=s.placement, microbatches=microbatches, name=s.name)
        assert back == expected
        actions = ppsched.to_pytorch_actions(s, comms=comms)
        assert sorted(actions) == list(range(ranks))
        assert [len(v) for v in actions.values()] == [
            len(text.split("\r\n")[r].split(",")) for r in range(ranks)
        ]
        assert ppsched.from_pytorch_actions(actions, microbatches=microbatches, name=s.name) == expected
    # A lowered schedule written compute_only loses its communication again.
    assert ppsched.to_pytorch_csv(lowered) == ppsched.to_pytorch_csv(s)


def test_pytorch_bookkeeping_cells(tmp_path):
    """compute_comms carries PyTorch's WAIT_SEND and REDUCE_GRAD cells unless bookkeeping=False; reading skips them."""
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=4)
    lowered = ppsched.lower(s)
    with_cells = ppsched.to_pytorch_csv(s, comms=True)
    without = ppsched.to_pytorch_csv(s, comms=True, bookkeeping=False)
    cells = [c for row in with_cells.split("\r\n") for c in row.split(",") if c]
    sends = [c for c in cells if "SEND_" in c and "WAIT" not in c]
    assert len([c for c in cells if "WAIT_SEND_" in c]) == len(sends) == 8
    assert [c for c in cells if c.endswith("REDUCE_GRAD")] == ["0REDUCE_GRAD", "0WAIT_REDUCE_GRAD", "1REDUCE_GRAD", "1WAIT_REDUCE_GRAD"]
    assert "WAIT" not in without and "REDUCE_GRAD" not in without
    for text in (with_cells, without):
        assert ppsched.from_pytorch_csv(text, microbatches=4, name=s.name) == lowered
    # Compute-only files never get them; the other writers take the same keyword.
    assert ppsched.to_pytorch_csv(s) == ppsched.to_pytorch_csv(s, bookkeeping=False)
    acts = ppsched.to_pytorch_actions(s, comms=True)
    assert acts == {r: row.split(",") for r, row in enumerate(with_cells.split("\r\n")[:2])}
    assert not any("WAIT" in c for row in ppsched.to_pytorch_actions(s, comms=True, bookkeeping=False).values() for c in row)
    path = str(tmp_path / "b.csv")
    ppsched.save_pytorch_csv(s, path, comms=True, bookkeeping=False)
    assert open(path, newline="").read() == without


def test_csv_file_round_trip(tmp_path):
    s = ppsched.make_schedule("zb-v", ranks=2, microbatches=4)
    path = str(tmp_path / "zbv.csv")
    ppsched.save_pytorch_csv(s, path, comms=True)
    back = ppsched.load_pytorch_csv(path, microbatches=4)
    assert back.name == "zbv"
    back.name = s.name
    assert back == ppsched.lower(s)


@pytest.mark.parametrize("family,ranks,microbatches", list(family_sizes()))
def test_action_strings_round_trip(family, ranks, microbatches):
    s = ppsched.make_schedule(family, ranks=ranks, microbatches=microbatches)
    for comms in (False, True):
        for cells in ppsched.to_pytorch_actions(s, comms=comms).values():
            for cell in cells:
                if re.fullmatch(r"\d+(WAIT_SEND_[FB]\d+|REDUCE_GRAD|WAIT_REDUCE_GRAD)", cell):
                    # PyTorch's bookkeeping (bookkeeping=True): no ppsched action, so parse_action refuses it.
                    with pytest.raises(ppsched.Error, match="which ppsched does not model"):
                        ppsched.parse_action(cell)
                    continue
                parsed = ppsched.parse_action(cell)
                if isinstance(parsed, tuple):
                    assert cell.startswith("(") and ")OVERLAP_F_B" in cell
                    assert len(parsed) == 2 and all(a.group == 1 for a in parsed)
                    assert cell == "({};{})OVERLAP_F_B".format(*(str(a).split("#")[0] for a in parsed))
                else:
                    assert str(parsed) == cell
                    assert ppsched.parse_action(str(parsed)) == parsed


def test_parse_action_spellings():
    assert ppsched.parse_action("0F3") == ppsched.Action(0, "F", 3)
    assert ppsched.parse_action("1I2") == ppsched.Action(stage=1, op="I", microbatch=2)
    assert ppsched.parse_action("1BI2") == ppsched.Action(1, "BI", 2)
    assert ppsched.parse_action("1BW2").op == "W"
    assert ppsched.parse_action("2SEND_F3#7") == ppsched.Action(2, "SEND_F", 3, group=7)
    assert str(ppsched.Action(2, "SEND_F", 3, group=7)) == "2SEND_F3#7"
    assert ppsched.parse_action(" 3RECV_B0 ").op == "RECV_B"
    assert ppsched.parse_action("1R0").op == "R"
    pair = ppsched.parse_action("(0F7;7B3)OVERLAP_F_B")
    assert pair == (ppsched.Action(0, "F", 7, group=1), ppsched.Action(7, "B", 3, group=1))
    assert len({ppsched.Action(0, "F", 1), ppsched.Action(0, "F", 1), ppsched.Action(0, "B", 1)}) == 2
    with pytest.raises(ppsched.Error, match="UNSHARD"):
        ppsched.parse_action("0UNSHARD")


def test_dualpipev_overlap_cells_reach_pytorch_spelling():
    s = ppsched.make_schedule("dualpipev", ranks=2, microbatches=8)
    cells = [c for row in ppsched.to_pytorch_actions(s).values() for c in row]
    overlapped = [c for c in cells if c.endswith("OVERLAP_F_B")]
    assert overlapped, "DualPipeV's steady state is overlapped F&B pairs"
    assert all(len(ppsched.parse_action(c)) == 2 for c in overlapped)


# ---------------------------------------------------------------- validation


def hand_broken():
    """1F1B on 2 ranks, 2 micro-batches, with rank 1 running F1 before F0: a cycle through both ranks."""
    A = ppsched.Action
    programs = [
        [A(0, "F", 0), A(0, "B", 0), A(0, "F", 1), A(0, "B", 1)],
        [A(1, "F", 1), A(1, "F", 0), A(1, "B", 0), A(1, "B", 1)],
    ]
    return ppsched.Schedule(programs=programs, placement=[0, 1], microbatches=2, name="broken")


def test_validate_names_stuck_actions():
    good = ppsched.validate(ppsched.make_schedule("1f1b", ranks=2, microbatches=2))
    assert good.ok and bool(good) and not good.problems
    assert [m.peak_in_flight for m in good.memory] == [2, 1]

    v = ppsched.validate(hand_broken())
    assert not v.ok and v.deadlock and not bool(v)
    assert [p.kind for p in v.problems] == ["deadlock"]
    # Each rank's stuck action is named with what it waits for.
    assert "B0@s0" in v.message and "F1@s1" in v.message
    assert "rank 0" in v.problems[0].message and "rank 1" in v.problems[0].message
    assert "Validation(ok=False" in repr(v)
    with pytest.raises(ppsched.Error, match="deadlock"):
        ppsched.simulate(hand_broken())
    with pytest.raises(ppsched.Error):
        ppsched.lower(hand_broken())


def test_validate_static_problems_have_places():
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=2)
    programs = s.programs
    del programs[1][0]  # F0 of stage 1 is gone
    broken = ppsched.Schedule(programs=programs, placement=s.placement, microbatches=2)
    v = ppsched.validate(broken)
    assert not v.ok
    assert "missing compute" in [p.kind for p in v.problems]


def test_validate_a_lowered_schedule_and_its_csv():
    s = ppsched.lower(ppsched.make_schedule("interleaved-1f1b", ranks=2, microbatches=4))
    assert ppsched.validate(s).ok
    text = ppsched.to_pytorch_csv(s, comms=True)
    assert ppsched.validate(ppsched.from_pytorch_csv(text)).ok


# ---------------------------------------------------------------- simulation


@pytest.mark.parametrize("family", ["gpipe", "1f1b"])
def test_simulate_matches_closed_form(family):
    p, m = 4, 8
    costs = ppsched.uniform_costs(1.0, 1.0, 1.0)  # F = 1, B = I + W = 2
    sim = ppsched.simulate(ppsched.make_schedule(family, ranks=p, microbatches=m), costs)
    closed = ppsched.analytic_bubble(family, ranks=p, microbatches=m, forward=1.0, backward_input=1.0,
                                     backward_weight=1.0)
    assert closed.holds and closed.formula == "(p-1)(T_F+T_B)"
    assert sim.makespan == pytest.approx(m * 3.0 + closed.idle_per_rank)
    assert sim.makespan == pytest.approx(33.0)
    assert sim.bubble_fraction == pytest.approx(9.0 / 33.0)
    assert sim.bubble_per_rank == pytest.approx([9.0 / 33.0] * p)
    assert [r.busy for r in sim.ranks] == pytest.approx([24.0] * p)
    assert len(sim.peak_memory) == p
    # The timeline as Python data: one span per action, compute and communication.
    spans = list(sim.timeline)
    assert len(spans) == len(sim.timeline.spans)
    compute = [sp for sp in spans if sp.lane == "compute"]
    assert len(compute) == p * m * 2
    assert max(sp.end for sp in spans) == pytest.approx(sim.makespan)
    first = min(compute, key=lambda sp: (sp.start, sp.rank))
    assert (first.rank, first.stage, first.op, first.microbatch, first.start, first.end) == (0, 0, "F", 0, 0.0, 1.0)
    rows = sim.timeline.to_list()
    assert set(rows[0]) == {"rank", "stage", "op", "microbatch", "group", "lane", "start", "end"}
    # The same figures from the timeline's own statistics and drawing.
    stats = ppsched.summarize(sim)
    assert stats.makespan == pytest.approx(33.0) and stats.bubble_fraction == pytest.approx(9.0 / 33.0)
    art = ppsched.to_ascii(sim.timeline)
    rows = [line for line in art.splitlines() if line.startswith("rank ")]
    assert len(rows) == p
    assert all(len(line.split("|")[1]) == 33 for line in rows)  # one column per unit of the makespan
    assert "1 column = 1 unit" in art


def test_simulate_per_stage_costs_and_memory():
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=4)
    costs = ppsched.CostModel(
        stages=[ppsched.StageCost(forward=1.0, backward_input=2.0, backward_weight=1.0, activation_bytes=100.0),
                ppsched.StageCost(forward=2.0, backward_input=2.0, backward_weight=2.0, activation_bytes=50.0)],
        unit="ms")
    sim = ppsched.simulate(s, costs)
    assert sim.timeline.unit == "ms"
    assert sim.peak_memory_bytes == pytest.approx([200.0, 50.0])
    assert sim.makespan >= 4 * 6.0
    assert ppsched.simulate(s, ppsched.uniform_costs(1, 1, 1)).makespan < sim.makespan


def test_cost_model_fixed_costs_keep_their_names():
    # CostModel holds them as one FixedCosts; Python reads and writes them under the profile's names.
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=4)
    plain = ppsched.simulate(s, ppsched.uniform_costs(1.0, 1.0, 1.0))
    costs = ppsched.CostModel(stages=[ppsched.StageCost()], step_overhead=2.0, concurrent_slowdown=[1.0, 1.5])
    assert (costs.action_overhead, costs.transfer_overhead, costs.step_overhead) == (0.0, 0.0, 2.0)
    assert costs.concurrent_slowdown == [1.0, 1.5]
    costs.concurrent_slowdown = []
    assert ppsched.simulate(s, costs).makespan == plain.makespan + 2.0
    assert ppsched.simulate(s, costs).step_overhead == 2.0
    costs.step_overhead = 0.0
    costs.action_overhead = 0.25
    # 1F1B, p = 2, m = 4: (m + p - 1) x (F + B) = 5 x 3, and each F and B pays 0.25 more.
    assert plain.makespan == 15.0
    assert ppsched.simulate(s, costs).makespan == pytest.approx(5 * 3.5)
    costs.transfer_overhead = -1.0
    with pytest.raises(ppsched.Error, match=r"fixed_costs\.transfer"):
        costs.check(2, 4)


def test_trace_writers(tmp_path):
    sim = ppsched.simulate(ppsched.make_schedule("zb-h1", ranks=2, microbatches=4))
    trace = ppsched.to_chrome_trace(sim.timeline, title="zb-h1")
    assert trace.lstrip().startswith("{") and "traceEvents" in trace
    path = tmp_path / "trace.json"
    ppsched.write_chrome_trace(sim.timeline, str(path))
    assert path.read_text() == ppsched.to_chrome_trace(sim.timeline)
    svg = ppsched.to_svg(sim)
    assert svg.startswith("<svg") or svg.startswith("<?xml")
    ppsched.write_svg(sim.timeline, str(tmp_path / "t.svg"))
    back = ppsched.parse_timeline_csv(ppsched.to_timeline_csv(sim.timeline))
    assert len(back) == len(sim.timeline)
    made = ppsched.Timeline(ranks=1, spans=[ppsched.Span(rank=0, stage=0, op="F", microbatch=0, start=0.0, end=2.0)])
    assert ppsched.summarize(made).makespan == 2.0


# ---------------------------------------------------------------- partition and plan


def gpt():
    return ppsched.load_profile(os.path.join(PROFILES, "gpt.json"))


def test_partition_a_profile():
    profile = gpt()
    n = len(profile.graph)
    assert n == 34 and profile.layers[0].name == "embedding"
    best = ppsched.partition(profile, stages=4)
    assert best.method == "optimal" and len(best) == 4
    assert best.boundaries[0] == 0 and best.boundaries[-1] == n
    assert best.bottleneck == pytest.approx(max(s.time for s in best.stages))
    uniform = ppsched.partition(profile, stages=4, method="uniform")
    assert uniform.boundaries == [0, 9, 18, 26, 34]
    assert best.bottleneck <= uniform.bottleneck
    given = ppsched.partition(profile, boundaries=best.boundaries)
    assert given.bottleneck == pytest.approx(best.bottleneck)
    assert best.layers_of(0) == list(range(best.boundaries[1]))
    # A list of layers is a chain.
    layers = [ppsched.Layer(name=f"l{i}", forward=1.0 + i, backward_input=1.0, backward_weight=1.0) for i in range(6)]
    cut = ppsched.partition(layers, stages=2)
    assert cut.boundaries == [0, 4, 6]


def test_plan_a_profile():
    profile = gpt()
    result = ppsched.plan(profile, ranks=4, microbatches=8, families=["1f1b", "zb-h1", "gpipe"])
    assert result.ranks == 4 and result.microbatches == 8
    assert sorted(r.name for r in result.schedules) == ["1f1b", "gpipe", "zb-h1"]
    assert result.recommended is not None and result.recommended.fits
    assert result.recommended.name in ("1f1b", "zb-h1")
    assert result.reason
    for r in result.schedules:
        assert r.valid and r.makespan > 0 and len(r.peak_memory_bytes) == 4
        assert ppsched.validate(r.schedule).ok
    assert "1f1b" in str(result)
    # A cap nothing fits is a result, not an error.
    tiny = ppsched.plan(profile, ranks=4, microbatches=8, families=["1f1b"], memory_cap=1e6)
    assert tiny.recommended is None and tiny.reason


def test_each_schedule_carries_its_cut():
    profile = gpt()
    result = ppsched.plan(profile, ranks=4, microbatches=8)
    several = 0
    for r in result.schedules:
        if not (r.valid and r.training):
            continue
        cut = r.partition
        assert len(cut.boundaries) == r.virtual_stages + 1, r.name
        assert cut.boundaries[0] == 0 and cut.boundaries[-1] == len(profile.graph)
        assert [s.rank for s in cut.stages] == r.schedule.placement
        # The profile has no fixed costs, so the cut's default costs are the plan's prices.
        assert ppsched.simulate(r.schedule, cut.cost_model()).makespan == pytest.approx(r.makespan, rel=1e-12), r.name
        several += r.chunks > 1
    assert several >= 5
    zbv = next(r for r in result.schedules if r.name == "zb-v")
    assert zbv.partition.stages[0].rank == zbv.partition.stages[-1].rank == 0
    assert result.partition.boundaries != zbv.partition.boundaries
    # One type for the partitioner's result and the planner's cut; the planner's names stay.
    assert ppsched.PartitionPlan is ppsched.Partition and isinstance(zbv.partition, ppsched.Partition)
    assert zbv.partition.bottleneck_time == zbv.partition.bottleneck > 0
    assert zbv.partition.layers_of(0) == zbv.partition.order[: zbv.partition.boundaries[1]]
    assert zbv.partition.cut_text().startswith("partition (exact min-bottleneck), 8 stages\n  stage 0 rank 0 layers 0-")


def test_plan_with_memory_policies():
    profile = gpt()
    plain = ppsched.plan(profile, ranks=4, microbatches=8, families=["1f1b"])
    peak = max(plain.schedules[0].peak_memory_bytes)
    policies = {s: ppsched.MemoryPolicy.full_recompute() for s in range(4)}
    given = ppsched.plan(profile, ranks=4, microbatches=8, families=["1f1b"], memory_policy=policies)
    r = given.schedules[0]
    assert [p.kind for p in r.memory_policies] == ["full recompute"] * 4
    assert max(r.peak_memory_bytes) < peak
    assert r.makespan > plain.schedules[0].makespan
    assert any(a.op == "R" for prog in r.schedule.programs for a in prog)
    auto = ppsched.plan(profile, ranks=4, microbatches=8, families=["1f1b"], memory_cap=peak * 0.8,
                        memory_policy="auto")
    assert auto.recommended is not None and auto.recommended.memory_policies is not None


def test_apply_memory_policies_and_devices():
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=4)
    costs = ppsched.CostModel(stages=[ppsched.StageCost(activation_bytes=10.0)])
    mp = ppsched.apply_memory_policies(s, costs, [ppsched.MemoryPolicy.full_recompute(), ppsched.MemoryPolicy()])
    assert any(a.op == "R" for a in mp.schedule.programs[0])
    assert ppsched.validate(mp.schedule, costs=mp.costs).ok
    assert ppsched.simulate(mp.schedule, mp.costs).makespan > 0
    plan = ppsched.plan_devices(gpt(), devices=4, global_batch=8, families=["1f1b"], max_microbatches=8)
    assert plan.chosen is not None
    assert plan.chosen.pipeline * plan.chosen.replicas == 4


# ---------------------------------------------------------------- errors


def test_error_is_a_value_error_with_the_cpp_message():
    assert issubclass(ppsched.Error, ValueError)
    family = ppsched.family("interleaved-1f1b")
    expected = family.why_not(ranks=4, microbatches=6, chunks=2)
    assert expected
    with pytest.raises(ppsched.Error) as caught:
        ppsched.make_schedule("interleaved-1f1b", ranks=4, microbatches=6, chunks=2)
    assert str(caught.value) == expected
    with pytest.raises(ValueError, match="unknown family 'nope'.*1f1b"):
        ppsched.make_schedule("nope", ranks=2, microbatches=2)
    with pytest.raises(ppsched.Error, match="row 1 \\(rank 0\\), column 2"):
        ppsched.from_pytorch_csv("0F0,0Q1\n")


def expect_rejection(call, *args, **kwargs):
    """Bad input raises TypeError or ppsched.Error (or IndexError / OverflowError from Python's own
    conversions); anything else, or a crash, fails."""
    with pytest.raises((TypeError, ppsched.Error, IndexError, OverflowError)):
        call(*args, **kwargs)


def test_garbage_is_rejected_never_crashes():
    nan, inf = float("nan"), float("inf")
    # Wrong types.
    expect_rejection(ppsched.make_schedule, 123, ranks=2, microbatches=2)
    expect_rejection(ppsched.make_schedule, "1f1b", ranks="4", microbatches=2)
    expect_rejection(ppsched.make_schedule, "1f1b", ranks=None, microbatches=2)
    expect_rejection(ppsched.make_schedule, "1f1b", 4, 8)  # keyword-only sizes
    expect_rejection(ppsched.to_pytorch_csv, "0F0")
    expect_rejection(ppsched.simulate, ppsched.make_schedule("1f1b", ranks=2, microbatches=2), "costs")
    expect_rejection(ppsched.Schedule, programs=[["0F0"]], placement=[0], microbatches=1)
    expect_rejection(ppsched.partition, "layers", stages=2)
    expect_rejection(ppsched.Action, 0, "Q", 0)
    # Negative and huge sizes.
    for ranks, microbatches in ((0, 1), (-1, 4), (4, -8), (10**6, 10**6), (2**31 - 1, 1), (1, 2**31 - 1), (2**40, 1)):
        for name in ppsched.family_names():
            expect_rejection(ppsched.make_schedule, name, ranks=ranks, microbatches=microbatches)
    expect_rejection(ppsched.make_schedule, "interleaved-1f1b", ranks=4, microbatches=8, chunks=-2)
    # Malformed CSV and action strings.
    for text in ["", "\n\n", "0F", "F0", "abc", '"0F0', "0F0,0X1", "0F99999999999", "0F0#", "(0F0;0B0",
                 "(0F0)OVERLAP", "99999999999F0", "0F0\x00", "0SEND_F0#99999999999", "0F0\r\n1F1\r\n",
                 "0UNSHARD,,", ",,,", "\ufeff"]:
        expect_rejection(ppsched.parse_action, text)
    for text in ["", "0F", "\n\n", "1F0", "0F0,1F0\n1B0", '"0F0', "0F-1", "x" * 1000, "0F0\n0B0\n"]:
        expect_rejection(ppsched.from_pytorch_csv, text)
    expect_rejection(ppsched.from_pytorch_csv, "0F0,0B0", placement=[5])
    expect_rejection(ppsched.from_pytorch_csv, "0F0,0B0", placement=[-1])
    expect_rejection(ppsched.from_pytorch_csv, "0F0,0B0", microbatches=-3)
    expect_rejection(ppsched.from_pytorch_actions, {-1: ["0F0"]})
    expect_rejection(ppsched.from_pytorch_actions, {0: ["0F0,0B0"]})
    # A schedule of nonsense: validate reports it, the others raise.
    A = ppsched.Action
    nonsense = ppsched.Schedule(programs=[[A(99, "F", -3), A(-1, "SEND_B", 2**31 - 1)]], placement=[5, -2],
                                microbatches=-1, ranks=-7)
    v = ppsched.validate(nonsense)
    assert not v.ok and v.problems
    for call in (ppsched.simulate, ppsched.to_pytorch_csv):
        expect_rejection(call, nonsense)
    # lower() returns a schedule that communicates already as it is; a compute-only one is checked.
    assert ppsched.lower(nonsense) == nonsense
    compute_only = ppsched.Schedule(programs=[[A(99, "F", -3), A(0, "B", 5)]], placement=[5, -2], microbatches=-1)
    expect_rejection(ppsched.lower, compute_only)
    expect_rejection(nonsense.rank_of, 7)
    # Sizes that tables indexed by them could not hold: checked before anything is allocated.
    two = [[A(0, "F", 0), A(0, "B", 0)]]
    for fields in (dict(placement=[0], microbatches=2**31 - 1), dict(placement=[0] * 10**6, microbatches=1),
                   dict(placement=[2**31 - 1], microbatches=1), dict(placement=[0], microbatches=1, ranks=2**31 - 1)):
        huge = ppsched.Schedule(programs=two, **fields)
        assert not ppsched.validate(huge).ok
        expect_rejection(ppsched.simulate, huge)
        expect_rejection(ppsched.lower, huge)
    # NaN, infinite and negative costs.
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=2)
    for bad in (nan, inf, -1.0):
        expect_rejection(ppsched.simulate, s, ppsched.uniform_costs(bad, 1.0, 1.0))
        expect_rejection(ppsched.simulate, s, ppsched.CostModel(stages=[ppsched.StageCost(backward_weight=bad)]))
        expect_rejection(ppsched.partition, [ppsched.Layer(forward=bad), ppsched.Layer(forward=1.0)], stages=2)
        expect_rejection(ppsched.lower, s, costs=ppsched.uniform_costs(bad, 1.0, 1.0))
    expect_rejection(ppsched.simulate, s, ppsched.CostModel(stages=[ppsched.StageCost()] * 3))
    expect_rejection(ppsched.simulate, s, ppsched.CostModel(stages=[]))
    # Partition: too many stages, no stages, a cycle.
    layers = [ppsched.Layer(forward=1.0) for _ in range(3)]
    for stages in (0, -1, 4, 2**31 - 1):
        expect_rejection(ppsched.partition, layers, stages=stages)
    expect_rejection(ppsched.LayerGraph, layers, edges=[(0, 1), (1, 0)])
    expect_rejection(ppsched.LayerGraph, layers, edges=[(0, 7)])
    expect_rejection(ppsched.partition, layers, boundaries=[0, 5, 3])
    # Timelines with nonsense: writers raise.
    bad_span = ppsched.Span(rank=3, stage=0, op="F", microbatch=0, start=nan, end=1.0)
    for writer in (ppsched.to_svg, ppsched.to_chrome_trace, ppsched.to_ascii, ppsched.summarize):
        expect_rejection(writer, ppsched.Timeline(ranks=1, spans=[bad_span]))
        expect_rejection(writer, ppsched.Timeline(ranks=-1, spans=[]))
    expect_rejection(ppsched.parse_timeline_csv, "garbage,\n1,2")
    # Profiles.
    for text in ["", "{", "[]", '{"layers": 3}', '{"layers": [{"forward": -1}]}', '{"layers": [{"forward": "x"}]}']:
        expect_rejection(ppsched.parse_profile, text)
    expect_rejection(ppsched.load_profile, "/nonexistent/profile.json")
    expect_rejection(ppsched.plan, gpt(), ranks=0, microbatches=8)
    expect_rejection(ppsched.plan, gpt(), ranks=4, microbatches=8, families=["nope"])
    expect_rejection(ppsched.plan, gpt(), ranks=4, microbatches=8, memory_policy="sometimes")
    expect_rejection(ppsched.plan, gpt(), ranks=4, microbatches=8, memory_cap=nan)
    expect_rejection(ppsched.plan_devices, gpt(), devices=0, global_batch=8)


def test_largest_sizes_are_refused_before_allocating():
    for name in ppsched.family_names():
        expect_rejection(ppsched.make_schedule, name, ranks=2**31 - 1, microbatches=2**31 - 1)


def test_random_text_never_crashes():
    rng = random.Random(40)
    alphabet = "0123456789FBIWRSENDCVOLAPUH_#;(),\"\r\n \t-"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        for call in (ppsched.parse_action, ppsched.from_pytorch_csv):
            try:
                call(text)
            except (ppsched.Error, TypeError):
                pass


def test_stub_matches_the_module():
    """_ppsched.pyi names every class and function the extension has, and each class's members."""
    import ast

    import ppsched._ppsched as native

    stub_path = os.path.join(os.path.dirname(native.__file__), "_ppsched.pyi")
    tree = ast.parse(open(stub_path).read())
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    # An alias (PartitionPlan = Partition) is stubbed as the same object under its second name.
    aliases = {t.id: n.value.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
               for t in n.targets if isinstance(t, ast.Name)}
    assert all(getattr(native, a) is getattr(native, target) for a, target in aliases.items())
    assert stubbed | set(aliases) == {name for name in dir(native) if not name.startswith("_")}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {b.name for b in node.body if isinstance(b, ast.FunctionDef)}
            members |= {b.target.id for b in node.body if isinstance(b, ast.AnnAssign)}
            assert all(hasattr(getattr(native, node.name), m) for m in members), node.name
