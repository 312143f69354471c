"""Megatron-LM and torchtitan layouts from Python (partition/frameworks.hpp, bound).

The examples are Megatron's own documentation's, as tests/test_frameworks.cpp lists them with their
sources: the layout page (docs.nvidia.com/megatron-core/.../pipeline_parallel_layout.html), the
--pipeline-model-parallel-layout help text, and the MTP layer-split and loss-split pages.
"""

from __future__ import annotations

import pytest

import ppsched
from ppsched import LayerKind

E, T, M, L = LayerKind.embedding, LayerKind.transformer, LayerKind.mtp, LayerKind.loss


def _repeated(head, middle, times, tail):
    return list(head) + [middle] * times + list(tail)


# text, ranks, the stages' letters, --num-layers, --mtp-num-layers
MEGATRON_EXAMPLES = [
    ("Et*3|(tt|)*29,m|L", 16, _repeated(["Ettt"], "tt", 29, ["m", "L"]), 61, 1),
    ("E||t|L", 4, ["E", "", "t", "L"], 1, None),
    ("E|(t|)*3,m|m||L", 8, ["E", "t", "t", "t", "m", "m", "", "L"], 3, 2),
    ("E|(t|)*11m|m|m|L", 8, _repeated(["E"], "t", 11, ["m", "m", "m", "L"]), 11, 3),
    ("E|(t|)*12mm|m|L", 8, _repeated(["E"], "t", 12, ["mm", "m", "L"]), 12, 3),
    ("E|(t|)*10m|m|m|LL|LL", 8, _repeated(["E"], "t", 10, ["m", "m", "m", "LL", "LL"]), 10, 3),
    ("Ettt|(tt|)*29,m|L", 16, _repeated(["Ettt"], "tt", 29, ["m", "L"]), 61, 1),
]


@pytest.mark.parametrize("text,ranks,stages,layers,mtp", MEGATRON_EXAMPLES, ids=[e[0] for e in MEGATRON_EXAMPLES])
def test_megatron_documented_examples(text, ranks, stages, layers, mtp):
    layout = ppsched.parse_megatron_layout(text, ranks=ranks)
    assert layout.letters == stages
    assert layout.stage_count == len(stages) == len(layout)
    assert layout.ranks == ranks and layout.virtual_stages == len(stages) // ranks
    # get_num_layers_to_build and get_layer_offset, counted here from the letters.
    for s in range(layout.stage_count):
        assert layout.rank_of(s) == s % ranks and layout.virtual_stage_of(s) == s // ranks
        assert layout.stage_at(s % ranks, s // ranks) == s
        assert layout.count(T, s) == stages[s].count("t") == layout.count("t", stage=s)
        assert layout.offset(s, T) == sum(st.count("t") for st in stages[:s])
    assert layout.count(T) == layers
    ppsched.check_megatron_layout(layout, transformer_layers=layers, mtp_layers=mtp)
    canonical = ppsched.to_megatron_layout(layout)
    assert str(layout) == canonical
    assert ppsched.parse_megatron_layout(canonical, ranks=ranks) == layout
    assert ppsched.to_megatron_layout(ppsched.parse_megatron_layout(canonical, ranks=ranks)) == canonical


def test_the_documented_table_and_canonical_form():
    a = ppsched.parse_megatron_layout("Et*3|(tt|)*29,m|L", ranks=16)
    assert ppsched.to_megatron_layout(a) == "Et*3|(tt|)*29,m|L"
    assert a.letters[a.stage_at(14, 1)] == "m" and a.letters[a.stage_at(15, 1)] == "L"
    assert a.offset(a.stage_at(0, 1), "t") == 33
    assert repr(a) == "StageLayout('Et*3|(tt|)*29,m|L', ranks=16, stages=32)"
    assert a.stages[0] == [E, T, T, T] and E.letter == "E"
    # Megatron's stage count without a pipeline size: one stage per rank.
    assert ppsched.parse_megatron_layout("E||t|L").virtual_stages == 1
    # Built from letters or kinds alike; the empty layout has no string but still a repr.
    assert ppsched.StageLayout(["Ettt", [T, T], "", "L"], ranks=2) == ppsched.StageLayout(
        [[E, T, T, T], "tt", [], [L]], ranks=2
    )
    assert "StageLayout([''], ranks=1" in repr(ppsched.StageLayout([""]))
    with pytest.raises(ppsched.Error):
        str(ppsched.StageLayout([""]))


@pytest.mark.parametrize(
    "text,where,problem",
    [
        ("Et*3|(tt|*29", "character 6 '('", "never closed"),
        ("Et*|L", "character 4 '|'", "not followed by a count"),
        ("E|((t|)*2)*2|L", "character 4 '('", "cannot be nested"),
        ("E|tx|L", "character 4 'x'", "'x' is not a letter"),
        ("E|t T|L", "character 4 ' '", "space"),
        ("E|t*2*3|L", "character 6 '*'", "repeated again"),
        ("E|t*99999999|L", "character 5 '9'", "larger than"),
    ],
)
def test_malformed_layouts_name_the_position(text, where, problem):
    with pytest.raises(ppsched.Error) as e:
        ppsched.parse_megatron_layout(text)
    assert where in str(e.value) and problem in str(e.value)


def test_megatron_rules_and_bad_kinds():
    with pytest.raises(ppsched.Error):
        ppsched.check_megatron_layout(ppsched.parse_megatron_layout("t|EL"))
    with pytest.raises(ppsched.Error):
        ppsched.check_megatron_layout(ppsched.parse_megatron_layout("Et|tL"), transformer_layers=3)
    with pytest.raises(ppsched.Error, match="'x' is not a kind"):
        ppsched.StageLayout(["Ex"])
    with pytest.raises(TypeError):
        ppsched.StageLayout([[3]])
    with pytest.raises(ppsched.Error):
        ppsched.parse_megatron_layout("E|t|L", ranks=2)  # 3 stages on 2 ranks
    with pytest.raises(ppsched.Error):
        ppsched.parse_megatron_layout("E|t|L", ranks=-1)


def _llm(layers: int, norm: bool = True) -> list:
    names = ["tok_embeddings"] + [f"layers.{i}" for i in range(layers)] + (["norm"] if norm else []) + ["output"]
    return [ppsched.Layer(name=n, forward=3.0 if n == "output" else 1.0, backward_input=1.0, backward_weight=1.0) for n in names]


def test_round_trip_partition_layout_boundaries():
    # No final norm: a heavy output could draw a cut between the norm and it, which one L cannot say.
    layers = _llm(14, norm=False)
    graph = ppsched.LayerGraph(layers)
    kinds = ppsched.layer_kinds(graph)
    assert kinds[0] == E and kinds[1] == T and kinds[-1] == L
    assert ppsched.layer_kind("model.embed_tokens") == E and ppsched.layer_kind("mtp.0") == M
    part = ppsched.partition(graph, stages=8)
    layout = ppsched.stage_layout(part, kinds, ranks=4)  # 8 stages on 4 ranks: v = 2
    assert layout.stage_count == 8 and layout.virtual_stages == 2
    ppsched.check_megatron_layout(layout, transformer_layers=14)
    text = ppsched.to_megatron_layout(layout)
    back = ppsched.megatron_boundaries(ppsched.parse_megatron_layout(text, ranks=4), kinds)
    assert back == list(part.boundaries)
    # The same from boundaries, and kinds as letters; the priced split is the partition itself.
    assert ppsched.stage_layout(list(part.boundaries), "".join(k.letter for k in kinds), ranks=4) == layout
    assert ppsched.partition(graph, boundaries=back).boundaries == part.boundaries
    # torchtitan: the module lists per stage, and back.
    fqns = ppsched.torchtitan_module_fqns(part, graph)
    assert [n for st in fqns for n in st] == [l.name for l in layers]
    assert ppsched.torchtitan_boundaries(fqns, graph) == back
    llm = ppsched.torchtitan_llm_fqns(layout)
    assert llm[0][0] == "tok_embeddings" and llm[-1][-2:] == ["norm", "output"]
    assert ppsched.layout_of_torchtitan_llm_fqns(llm, ranks=4) == layout


def test_overrides_and_torchtitan_errors():
    layers = _llm(2)
    kinds = ppsched.layer_kinds(layers, {"layers.1": "m"})
    assert kinds[2] == M
    with pytest.raises(ppsched.Error, match="no layer is named"):
        ppsched.layer_kinds(layers, {"layer.9": L})
    # A cut through the final norm and the output (one L) is refused.
    with pytest.raises(ppsched.Error, match="splits them"):
        ppsched.stage_layout([0, 4, 5], ppsched.layer_kinds(layers), ranks=0)
    with pytest.raises(ppsched.Error, match="layers.1"):
        ppsched.layout_of_torchtitan_llm_fqns([["tok_embeddings", "layers.1"], ["norm", "output"]])
    with pytest.raises(ppsched.Error):
        ppsched.torchtitan_llm_fqns(ppsched.parse_megatron_layout("Et|m|L"))
    with pytest.raises(TypeError):
        ppsched.stage_layout("0,1", "EtL", ranks=1)
