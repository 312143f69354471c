"""Tests of ppsched.profile (profile_module): a small nn.Sequential profiled at two sizes, the JSON
checked against the profile format (docs/profile-format.md) and read by ppsched's own loader,
and bad input rejected with a clear error."""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: profile_module measures torch modules")

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent / "ppsched" / "profile.py"
REPO = HERE.parent.parent

try:  # the package with its extension (ppsched.Error, ppsched.load_profile)
    import ppsched  # noqa: E402

    PACKAGE: object | None = ppsched
except ImportError as e:  # the extension is not built here: test the module on its own
    PACKAGE = None
    PACKAGE_WHY = f"the ppsched package is not importable ({e})"


def _load_source():
    """This tree's profile.py, whatever ppsched is installed: an installed copy may be older."""
    spec = importlib.util.spec_from_file_location("_ppsched_profile_under_test", SOURCE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


prof = _load_source()
ERROR = getattr(PACKAGE, "Error", ValueError) if PACKAGE is not None else ValueError

SIZES = (2, 8)


def make_model() -> "torch.nn.Sequential":
    torch.manual_seed(3)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),  # no parameters; saves its result
        torch.nn.Linear(64, 32),
        torch.nn.LayerNorm(32),  # saves its input
        torch.nn.Linear(32, 8),
    )


def make_input(rows: int) -> "torch.Tensor":
    return torch.randn(rows, 32)


@pytest.fixture(scope="module")
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model():
    return make_model()


@pytest.fixture(scope="module")
def measured(threads, model):
    # No call overhead taken off, so that every time is a plain measurement (> 0).
    return prof.profile_module(model, make_input, microbatch_sizes=SIZES, warmup=1, repeats=3, call_overhead=False)


@pytest.fixture(scope="module")
def written(measured, tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "profile.json"
    measured.write(path)
    return path


# The profile format's fields (docs/profile-format.md, graph/detail/profile_json.hpp).
TOP = {"unit", "rows", "action_overhead", "transfer_overhead", "step_overhead", "concurrent_slowdown",
       "first_stage_backward_in_bw", "layers", "edges", "devices", "link"}
LAYER = {"name", "forward", "backward_input", "backward_weight", "backward", "param_bytes", "activation_bytes",
         "output_bytes", "points", "weight_bytes", "boundary_bytes", "boundary_weight_bytes",
         "recompute_saves_bytes", "recompute_time"}
POINT = {"rows", "forward", "backward_input", "backward_weight", "backward", "activation_bytes", "output_bytes",
         "weight_bytes", "boundary_bytes", "boundary_weight_bytes", "spread"}


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def check_format(doc: dict) -> None:
    """The rules the loader applies to what profile_module writes."""
    assert set(doc) <= TOP
    assert doc["unit"] == "ms"
    assert _number(doc["rows"]) and doc["rows"] > 0
    assert doc["first_stage_backward_in_bw"] is True
    assert doc["layers"]
    for layer in doc["layers"]:
        assert set(layer) <= LAYER, set(layer) - LAYER
        assert isinstance(layer["name"], str) and layer["name"]
        for k in LAYER - {"name", "points"}:
            if k in layer:
                assert _number(layer[k]), (layer["name"], k, layer[k])
        assert layer.get("boundary_bytes", 0) <= layer["activation_bytes"]
        if "boundary_weight_bytes" in layer:
            assert layer["boundary_weight_bytes"] <= layer["weight_bytes"]
        points = layer.get("points", [])
        assert [p["rows"] for p in points] == sorted(p["rows"] for p in points)
        for p in points:
            assert set(p) <= POINT
            assert set(p) - {"spread"} == set(points[0]) - {"spread"}  # all or none of a layer's points
            for k in POINT:
                if k in p:
                    assert _number(p[k]), (layer["name"], k, p[k])
            assert p["rows"] > 0
            assert p.get("boundary_bytes", 0) <= p["activation_bytes"]
            if "boundary_weight_bytes" in p:
                assert p["boundary_weight_bytes"] <= p["weight_bytes"]


def test_json_has_the_loaders_fields_and_units(measured, written, model):
    doc = json.loads(written.read_text())
    check_format(doc)
    assert doc["rows"] == SIZES[0]
    assert "action_overhead" not in doc  # call_overhead=False
    names = [l["name"] for l in doc["layers"]]
    assert names == ["0:Linear", "1:ReLU", "2:Linear", "3:LayerNorm", "4:Linear"]
    for layer, module in zip(doc["layers"], model):
        params = sum(p.numel() * p.element_size() for p in module.parameters())
        assert layer["param_bytes"] == params
        assert [p["rows"] for p in layer["points"]] == list(SIZES)
        first = layer["points"][0]
        for k in ("forward", "backward", "backward_input", "backward_weight", "activation_bytes", "output_bytes"):
            assert layer[k] == first[k]  # the plain fields are the point at the profile's rows
    width = {0: 64, 1: 64, 2: 32, 3: 32, 4: 8}
    for i, layer in enumerate(doc["layers"]):
        for p in layer["points"]:
            assert p["output_bytes"] == p["rows"] * width[i] * 4  # float32 output


def test_times_are_positive_and_ordered(measured):
    assert measured.unit == "ms" and measured.rows == SIZES
    assert measured.split_backward in ("pipelining", "autograd")
    for layer in measured.layers:
        assert len(layer.samples) == len(SIZES)
        for s in layer.samples:
            for t in (s.forward, s.backward, s.backward_input, s.backward_weight):
                assert 0.0 <= t.min <= t.q1 <= t.median <= t.q3 <= t.max
            assert s.forward.median > 0 and s.backward.median > 0 and s.backward_input.median > 0
            assert s.spread == max(t.relative_spread for t in (s.forward, s.backward, s.backward_input,
                                                                s.backward_weight))


def test_linear_layers_have_both_halves(measured, written):
    doc = json.loads(written.read_text())
    for layer in doc["layers"]:
        if layer["name"].endswith(":Linear"):
            for p in [layer] + layer["points"]:
                assert p["backward_input"] > 0 and p["backward_weight"] > 0 and p["backward"] > 0


def test_activation_bytes_follow_what_autograd_saves(measured):
    by_name = {l.name: l for l in measured.layers}
    for k, rows in enumerate(SIZES):
        relu = by_name["1:ReLU"].samples[k]
        assert relu.activation_bytes == relu.output_bytes == rows * 64 * 4  # ReLU keeps its result
        lin2 = by_name["2:Linear"].samples[k]
        # LayerNorm saves its input, the Linear's output: held while both sit in one stage.
        assert lin2.boundary_bytes == lin2.output_bytes == rows * 32 * 4
        assert lin2.activation_bytes >= lin2.boundary_bytes
        norm = by_name["3:LayerNorm"].samples[k]
        assert norm.activation_bytes > 0  # its mean and reciprocal deviation
        last = by_name["4:Linear"].samples[k]
        assert last.boundary_bytes == 0 and last.boundary_weight_bytes == 0
        for layer in measured.layers:
            s = layer.samples[k]
            assert s.weight_bytes is not None and s.weight_bytes >= s.boundary_weight_bytes >= 0
    # Bytes grow with the micro-batch.
    assert by_name["1:ReLU"].samples[1].activation_bytes > by_name["1:ReLU"].samples[0].activation_bytes


def test_to_json_at_another_size_and_repr(measured):
    doc = json.loads(measured.to_json(rows=SIZES[1]))
    assert doc["rows"] == SIZES[1]
    assert doc["layers"][0]["forward"] == doc["layers"][0]["points"][1]["forward"]
    with pytest.raises(ValueError, match="no measurement at 3 rows"):
        measured.to_json(rows=3)
    text = repr(measured)
    assert "ModuleProfile(" in text and "3:LayerNorm" in text


def test_loaded_by_ppsched(written):
    if PACKAGE is None:
        pytest.skip(PACKAGE_WHY + "; ppsched.load_profile not tried")
    if not hasattr(PACKAGE, "load_profile"):
        pytest.skip("this ppsched has no load_profile")
    PACKAGE.load_profile(str(written))  # raises ppsched.Error for anything the C++ loader rejects


def _planner() -> str | None:
    found = os.environ.get("PPSCHED_PLAN") or shutil.which("ppsched-plan")
    if found:
        return found
    built = sorted(glob.glob(str(REPO / "build*" / "examples" / "ppsched-plan")))
    return built[0] if built else None


def test_read_by_ppsched_plan(written):
    planner = _planner()
    if planner is None:
        pytest.skip("no ppsched-plan found (set PPSCHED_PLAN, or build examples/ppsched-plan)")
    run = subprocess.run([planner, "--profile", str(written), "--stages", "2", "--microbatches", "4"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_package_exports_profile_module():
    if PACKAGE is None:
        pytest.skip(PACKAGE_WHY)
    assert hasattr(PACKAGE, "profile_module")


def test_call_overhead_loss_and_a_tensor_input(threads):
    model = make_model()
    before = [p.detach().clone() for p in model.parameters()]
    p = prof.profile_module(model, torch.randn(3, 32), microbatch_sizes=(2, 5), warmup=0, repeats=2,
                            loss=torch.nn.functional.mse_loss)
    assert p.rows == (2, 5) and len(p.loss) == 2
    assert p.call_overhead.mean >= 0
    doc = p.to_dict()
    check_format(doc)
    assert doc.get("action_overhead", 0.0) == p.call_overhead.mean
    for layer in p.layers:
        for s in layer.samples:
            for t in (s.forward, s.backward, s.backward_input, s.backward_weight):
                assert t.median >= 0
    # The model is left as it was.
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(q.grad is None for q in model.parameters())
    # Without sizes, a tensor's first dimension is the size.
    one = prof.profile_module(torch.nn.Linear(32, 4), torch.randn(4, 32), warmup=0, repeats=1, call_overhead=False)
    assert one.rows == (4,) and "points" not in one.to_dict()["layers"][0]


def test_without_split_backward_and_buffers_restored(threads):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh())
    stats = model[1].running_mean.clone()
    p = prof.profile_module(model, lambda r: torch.randn(r, 8) + 3, microbatch_sizes=[4], warmup=0, repeats=2,
                            split_backward=False)
    assert torch.equal(model[1].running_mean, stats)
    assert p.split_backward == "none"
    doc = p.to_dict()
    check_format(doc)
    for layer in doc["layers"]:
        assert layer["backward_input"] == layer["backward"] and layer["backward_weight"] == 0
        assert "weight_bytes" not in layer


@pytest.mark.parametrize(
    "model_or_modules, sizes, match",
    [
        ([], (2,), "no modules"),
        (torch.nn.Sequential(), (2,), "no modules"),
        ("Linear", (2,), "is a str"),
        ([torch.nn.Linear(4, 4), 7], (2,), r"item 1 is a int, not an nn.Module"),
        (torch.nn.Linear(4, 4), (0,), "a micro-batch size of 0"),
        (torch.nn.Linear(4, 4), (2, -1), "a micro-batch size of -1"),
        (torch.nn.Linear(4, 4), (2, 2), "given twice"),
        (torch.nn.Linear(4, 4), (), "no micro-batch sizes"),
    ],
)
def test_bad_input_is_a_clear_error(model_or_modules, sizes, match):
    with pytest.raises(ERROR, match=match) as info:
        prof.profile_module(model_or_modules, lambda r: torch.randn(r, 4), microbatch_sizes=sizes, repeats=1)
    assert str(info.value).startswith("profile_module: ")
    assert isinstance(info.value, ValueError)


def test_bad_options_and_outputs():
    lin = torch.nn.Linear(4, 4)
    for kwargs, match in [
        ({"repeats": 0}, "repeats = 0"),
        ({"warmup": -1}, "warmup = -1"),
        ({"unit": "min"}, 'unit "min"'),
        ({"names": ["a", "b"]}, "2 names for 1 modules"),
    ]:
        with pytest.raises(ERROR, match=match):
            prof.profile_module(lin, torch.randn(2, 4), **kwargs)

    class Argmax(torch.nn.Module):
        def forward(self, x):
            return x.argmax(dim=1)

    with pytest.raises(ERROR, match="returns torch.int64"):
        prof.profile_module([lin, Argmax()], torch.randn(2, 4), repeats=1)


def test_token_input_a_view_and_the_plain_autograd_split(threads, monkeypatch):
    # Token ids take no gradient: the first child's BI is 0 and its BW the whole backward (as
    # PyTorch's first stage runs it). Flatten's output is a view of its input: the Embedding's
    # output is what the Linear after it keeps.
    model = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Flatten(), torch.nn.Linear(12, 2))
    tokens = torch.randint(0, 50, (1, 3))
    state = torch.random.get_rng_state()
    first = "pipelining" if prof._pipelining_backward() is not None else "autograd"
    for split in (first, "autograd"):
        if split == "autograd":
            monkeypatch.setattr(prof, "_pipelining_backward", lambda: None)
        p = prof.profile_module(model, tokens, microbatch_sizes=(2, 4), warmup=0, repeats=2, call_overhead=False)
        assert p.split_backward == split
        check_format(p.to_dict())
        embed, flatten, linear = p.layers
        for k, rows in enumerate((2, 4)):
            assert embed.samples[k].backward_input.median == 0 and embed.samples[k].backward_weight.median > 0
            assert embed.samples[k].activation_bytes == embed.samples[k].boundary_bytes == rows * 12 * 4
            assert flatten.samples[k].activation_bytes == 0 and flatten.samples[k].boundary_bytes == 0
            assert linear.samples[k].backward_input.median > 0 and linear.samples[k].backward_weight.median > 0
    assert torch.equal(state, torch.random.get_rng_state())
