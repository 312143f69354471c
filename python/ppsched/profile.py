"""Profiling a PyTorch model for the planner.

``profile_module`` times every child of an ``nn.Sequential`` (or every module of a list) as one
pipeline stage of its own would run it under ``torch.distributed.pipelining``: its forward, its
full backward and, split, the input-gradient half (BI, PyTorch's ``I`` action) and the
weight-gradient half (BW, ``W``), at several micro-batch sizes, after warm-up runs, with the
spread of the repetitions kept. It counts each child's parameter, activation and output bytes and
writes the JSON profile that ``ppsched-plan --profile`` and ``ppsched.load_profile`` read, the
format of the C++ profiler (``ppsched::libtorch::profile_sequential`` and
``TorchProfile::at``; docs/profile-format.md).

Only measuring lives here: the partitioning and planning are the library's (the bindings).
torch is imported inside the functions, so ``import ppsched`` works without it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, Union

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    import torch

__all__ = [
    "profile_module",
    "ModuleProfile",
    "LayerProfile",
    "LayerSample",
    "Timing",
    "CallOverhead",
]

# Seconds per unit: the units the C++ profiler accepts (runtime/profile.hpp).
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}

InputSpec = Union["torch.Tensor", Callable[[int], "torch.Tensor"]]


def _error_type() -> type:
    """ppsched.Error when the package's extension is importable, else ValueError."""
    try:
        from ppsched import Error  # type: ignore[attr-defined]

        if isinstance(Error, type) and issubclass(Error, Exception):
            return Error
    except Exception:  # the extension is not built, or the package is not there
        pass
    return ValueError


def _fail(problem: str, where: str = "", fix: str = "") -> None:
    """Raises with the library's message shape: "subject: problem (at where). fix"."""
    message = "profile_module: " + problem
    if where:
        message += f" (at {where})"
    if fix:
        message += f". {fix}"
    raise _error_type()(message)


# --------------------------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True)
class Timing:
    """One measured time over the repetitions, in the profile's unit.

    ``median`` is the figure the profile uses; ``q1``/``q3`` are the quartiles and ``min``/``max``
    the extremes (quantiles by linear interpolation between order statistics, "type 7", as the
    C++ profiler's ``TimeSpread``).
    """

    median: float = 0.0
    q1: float = 0.0
    q3: float = 0.0
    min: float = 0.0
    max: float = 0.0

    @property
    def relative_spread(self) -> float:
        """(max - min) / median, 0 for a zero median: the profile's ``spread``."""
        return (self.max - self.min) / self.median if self.median > 0.0 else 0.0

    @staticmethod
    def of(samples: Sequence[float]) -> "Timing":
        """The timing of some repetitions (at least one)."""
        s = sorted(samples)

        def q(p: float) -> float:
            at = p * (len(s) - 1)
            lo = int(at)
            hi = min(lo + 1, len(s) - 1)
            return s[lo] + (s[hi] - s[lo]) * (at - lo)

        return Timing(q(0.5), q(0.25), q(0.75), s[0], s[-1])

    def shifted(self, by: float) -> "Timing":
        """Every statistic plus ``by`` (negative: minus), none below 0."""
        return Timing(*(max(0.0, v + by) for v in (self.median, self.q1, self.q3, self.min, self.max)))

    def __repr__(self) -> str:
        return f"{self.median:.4g} [{self.min:.4g}, {self.max:.4g}]"


@dataclasses.dataclass(frozen=True)
class LayerSample:
    """One child at one micro-batch size (``rows``: the first dimension of its input).

    Times are in the profile's unit. Byte counts are per micro-batch; ``weight_bytes``,
    ``boundary_bytes`` and ``boundary_weight_bytes`` are ``None`` where not counted
    (``count_memory=False``; the first two ``weight_*`` also without ``split_backward``).
    """

    rows: int
    forward: Timing
    backward: Timing
    backward_input: Timing
    backward_weight: Timing
    activation_bytes: float
    output_bytes: float
    weight_bytes: float | None = None
    boundary_bytes: float | None = None
    boundary_weight_bytes: float | None = None

    @property
    def spread(self) -> float:
        """The largest relative spread of the four times (the profile's point ``spread``)."""
        return max(t.relative_spread for t in (self.forward, self.backward, self.backward_input, self.backward_weight))


@dataclasses.dataclass(frozen=True)
class LayerProfile:
    """One child: its name ("index:Class" by default), parameter bytes and samples per size."""

    name: str
    param_bytes: float
    samples: tuple[LayerSample, ...]


@dataclasses.dataclass(frozen=True)
class CallOverhead:
    """What one stage call costs however many children it runs, per kind of call (unit of the
    profile), taken off every child's times (see ``profile_module``'s ``call_overhead``)."""

    forward: float = 0.0
    backward: float = 0.0
    backward_input: float = 0.0
    backward_weight: float = 0.0

    @property
    def mean(self) -> float:
        """The mean of the four: the profile's ``action_overhead``."""
        return (self.forward + self.backward + self.backward_input + self.backward_weight) / 4.0


@dataclasses.dataclass(frozen=True)
class ModuleProfile:
    """What ``profile_module`` measured: every child at every size.

    ``to_dict``/``to_json``/``write`` give the JSON profile at one measured size (default: the
    first size given), the other sizes as each layer's ``points``, as the C++
    ``TorchProfile::at`` does.
    """

    unit: str
    rows: tuple[int, ...]
    layers: tuple[LayerProfile, ...]
    call_overhead: CallOverhead
    loss: tuple[Timing, ...]
    split_backward: str  # "pipelining", "autograd" or "none": how BI and BW were run
    warmup: int
    repeats: int

    def _index(self, rows: int | None) -> int:
        if rows is None:
            return 0
        if rows not in self.rows:
            _fail(
                f"no measurement at {rows} rows",
                "ModuleProfile.to_dict(rows=...)",
                "Ask for a measured size (" + ", ".join(str(r) for r in self.rows) + ")",
            )
        return self.rows.index(rows)

    def to_dict(self, rows: int | None = None) -> dict[str, Any]:
        """The profile at ``rows`` (a measured size; default the first given) as the JSON object
        ``ppsched-plan --profile`` reads (docs/profile-format.md)."""
        k = self._index(rows)
        counted_w = all(s.weight_bytes is not None for l in self.layers for s in l.samples)
        counted_b = all(s.boundary_bytes is not None for l in self.layers for s in l.samples)

        def costs(s: LayerSample) -> dict[str, Any]:
            d: dict[str, Any] = {
                "forward": s.forward.median,
                "backward_input": s.backward_input.median,
                "backward_weight": s.backward_weight.median,
                "backward": s.backward.median,
                "activation_bytes": s.activation_bytes,
                "output_bytes": s.output_bytes,
            }
            if counted_w:
                d["weight_bytes"] = s.weight_bytes
            if counted_b:
                d["boundary_bytes"] = s.boundary_bytes
            if counted_w and counted_b:
                d["boundary_weight_bytes"] = s.boundary_weight_bytes
            return d

        layers = []
        for layer in self.layers:
            out: dict[str, Any] = {"name": layer.name, "param_bytes": layer.param_bytes}
            out.update(costs(layer.samples[k]))
            if len(layer.samples) > 1:
                points = []
                for s in sorted(layer.samples, key=lambda s: s.rows):
                    p: dict[str, Any] = {"rows": s.rows}
                    p.update(costs(s))
                    if s.spread != 0.0:
                        p["spread"] = s.spread
                    points.append(p)
                out["points"] = points
            layers.append(out)
        doc: dict[str, Any] = {"unit": self.unit, "rows": self.rows[k]}
        if self.call_overhead.mean != 0.0:
            doc["action_overhead"] = self.call_overhead.mean
        # PyTorch's runtime (and the C++ adapter) run the first stage's whole backward in W.
        doc["first_stage_backward_in_bw"] = True
        doc["layers"] = layers
        return doc

    def to_json(self, rows: int | None = None, *, indent: int | None = 2) -> str:
        """``to_dict(rows)`` as JSON text."""
        return json.dumps(self.to_dict(rows), indent=indent, allow_nan=False)

    def write(self, path: str | os.PathLike[str], rows: int | None = None) -> None:
        """Writes ``to_json(rows)`` (and a newline) to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json(rows) + "\n")

    def __repr__(self) -> str:
        head = (
            f"ModuleProfile(unit={self.unit!r}, rows={list(self.rows)}, layers={len(self.layers)}, "
            f"split_backward={self.split_backward!r}, warmup={self.warmup}, repeats={self.repeats}, "
            f"action_overhead={self.call_overhead.mean:.4g})"
        )
        width = max([5] + [len(l.name) for l in self.layers])
        lines = [
            head,
            f"  {'layer':<{width}}  {'rows':>5}  median [min, max] in {self.unit}: forward / backward / BI / BW"
            "   activation, output, param bytes",
        ]
        for layer in self.layers:
            for s in layer.samples:
                lines.append(
                    f"  {layer.name:<{width}}  {s.rows:>5}  {s.forward!r} / {s.backward!r} / {s.backward_input!r} / "
                    f"{s.backward_weight!r}   {s.activation_bytes:.6g}, {s.output_bytes:.6g}, {layer.param_bytes:.6g}"
                )
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Measuring


def _children(model: Any) -> list[Any]:
    import torch

    if isinstance(model, (torch.nn.Sequential, torch.nn.ModuleList)):
        mods = list(model)
    elif isinstance(model, torch.nn.Module):
        mods = [model]
    elif isinstance(model, (list, tuple)):
        mods = list(model)
    else:
        _fail(
            f"the model is a {type(model).__name__}",
            "model_or_modules",
            "Give an nn.Sequential, an nn.ModuleList, a list of nn.Module or one nn.Module",
        )
    if not mods:
        _fail("the model has no modules", "model_or_modules", "Give at least one module")
    for i, m in enumerate(mods):
        if not isinstance(m, torch.nn.Module):
            _fail(f"item {i} is a {type(m).__name__}, not an nn.Module", f"model_or_modules[{i}]", "Give modules only")
    return mods


def _sizes(microbatch_sizes: Any, example_input: Any) -> tuple[int, ...]:
    import torch

    if microbatch_sizes is None:
        if isinstance(example_input, torch.Tensor) and example_input.dim() > 0:
            return (int(example_input.shape[0]),)
        _fail("no micro-batch sizes", "microbatch_sizes", "Give the sizes to measure, e.g. microbatch_sizes=(2, 8, 32)")
    if isinstance(microbatch_sizes, int) and not isinstance(microbatch_sizes, bool):
        microbatch_sizes = (microbatch_sizes,)
    try:
        sizes = tuple(microbatch_sizes)
    except TypeError:
        _fail(f"microbatch_sizes is a {type(microbatch_sizes).__name__}", "microbatch_sizes", "Give a sequence of ints")
    if not sizes:
        _fail("no micro-batch sizes", "microbatch_sizes", "List at least one size")
    for i, r in enumerate(sizes):
        if isinstance(r, bool) or not isinstance(r, int):
            _fail(f"a micro-batch size of {r!r}", f"microbatch_sizes[{i}]", "Give whole numbers >= 1")
        if r < 1:
            _fail(f"a micro-batch size of {r}", f"microbatch_sizes[{i}]", "Give sizes >= 1")
        if sizes.count(r) > 1:
            _fail(f"the micro-batch size {r} is given twice", "microbatch_sizes", "List each size once")
    return sizes


def _input_maker(example_input: Any) -> Callable[[int], "torch.Tensor"]:
    """A function from rows to one micro-batch's input."""
    import torch

    if isinstance(example_input, torch.Tensor):
        if example_input.dim() == 0 or example_input.shape[0] == 0:
            _fail(
                f"the example input has shape {tuple(example_input.shape)}",
                "example_input",
                "Give a tensor whose first dimension is the micro-batch (at least one row)",
            )
        base = example_input.detach()

        def make(rows: int) -> "torch.Tensor":
            n = base.shape[0]
            if rows <= n:
                return base[:rows].clone()
            reps = (rows + n - 1) // n
            return base.repeat(reps, *([1] * (base.dim() - 1)))[:rows].clone()

        return make
    if callable(example_input):
        return example_input
    _fail(
        f"the example input is a {type(example_input).__name__}",
        "example_input",
        "Give a tensor (its rows are repeated to each size) or a function from rows to a tensor",
    )
    raise AssertionError  # unreachable


def _pipelining_backward() -> tuple[Any, Any, Any] | None:
    """PyTorch's own stage backward functions, which its runtime runs for B, I and W."""
    try:
        from torch.distributed.pipelining._backward import (  # type: ignore[attr-defined]
            stage_backward,
            stage_backward_input,
            stage_backward_weight,
        )
    except Exception:
        return None
    return stage_backward, stage_backward_input, stage_backward_weight


def _run(mods: Sequence[Any], x: "torch.Tensor") -> Any:
    for m in mods:
        x = m(x)
    return x


class _Packed:
    """A saved tensor held through saved_tensors_hooks: alive while autograd keeps it."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: "torch.Tensor") -> None:
        self.tensor = tensor


def _storage(t: "torch.Tensor") -> tuple[int, int] | None:
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    except Exception:  # sparse, nested or meta tensors: no plain storage
        return None


def _held(packed: list[Any], exclude: set[int], extra: Iterable["torch.Tensor"] = ()) -> tuple[int, set[int]]:
    """Bytes of the storages still held by saved tensors (and `extra`), each once, less `exclude`;
    and the storages seen."""
    # No gc.collect(): reference counting frees what autograd lets go (the counts were the same
    # with it on the tests' models, and it cost 0.2 s a call).
    seen: dict[int, int] = {}
    tensors = [p.tensor for p in (r() for r in packed) if p is not None]
    for t in list(tensors) + list(extra):
        st = _storage(t)
        if st is not None and st[1] > 0:
            seen[st[0]] = st[1]
    return sum(n for ptr, n in seen.items() if ptr not in exclude), set(seen)


@dataclasses.dataclass
class _Memory:
    forward: int = 0          # held after F, less the input, parameters and buffers
    saves_input: bool = False
    saves_output: bool = False
    output_views_input: bool = False  # the output shares the input's storage (Flatten, a reshape)
    after_bi: int = 0         # held after BI, with the gradients captured for BW
    input_after_bi: bool = False
    output_after_bi: bool = False


def _count_memory(mod: Any, x0: "torch.Tensor", grad: "torch.Tensor", split: tuple[Any, Any, Any] | None) -> _Memory:
    """What one child keeps for its backward, counted through saved_tensors_hooks."""
    import torch

    packed: list[Any] = []

    def pack(t: "torch.Tensor") -> _Packed:
        p = _Packed(t.detach())  # detached: an output saved by its own node makes no cycle
        packed.append(weakref.ref(p))
        return p

    def unpack(p: _Packed) -> "torch.Tensor":
        return p.tensor

    params = [p for p in mod.parameters() if p.requires_grad]
    exclude = {s[0] for t in list(mod.parameters()) + list(mod.buffers()) if (s := _storage(t)) is not None}
    x = x0.detach().clone().requires_grad_(x0.is_floating_point() or x0.is_complex())
    xs = _storage(x)
    m = _Memory()
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = mod(x)
    ys = _storage(y)
    m.output_views_input = xs is not None and ys is not None and xs[0] == ys[0]
    if not y.requires_grad:
        return m
    excl = exclude | ({xs[0]} if xs else set())
    m.forward, seen = _held(packed, excl)
    m.saves_input = xs is not None and xs[0] in seen
    m.saves_output = ys is not None and ys[0] in seen
    if x.requires_grad and split is not None and not y._is_view():
        _, backward_input, backward_weight = split
        _, groups = backward_input([y], [grad], [x], iter(params))
        captured = [g for group in groups for gs in (group.get("grads") or []) for g in (gs or ()) if g is not None]
        m.after_bi, seen = _held(packed, excl, captured)
        m.input_after_bi = xs is not None and xs[0] in seen
        m.output_after_bi = ys is not None and ys[0] in seen
        backward_weight(iter(params), groups)
    elif x.requires_grad:
        # BI by plain autograd keeps the whole graph, and the output's gradient, for BW.
        torch.autograd.grad([y], [x], [grad], retain_graph=True)
        m.after_bi, seen = _held(packed, excl, [grad])
        m.input_after_bi, m.output_after_bi = m.saves_input, m.saves_output
        torch.autograd.grad([y], params, [grad], allow_unused=True) if params else None
    else:
        # An input that takes no gradient: BI does nothing, BW runs the whole backward.
        m.after_bi, m.input_after_bi, m.output_after_bi = m.forward, m.saves_input, m.saves_output
    del y, x
    return m


def _time_stage(
    mods: Sequence[Any],
    x0: "torch.Tensor",
    grad: "torch.Tensor",
    split: tuple[Any, Any, Any] | None,
    do_split: bool,
    warmup: int,
    repeats: int,
    per_unit: float,
    sync: Callable[[], None],
) -> dict[str, list[float]]:
    """F, B, then F, BI, BW of `mods` as one stage, per repetition after `warmup` rounds (the C++
    adapter's order). Times in the unit."""
    import torch

    params = [p for m in mods for p in m.parameters() if p.requires_grad]
    x = x0.detach().requires_grad_(x0.is_floating_point() or x0.is_complex())
    takes_grad = x.requires_grad

    def timed(f: Callable[[], Any]) -> tuple[float, Any]:
        sync()
        t0 = time.perf_counter()
        r = f()
        sync()
        return (time.perf_counter() - t0) / per_unit, r

    def forward() -> Any:
        with torch.enable_grad():
            return _run(mods, x)

    def full(y: Any) -> None:
        if not y.requires_grad:
            return
        if split is not None:
            split[0]([y], [grad], [x] if takes_grad else [])
        else:
            torch.autograd.backward([y], [grad])

    out: dict[str, list[float]] = {"forward": [], "backward": [], "backward_input": [], "backward_weight": []}
    for rep in range(warmup + repeats):
        keep = rep >= warmup
        x.grad = None
        f1, y = timed(forward)
        b, _ = timed(lambda: full(y))
        del y
        x.grad = None
        f2, y = timed(forward)
        if not do_split:
            bi = bw = 0.0
        elif not y.requires_grad:
            bi = bw = 0.0
        elif not takes_grad:
            # PyTorch's first stage: I does nothing, W runs the whole backward.
            bi = 0.0
            bw, _ = timed(lambda: full(y))
        elif split is not None and not y._is_view():
            bi, groups = timed(lambda: split[1]([y], [grad], [x], iter(params))[1])
            bw, _ = timed(lambda: split[2](iter(params), groups))
            del groups
        else:
            bi, _ = timed(lambda: torch.autograd.grad([y], [x], [grad], retain_graph=True))
            bw, _ = timed(
                lambda: torch.autograd.grad([y], params, [grad], allow_unused=True) if params else None
            )
        del y
        if keep:
            out["forward"] += [f1, f2]
            out["backward"].append(b)
            out["backward_input"].append(bi)
            out["backward_weight"].append(bw)
    x.grad = None
    return out


def profile_module(
    model_or_modules: Any,
    example_input: InputSpec,
    *,
    microbatch_sizes: int | Sequence[int] | None = None,
    warmup: int = 2,
    repeats: int = 5,
    names: Sequence[str] | None = None,
    split_backward: bool = True,
    count_memory: bool = True,
    call_overhead: bool = True,
    loss: Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"] | None = None,
    target: Callable[[int], "torch.Tensor"] | None = None,
    unit: str = "ms",
) -> ModuleProfile:
    """Measures every child of a model for the planner, as ``torch.distributed.pipelining`` runs it.

    Each child is timed as a one-child pipeline stage on the calling thread: per repetition a
    forward, the full backward (B), another forward, then BI (the gradient of the child's input
    only; PyTorch's ``I`` action) and BW (the parameters' gradients; ``W``), after ``warmup``
    untimed rounds, ``repeats`` timed ones. Both forwards of a round count as samples. BI and BW
    are PyTorch's own ``stage_backward_input`` / ``stage_backward_weight``
    (``torch.distributed.pipelining._backward``) where that module imports, so BW resumes from
    the gradients BI captured and nothing runs twice; elsewhere plain ``torch.autograd.grad``
    towards the input (keeping the graph), then towards the parameters (which runs the path to
    the weights again inside a child); also for a child whose output is a view (``Flatten``, a
    reshape), which ``stage_backward_input`` cannot detach in place. The output's gradient is a fixed random tensor. Times are
    wall-clock (``time.perf_counter``), with ``torch.cuda.synchronize`` around each call where the
    input is on a CUDA device. Set ``torch.set_num_threads`` as the run will before profiling.

    Args:
        model_or_modules: an ``nn.Sequential`` or ``nn.ModuleList`` (its children are the
            layers), a list of modules, or one module (one layer). Each child takes one tensor
            and returns one floating-point tensor.
        example_input: the model's input. A function ``rows -> Tensor`` making one micro-batch
            of ``rows`` rows, or a tensor whose first dimension is the micro-batch: its rows are
            repeated (or cut) to each size, so one row of real data (token ids too) will do.
        microbatch_sizes: the sizes to measure, distinct, each >= 1 (default: the example
            tensor's first dimension). Measure the sizes the planner will consider; it
            interpolates between them.
        warmup: untimed rounds per child and size (>= 0).
        repeats: timed rounds per child and size (>= 1); the median is the profile's figure.
        names: one name per child (default ``"index:Class"``, as the C++ profiler names them).
        split_backward: time BI and BW. False: only F and B; the profile then says BI = B and
            BW = 0 (as the C++ ``measured_profile`` does for a stage without the split).
        count_memory: count activation bytes (below); False writes them as 0.
        call_overhead: also time the whole model as one stage and take what a call costs once
            however many children it runs ((children's sum - whole) / (children - 1), the median
            over the sizes, at most the least child's time) off every child, per kind of call,
            as the C++ profiler does; the profile's ``action_overhead`` is their mean.
        loss: ``loss(output, target) -> scalar`` of the last stage. PyTorch's runtime computes
            the loss in the last stage's F and starts its backward from it: the loss's forward
            is added to the last child's F, its gradient to its B and BI.
        target: ``rows -> Tensor``, the loss's target (default: zeros shaped as the output).
        unit: "s", "ms", "us" or "ns": the unit of every time.

    Returns:
        A ``ModuleProfile``; ``.write(path)`` writes the JSON profile ``ppsched-plan --profile``
        reads, at the first size given (``rows=`` another measured size), every size as the
        layers' ``points``.

    What the profile's fields hold (docs/profile-format.md): ``forward``, ``backward``,
    ``backward_input``, ``backward_weight``: medians in ``unit``; ``param_bytes``: numel x element
    size of the child's parameters, a parameter shared by several children counted at the first;
    ``output_bytes``: numel x element size of the child's output; ``activation_bytes``: the bytes
    of the tensors autograd saves for the child's backward (counted through
    ``torch.autograd.graph.saved_tensors_hooks``, each storage once), not counting its input (in
    a pipeline, the received buffer), its parameters or buffers, plus its output where the next
    child saves it and the child itself does not (that part is also ``boundary_bytes``: a cut
    right after the child lets it go); ``weight_bytes``: the same counted after BI, with the
    gradients BI captured for BW (``boundary_weight_bytes`` likewise); ``spread``: the largest
    (max - min) / median of a point's four times; ``rows``: the size the plain fields are at;
    ``first_stage_backward_in_bw``: true, PyTorch's first stage (whose input takes no gradient)
    runs its whole backward in W.

    Differences from the C++ profiler: bytes are what autograd's saved tensors hold, counted per
    child, where the C++ counts allocations of tails of the model through its allocator (the
    same for ordinary layers; a child that keeps tensors outside autograd is not seen here);
    times include Python's dispatch, which the C++ calls do not pay; the loss's forward goes to
    F here (PyTorch computes it in F), to B and BI in the C++ adapter; ``concurrent_slowdown`` and
    the backend's own overheads (``measure_backend_overheads``) are not measured here. The
    model's buffers (batch-norm statistics), its parameters' ``.grad`` and the RNG state are
    restored afterwards; train/eval mode is left as given.

    Raises:
        ppsched.Error (a ``ValueError``; plain ``ValueError`` without the extension) for bad
        input: no modules, a non-module, a size < 1, a child returning no floating tensor.
    """
    mods = _children(model_or_modules)
    import torch

    sizes = _sizes(microbatch_sizes, example_input)
    make = _input_maker(example_input)
    for label, value, least in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            _fail(f"{label} = {value!r}", label, f"Give a whole number >= {least}")
    if unit not in _UNITS:
        _fail(f'unit "{unit}"', "unit", 'Give "s", "ms", "us" or "ns"')
    if names is not None:
        names = list(names)
        if len(names) != len(mods):
            _fail(f"{len(names)} names for {len(mods)} modules", "names", "Give one name per module, or none")
    else:
        names = [f"{i}:{type(m).__name__}" for i, m in enumerate(mods)]
    if loss is not None and not callable(loss):
        _fail(f"loss is a {type(loss).__name__}", "loss", "Give a function (output, target) -> scalar")
    if target is not None and not callable(target):
        _fail(f"target is a {type(target).__name__}", "target", "Give a function rows -> tensor")
    per_unit = _UNITS[unit]
    split = _pipelining_backward()
    method = "none" if not split_backward else ("pipelining" if split is not None else "autograd")

    # Parameter bytes, a shared parameter at its first child.
    seen_params: set[int] = set()
    param_bytes: list[float] = []
    for m in mods:
        total = 0
        for p in m.parameters():
            if id(p) in seen_params:
                continue
            seen_params.add(id(p))
            total += p.numel() * p.element_size()
        param_bytes.append(float(total))

    all_params = [p for m in mods for p in m.parameters()]
    saved_grads = [p.grad for p in all_params]
    saved_buffers = [b.detach().clone() for m in mods for b in m.buffers()]
    n = len(mods)
    samples: list[list[LayerSample]] = [[] for _ in mods]
    raw: list[list[dict[str, list[float]]]] = [[] for _ in mods]  # [child][size]
    whole: list[dict[str, list[float]]] = []  # [size]
    loss_times: list[tuple[Timing, Timing]] = []
    devices: list[int] = []
    try:
        # The RNG state is restored afterwards (dropout, random inputs); CUDA's on the input's device.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            devices = list(range(torch.cuda.device_count()))
        with torch.random.fork_rng(devices=devices):
            gen = torch.Generator().manual_seed(0)
            for rows in sizes:
                x = make(rows)
                if not isinstance(x, torch.Tensor):
                    _fail(
                        f"the input for {rows} rows is a {type(x).__name__}",
                        "example_input",
                        "Return one micro-batch's input tensor",
                    )
                sync = (lambda d=x.device: torch.cuda.synchronize(d)) if x.is_cuda else (lambda: None)
                chain = [x.detach()]
                with torch.no_grad():
                    for c, m in enumerate(mods):
                        y = m(chain[-1])
                        if not isinstance(y, torch.Tensor) or not (y.is_floating_point() or y.is_complex()):
                            what = str(y.dtype) if isinstance(y, torch.Tensor) else type(y).__name__
                            _fail(
                                f"module {names[c]} at {rows} rows returns {what}",
                                f"model_or_modules[{c}]",
                                "Profile modules whose output is one floating-point tensor",
                            )
                        chain.append(y.detach())
                grads = [torch.randn(t.shape, generator=gen, dtype=t.dtype).to(t.device) for t in chain[1:]]
                memory = [
                    _count_memory(m, chain[c], grads[c], split if split_backward else None) if count_memory else _Memory()
                    for c, m in enumerate(mods)
                ]
                for c, m in enumerate(mods):
                    raw[c].append(
                        _time_stage([m], chain[c], grads[c], split, split_backward, warmup, repeats, per_unit, sync)
                    )
                if call_overhead and n > 1:
                    whole.append(
                        _time_stage(mods, chain[0], grads[-1], split, split_backward, warmup, repeats, per_unit, sync)
                    )
                if loss is not None:
                    loss_times.append(_time_loss(loss, target, chain[-1], rows, warmup, repeats, per_unit, sync))
                # Whether the children from c on keep child c's input (after F; after BI): it saves
                # it, or hands it on as a view (Flatten) to children that keep theirs.
                keeps_in, keeps_in_w = [False] * (n + 1), [False] * (n + 1)
                for c in reversed(range(n)):
                    keeps_in[c] = memory[c].saves_input or (memory[c].output_views_input and keeps_in[c + 1])
                    keeps_in_w[c] = memory[c].input_after_bi or (memory[c].output_views_input and keeps_in_w[c + 1])
                for c in range(n):
                    out_bytes = float(chain[c + 1].numel() * chain[c + 1].element_size())
                    mem = memory[c]
                    # The output where a later child keeps it and this one does not: a cut right
                    # after this child lets it go. A view of the input is the input's bytes.
                    own = not mem.output_views_input
                    boundary = out_bytes if own and keeps_in[c + 1] and not mem.saves_output else 0.0
                    boundary_w = out_bytes if own and keeps_in_w[c + 1] and not mem.output_after_bi else 0.0
                    counted_w = count_memory and split_backward
                    samples[c].append(
                        LayerSample(
                            rows=rows,
                            forward=Timing(),
                            backward=Timing(),
                            backward_input=Timing(),
                            backward_weight=Timing(),
                            activation_bytes=float(mem.forward) + boundary if count_memory else 0.0,
                            output_bytes=out_bytes,
                            weight_bytes=float(mem.after_bi) + boundary_w if counted_w else None,
                            boundary_bytes=boundary if count_memory else None,
                            boundary_weight_bytes=boundary_w if counted_w else None,
                        )
                    )
    finally:
        with torch.no_grad():
            for b, old in zip((b for m in mods for b in m.buffers()), saved_buffers):
                b.copy_(old)
        for p, g in zip(all_params, saved_grads):
            p.grad = g

    # Medians per child and size, the call overhead taken off, the loss added.
    kinds = ("forward", "backward", "backward_input", "backward_weight")
    timings = [[{k: Timing.of(r[k]) for k in kinds} for r in per_size] for per_size in raw]
    overhead = {k: 0.0 for k in kinds}
    if whole:
        for k in kinds:
            per_size = []
            least = math.inf
            for s in range(len(sizes)):
                total = sum(timings[c][s][k].median for c in range(n))
                least = min(least, min(timings[c][s][k].median for c in range(n)))
                per_size.append((total - Timing.of(whole[s][k]).median) / (n - 1))
            overhead[k] = min(max(Timing.of(per_size).median, 0.0), least)
            for c in range(n):
                for s in range(len(sizes)):
                    timings[c][s][k] = timings[c][s][k].shifted(-overhead[k])
    for s, (lf, lb) in enumerate(loss_times):
        last = timings[-1][s]
        last["forward"] = _add(last["forward"], lf)
        last["backward"] = _add(last["backward"], lb)
        if split_backward:
            last["backward_input"] = _add(last["backward_input"], lb)
    layers = []
    for c in range(n):
        out = []
        for s, sample in enumerate(samples[c]):
            t = timings[c][s]
            bi, bw = t["backward_input"], t["backward_weight"]
            if not split_backward:
                bi, bw = t["backward"], Timing()
            out.append(
                dataclasses.replace(sample, forward=t["forward"], backward=t["backward"], backward_input=bi, backward_weight=bw)
            )
        layers.append(LayerProfile(names[c], param_bytes[c], tuple(out)))
    return ModuleProfile(
        unit=unit,
        rows=sizes,
        layers=tuple(layers),
        call_overhead=CallOverhead(**overhead),
        loss=tuple(_add(lf, lb) for lf, lb in loss_times),
        split_backward=method,
        warmup=warmup,
        repeats=repeats,
    )


def _add(a: Timing, b: Timing) -> Timing:
    return Timing(a.median + b.median, a.q1 + b.q1, a.q3 + b.q3, a.min + b.min, a.max + b.max)


def _time_loss(
    loss: Callable[..., Any],
    target: Callable[[int], Any] | None,
    y: "torch.Tensor",
    rows: int,
    warmup: int,
    repeats: int,
    per_unit: float,
    sync: Callable[[], None],
) -> tuple[Timing, Timing]:
    """The loss's forward and its gradient at the model's output, as the last stage runs them."""
    import torch

    tgt = target(rows) if target is not None else torch.zeros_like(y)
    if not isinstance(tgt, torch.Tensor):
        _fail(f"the target for {rows} rows is a {type(tgt).__name__}", "target", "Return one micro-batch's target tensor")
    fs: list[float] = []
    bs: list[float] = []
    for rep in range(warmup + repeats):
        out = y.detach().requires_grad_(True)
        sync()
        t0 = time.perf_counter()
        with torch.enable_grad():
            value = loss(out, tgt)
        sync()
        t1 = time.perf_counter()
        if not isinstance(value, torch.Tensor) or value.numel() != 1 or not value.requires_grad:
            _fail(
                "the loss is not one scalar computed from the output",
                "loss",
                "Return one scalar computed from the output (e.g. torch.nn.functional.mse_loss(output, target))",
            )
        torch.autograd.grad([value], [out])
        sync()
        t2 = time.perf_counter()
        if rep >= warmup:
            fs.append((t1 - t0) / per_unit)
            bs.append((t2 - t1) / per_unit)
    return Timing.of(fs), Timing.of(bs)
