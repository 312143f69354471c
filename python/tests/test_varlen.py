"""Variable-length batches from Python (plan/varlen.hpp, bound): fit, split four ways, plan."""

from __future__ import annotations

import json
import random

import pytest

import ppsched

STAGES = 4
# The truth the profiles are made from: per stage, F = fixed + per_token x tokens + per_square x sum(len^2),
# backwards in proportion, bytes linear in the tokens. The last stage (an LM head) costs more.
FIXED, PER_TOKEN, PER_SQUARE = 0.05, 2e-4, 1e-7
BYTES_PER_TOKEN = 4096.0


def _stage_cost(stage: int, lengths: list[int]) -> ppsched.StageCost:
    shape = ppsched.shape_of(lengths)
    scale = 1.5 if stage == STAGES - 1 else 1.0
    f = scale * (FIXED + PER_TOKEN * shape.tokens + PER_SQUARE * shape.squares)
    return ppsched.StageCost(
        forward=f, backward_input=1.1 * f, backward_weight=0.8 * f,
        activation_bytes=1e5 + BYTES_PER_TOKEN * shape.tokens, output_bytes=2048.0 * shape.tokens,
    )


def _profile_at(sequence_length: int, rows=(1, 4, 16)) -> ppsched.Profile:
    """A profile measured as ppsched's profiler writes one: one layer per stage, points at several sizes."""
    layers = []
    for s in range(STAGES):
        points = []
        for r in rows:
            c = _stage_cost(s, [sequence_length] * r)
            points.append(dict(rows=r, forward=c.forward, backward_input=c.backward_input,
                               backward_weight=c.backward_weight, activation_bytes=c.activation_bytes,
                               output_bytes=c.output_bytes))
        first = points[0]
        layers.append(dict(name=f"stage{s}", points=points,
                           **{k: first[k] for k in ("forward", "backward_input", "backward_weight", "activation_bytes", "output_bytes")}))
    return ppsched.parse_profile(json.dumps(dict(unit="ms", layers=layers)), source=f"len{sequence_length}")


def _fit() -> ppsched.LengthCosts:
    samples = ppsched.length_samples(_profile_at(256), 256) + ppsched.length_samples(_profile_at(2048), 2048)
    assert len(samples) == 6 and samples[1].lengths == [256] * 4 and len(samples[1].stages) == STAGES
    return ppsched.fit_length_costs(samples)


def test_fit_recovers_the_terms_of_the_profiles():
    fit = _fit()
    assert len(fit.stages) == STAGES and fit.samples == 6
    assert fit.max_relative_residual < 1e-9
    f = fit.stages[0].forward
    assert f.fixed == pytest.approx(FIXED, rel=1e-6)
    assert f.per_token == pytest.approx(PER_TOKEN, rel=1e-6)
    assert f.per_square == pytest.approx(PER_SQUARE, rel=1e-6)
    assert fit.stages[-1].backward_input.per_square == pytest.approx(1.5 * 1.1 * PER_SQUARE, rel=1e-6)
    assert fit.stages[0].activation_bytes.per_token == pytest.approx(BYTES_PER_TOKEN, rel=1e-9)
    shape = ppsched.shape_of([100, 300, 700])
    assert fit.stages[2].cost_at(shape).forward == pytest.approx(_stage_cost(2, [100, 300, 700]).forward, rel=1e-9)
    assert fit.stages[2].forward.at(shape) == pytest.approx(fit.stages[2].cost_at(shape).forward)


def test_fit_refuses_points_that_cannot_tell_the_terms_apart():
    with pytest.raises(ppsched.Error, match="length"):
        ppsched.fit_length_costs(ppsched.length_samples(_profile_at(256), 256))  # one length: attention undetermined
    with pytest.raises(ppsched.Error):
        ppsched.fit_length_costs([])
    with pytest.raises(ppsched.Error, match="sequence_length = 0"):
        ppsched.length_samples(_profile_at(256), 0)
    # Samples built by hand read the same as the profile's.
    by_hand = [ppsched.LengthSample(l, [_stage_cost(s, l) for s in range(STAGES)])
               for l in ([64] * 8, [512] * 2, [1000, 24, 24], [2048], [300] * 5)]
    assert ppsched.fit_length_costs(by_hand).stages[1].forward.per_square == pytest.approx(PER_SQUARE, rel=1e-6)


def _lognormal_batch(n: int, seed: int) -> list[int]:
    # docs/plan.md's lengths: lognormal(5.49, 1.10) clipped to [16, 4096].
    rng = random.Random(seed)
    return [min(4096, max(16, round(rng.lognormvariate(5.49, 1.10)))) for _ in range(n)]


def test_split_a_lognormal_batch_four_ways_and_plan_each():
    fit = _fit()
    lengths = _lognormal_batch(256, 42)
    splits = {}
    for method in ("padded", "packed", "bucketed", ppsched.SplitMethod.balanced):
        split = ppsched.split_batch(lengths, fit, method, token_budget=8192)
        name = method if isinstance(method, str) else method.name
        assert split.method.name == name and repr(split).startswith(f"Split(method='{name}'")
        # Every sequence once, each micro-batch within the budget (padding included).
        seen = sorted(i for mb in split.microbatches for i in mb.sequences)
        assert seen == list(range(len(lengths)))
        assert all(mb.shape.tokens <= 8192 for mb in split.microbatches)
        assert split.tokens == sum(lengths) and split.computed_tokens >= split.tokens
        splits[name] = split
    assert splits["packed"].padding_fraction == 0.0 == splits["balanced"].padding_fraction
    assert splits["padded"].computed_tokens > splits["bucketed"].computed_tokens > splits["packed"].computed_tokens

    for name, split in splits.items():
        m = len(split)
        costs = ppsched.length_cost_model(fit, split)
        assert len(costs.per_microbatch) == STAGES * m
        assert costs.per_microbatch[2 * m + 1].forward == pytest.approx(fit.stages[2].cost_at(split.microbatches[1].shape).forward)
        plan = ppsched.plan_microbatches(fit, split)
        assert plan.validation.ok and plan.makespan == pytest.approx(plan.best.makespan)
        # 1F1B over the same micro-batches is a candidate, so the plan is never slower.
        one_f_one_b = ppsched.simulate(ppsched.make_schedule("1f1b", ranks=STAGES, microbatches=m), costs)
        assert plan.makespan <= one_f_one_b.makespan * (1 + 1e-12), name
        # The default search is the fast one: one stage per rank, fixed families only.
        assert all(c.kind == "fixed family" and c.chunks == 1 for c in plan.candidates if c.built)
    wider = ppsched.plan_microbatches(fit, splits["balanced"].microbatches, chunks=[1, 2], greedy=True)
    assert any(c.kind == "greedy" for c in wider.candidates)


def test_caps_and_bad_batches_name_the_input():
    fit = _fit()
    limit = ppsched.token_limit(fit, memory_cap_bytes=4 * (1e5 + BYTES_PER_TOKEN * 2000))
    assert 1999 <= limit <= 2000  # the first stage holds 4 micro-batches at 1F1B's peak
    assert ppsched.token_limit(fit) == 2**63 - 1
    with pytest.raises(ppsched.Error, match=r"lengths\[2\]"):
        ppsched.split_batch([10, 20, 0], fit, "packed", token_budget=100)
    with pytest.raises(ppsched.Error, match="sequence 1 has 500 tokens"):
        ppsched.split_batch([10, 500], fit, "packed", token_budget=100)
    with pytest.raises(ppsched.Error, match="unknown method 'sorted'"):
        ppsched.split_batch([10], fit, "sorted", token_budget=100)
    with pytest.raises(ppsched.Error, match="empty"):
        ppsched.split_batch([], fit, "packed", token_budget=100)
    with pytest.raises(ppsched.Error, match="no micro-batches"):
        ppsched.length_cost_model(fit, [])
    split = ppsched.split_batch(_lognormal_batch(64, 1), fit, "packed", token_budget=8192)
    with pytest.raises(ppsched.Error):
        ppsched.plan_microbatches(fit, split, memory_cap_bytes=1.0)
