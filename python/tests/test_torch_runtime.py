"""PyTorch's own pipelining runtime runs ppsched's schedules (issue 40, item 3).

Every schedule ppsched builds for p in {2, 4}, v in {1, 2} (where the family allows) and
m in {p, 2p, 4p} is written with ``ppsched.to_pytorch_csv`` and loaded into
``torch.distributed.pipelining.schedules._PipelineScheduleRuntime`` (CPU, gloo, one process per
rank), in both of PyTorch's formats:

- ``compute_only``: PyTorch's runtime inserts the communication itself;
- ``compute_comms``: our lowered schedule with its SEND/RECV, as we wrote it: ppsched's writer
  adds the bookkeeping PyTorch 2.15's runtime requires of such a file (one WAIT_SEND_F /
  WAIT_SEND_B per send, REDUCE_GRAD / WAIT_REDUCE_GRAD per stage: ``bookkeeping=True``, the
  default), so PyTorch's own passes are not needed. One file written with ``bookkeeping=False``
  must still be refused by PyTorch, so that a PyTorch that stops requiring these cells shows up.

Each run is compared with the model run whole on one process (unpipelined training: loss = mean
over micro-batches, as PyTorch's pipelining computes it with ``scale_grads=True``) and, for the
families PyTorch has, with PyTorch's own schedule class on the same model and data.

Tolerance: 1e-12 absolute on float64 gradients and losses of size 0.01 to 1. The model and the
data are identical, each stage runs the same kernels pipelined or not, and a gradient that
crosses ranks is copied exactly, so the only difference left is the order in which weight
gradients of the m micro-batches are summed (LoopedBFS runs its backwards last micro-batch
first): a few units in the last place, about 1e-17 here. A wrong schedule (a micro-batch lost,
a message matched to the wrong micro-batch, a missing 1/m) is off by 1e-3 or more.

The p processes start once per p and run every case in a loop; gloo's timeout bounds every
receive, so a schedule that deadlocks PyTorch's runtime fails with its configuration named.
"""

from __future__ import annotations

import os
import re
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)
try:
    from torch.distributed.pipelining import schedules as torch_schedules  # noqa: E402
except ImportError as exc:  # pragma: no cover - torch without pipelining
    pytest.skip(f"torch.distributed.pipelining is not available: {exc}", allow_module_level=True)
if not hasattr(torch_schedules, "_PipelineScheduleRuntime"):
    pytest.skip("this PyTorch has no _PipelineScheduleRuntime", allow_module_level=True)

ppsched = pytest.importorskip("ppsched", reason="the ppsched package is not importable (pip install . first)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_pipeline_harness as harness  # noqa: E402

P_VALUES = (2, 4)
V_VALUES = (1, 2)
TOL = 1e-12
VARIANTS = ("compute_only", "compute_comms")
# PyTorch 2.15 wants one WAIT_SEND_F / WAIT_SEND_B cell after each send of a compute_comms file
# (_validate_send_waits): a file written with bookkeeping=False is refused with this.
NO_WAIT_REFUSAL = "have no matching wait"
# A schedule with no backward is not a training step: _validate_schedule counts m backwards.
NO_BACKWARD_REFUSAL = "Invalid backward microbatches"
TORCH_FAMILIES = set(harness.TORCH_CLASS)


def _our_schedules(p: int):
    """ppsched's schedules for p ranks as the harness takes them, and the requests refused."""
    built, refused = [], []
    for fam in ppsched.families():
        seen = set()
        for v in V_VALUES:
            for m in (p, 2 * p, 4 * p):
                try:
                    s = ppsched.make_schedule(fam.name, ranks=p, microbatches=m, chunks=v)
                except ppsched.Error as e:
                    refused.append(f"{fam.name} p={p} v={v} m={m}: {str(e).splitlines()[0]}")
                    continue
                stages = len(s.placement)
                if (stages, m) in seen:
                    continue
                seen.add((stages, m))
                built.append(
                    dict(
                        family=fam.name,
                        training=fam.training,
                        p=p,
                        v=stages // p,
                        m=m,
                        placement=list(s.placement),
                        compute_only=ppsched.to_pytorch_csv(s),
                        compute_comms=ppsched.to_pytorch_csv(s, comms=True),
                    )
                )
    return built, refused


def _searched_schedules(p: int):
    """The schedule search's winners for p ranks and m in {p, 2p, 4p}, as the harness takes them."""
    out = []
    for m in (p, 2 * p, 4 * p):
        # An uneven model: the last rank (an LM head) costs twice the others; W cheaper than B.
        costs = ppsched.CostModel(
            stages=[
                ppsched.StageCost(forward=2.0, backward_input=2.2, backward_weight=0.7)
                if r == p - 1
                else ppsched.StageCost(forward=1.0, backward_input=1.1, backward_weight=0.7)
                for r in range(p)
            ]
        )
        res = ppsched.search_schedule(ranks=p, microbatches=m, costs=costs)
        sched = res.schedule
        out.append(
            dict(
                family="searched",
                training=True,
                winner=sched.name,
                p=p,
                v=len(sched.placement) // p,
                m=m,
                placement=list(sched.placement),
                compute_only=ppsched.to_pytorch_csv(sched),
                # The search's own lowering (its order of SEND/RECV, priced by its costs).
                compute_comms=ppsched.to_pytorch_csv(res.lowered, comms=True),
            )
        )
    return out


class Runs:
    def __init__(self):
        self.results: dict[str, dict] = {}
        self.schedules: dict[str, dict] = {}  # case id -> the schedule it came from
        self.refused_requests: list[str] = []
        self.seconds: dict[str, float] = {}


# A compute_comms file written without PyTorch's bookkeeping cells (bookkeeping=False): PyTorch
# 2.15 refuses it before any communication. Run in the p = 2 processes.
NO_BOOKKEEPING_ID = "1f1b p=2 m=4 compute_comms bookkeeping=False"


def _no_bookkeeping_case() -> dict:
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=4)
    text = ppsched.to_pytorch_csv(s, comms=True, bookkeeping=False)
    assert "WAIT_SEND" not in text and "REDUCE_GRAD" not in text
    return dict(
        id=NO_BOOKKEEPING_ID,
        family="no-bookkeeping", p=2, v=1, m=4, format="compute_comms",
        stages=2, placement=[0, 1],
        run=dict(kind="csv", csv=text, format="compute_comms"),
    )


# A compute_comms file that deadlocks: rank 0 waits for micro-batch 0's gradient before it sends
# micro-batch 0's activation. Run last for p = 2 with a 3 s timeout of its own.
DEADLOCK_ID = "hand-written deadlock p=2 m=1 compute_comms"
DEADLOCK_ROWS = [
    "0F0,0RECV_B0,0B0,0SEND_F0,0WAIT_SEND_F0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD",
    "1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD",
]
DEADLOCK_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def runs() -> Runs:
    from concurrent.futures import ThreadPoolExecutor

    out = Runs()
    t0 = time.monotonic()
    batches = {}
    for p in P_VALUES:
        built, refused = _our_schedules(p)
        searched = _searched_schedules(p)
        out.refused_requests += refused
        cases = harness.build_cases(built + searched)
        for case in cases:
            for sc in built + searched:
                if (sc["family"], sc["p"], sc["v"], sc["m"]) == (case["family"], p, case["v"], case["m"]):
                    out.schedules[case["id"]] = sc
        batches[p] = cases
    batches[2].append(_no_bookkeeping_case())
    batches[2].append(
        dict(
            id=DEADLOCK_ID,
            family="deadlock", p=2, v=1, m=1, format="compute_comms",
            stages=2, placement=[0, 1], timeout_s=DEADLOCK_TIMEOUT_S,
            run=dict(kind="csv", csv="\r\n".join(DEADLOCK_ROWS) + "\r\n", format="compute_comms"),
        )
    )

    def run(p):
        t = time.monotonic()
        res = harness.run_cases(batches[p], p)
        return p, res, time.monotonic() - t

    # Both pipeline sizes at once: their processes mostly wait on each other's messages.
    with ThreadPoolExecutor(len(P_VALUES)) as pool:
        for p, res, seconds in pool.map(run, P_VALUES):
            out.results.update(res)
            out.seconds[f"p={p}"] = seconds
    out.seconds["both"] = time.monotonic() - t0
    _print_report(out)
    return out


def _print_report(out: Runs) -> None:
    rows: dict[tuple[str, str], list[str]] = {}
    for r in out.results.values():
        c = r["case"]
        if r["id"] in (DEADLOCK_ID, NO_BOOKKEEPING_ID):
            continue
        key = (c["family"], c["format"])
        mark = r["status"]
        if r["status"] == "ok":
            same = r.get("grad_identical_unpipelined") and r.get("loss_identical_unpipelined", True)
            mark = "ok=" if same else f"ok~{r.get('grad_err_unpipelined', 0):.0e}"
        rows.setdefault(key, []).append(f"p{c['p']}v{c['v']}m{c['m']}:{mark}")
    print("\nPyTorch's runtime running ppsched's schedules ('ok=': bit-identical to unpipelined)")
    for (fam, fmt), marks in sorted(rows.items()):
        print(f"  {fam:18s} {fmt:20s} {' '.join(marks)}")
    for tag, what in (("unpipelined", "the unpipelined model"), ("torch", "PyTorch's own class")):
        compared = [r for r in out.results.values() if f"grad_err_{tag}" in r and r["case"]["format"] != "class"]
        same = [r for r in compared if r[f"grad_identical_{tag}"] and r.get(f"loss_identical_{tag}", True)]
        worst = max((r[f"grad_err_{tag}"] for r in compared), default=0.0)
        print(f"  CSV runs compared with {what}: {len(compared)}, bit-identical {len(same)}, largest difference {worst:.2g}")
    print("  wall seconds (p=2 and p=4 run at once): "
          + ", ".join(f"{k}: {s:.1f}" for k, s in out.seconds.items()))
    winners = sorted({f"p{sc['p']}m{sc['m']}: {sc['winner']}" for sc in out.schedules.values() if sc["family"] == "searched"})
    print("  searched winners: " + ", ".join(winners))


def _problems(runs: Runs, family: str, variant: str) -> tuple[list[str], int]:
    problems, count = [], 0
    for cid, r in runs.results.items():
        c = r["case"]
        if c["family"] != family or c["format"] != variant:
            continue
        count += 1
        sc = runs.schedules[cid]
        errors = "; ".join(r["errors"])[:1500]
        if not sc["training"]:
            if r["status"] != "refused" or NO_BACKWARD_REFUSAL not in errors:
                problems.append(f"{cid}: expected PyTorch to refuse a schedule without backward, got {r['status']} {errors}")
            continue
        if variant == "compute_comms" and "REDUCE_GRAD" not in sc["compute_comms"]:
            problems.append(f"{cid}: our compute_comms file lacks PyTorch's bookkeeping cells")
            continue
        if r["status"] != "ok":
            problems.append(f"{cid}: {r['status']}: {errors}")
            continue
        for what in ("grad_err_unpipelined", "loss_err_unpipelined", "grad_err_torch", "loss_err_torch"):
            if what in r and not r[what] <= TOL:
                problems.append(f"{cid}: {what} = {r[what]:.3g} > {TOL}")
        if family in TORCH_FAMILIES:
            ref = runs.results.get(harness.case_id(family, c["p"], c["v"], c["m"], "torch-class"))
            if ref is not None and ref["status"] == "ok" and "grad_err_torch" not in r:
                problems.append(f"{cid}: not compared with PyTorch's own class")
    return problems, count


FAMILY_NAMES = list(ppsched.family_names())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_family_runs_in_pytorch(runs, family, variant):
    problems, count = _problems(runs, family, variant)
    assert count > 0, f"no {variant} case of {family} ran; requests refused: {runs.refused_requests}"
    for p in P_VALUES:
        assert any(
            r["case"]["family"] == family and r["case"]["p"] == p for r in runs.results.values()
        ), f"{family} has no case for p={p}"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("variant", VARIANTS)
def test_searched_schedule_runs_in_pytorch(runs, variant):
    problems, count = _problems(runs, "searched", variant)
    assert count > 0
    assert not problems, "\n".join(problems)


def test_pytorch_classes_match_unpipelined(runs):
    """PyTorch's own classes, the reference of the families it has, agree with unpipelined training."""
    problems = []
    for cid, r in runs.results.items():
        if r["case"]["format"] != "class":
            continue
        if r["status"] != "ok":
            problems.append(f"{cid}: {r['status']}: {'; '.join(r['errors'])[:500]}")
        elif not (r["grad_err_unpipelined"] <= TOL and r["loss_err_unpipelined"] <= TOL):
            problems.append(f"{cid}: {r['grad_err_unpipelined']:.3g} {r['loss_err_unpipelined']:.3g}")
    assert not problems, "\n".join(problems)


def test_matrix_is_covered(runs):
    """Every family PyTorch has is one of ours; v = 1 and 2 are run where a family allows them."""
    assert TORCH_FAMILIES <= set(FAMILY_NAMES)
    ran = {(r["case"]["family"], r["case"]["p"], r["case"]["v"], r["case"]["m"]) for r in runs.results.values()}
    for fam in ppsched.families():
        for p in P_VALUES:
            for v in V_VALUES:
                for m in (p, 2 * p, 4 * p):
                    if fam.accepts(ranks=p, microbatches=m, chunks=v) and fam.chunks_for(v) == v:
                        assert (fam.name, p, v, m) in ran, f"{fam.name} p={p} v={v} m={m} was not run"


def test_pytorch_refuses_compute_comms_without_bookkeeping(runs):
    """bookkeeping=False writes no WAIT_SEND / REDUCE_GRAD cells, which PyTorch 2.15 requires."""
    r = runs.results[NO_BOOKKEEPING_ID]
    errors = "; ".join(r["errors"])
    assert r["status"] == "refused" and NO_WAIT_REFUSAL in errors, (
        f"PyTorch no longer refuses a compute_comms file without WAIT_SEND cells ({r['status']} {errors[:500]}); "
        "bookkeeping=False may now be the better default: update docs/python.md and this test"
    )


# --------------------------------------------------------------------------- PyTorch's parser


def _cells(text: str) -> list[str]:
    return [c for line in text.splitlines() for c in line.split(",") if c]


def test_pytorch_refuses_memory_actions():
    """Recompute, offload and reload have no PyTorch spelling: its parser refuses our cells."""
    s = ppsched.make_schedule("1f1b", ranks=2, microbatches=2)
    text = ppsched.to_pytorch_csv(s)
    rows = text.splitlines()
    # Rank 0 recomputes micro-batch 0's forward before its backward, and offloads / reloads it.
    rows[0] = rows[0].replace("0B0", "0OFFLOAD0,0RELOAD0,0R0,0B0", 1)
    ours = ppsched.to_pytorch_csv(ppsched.from_pytorch_csv("\n".join(rows)))
    memory_cells = [c for c in _cells(ours) if re.fullmatch(r"\d+(R|OFFLOAD|RELOAD)\d+", c)]
    assert sorted(memory_cells) == ["0OFFLOAD0", "0R0", "0RELOAD0"], ours
    for cell in memory_cells:
        with pytest.raises(RuntimeError, match="Invalid action string"):
            torch_schedules._Action.from_str(cell)
    stripped = ppsched.to_pytorch_csv(ppsched.strip_memory_actions(ppsched.from_pytorch_csv("\n".join(rows))))
    assert stripped == text


def test_pytorch_reads_group_suffix_and_overlap_pairs():
    """'#group' on a communication cell is ignored by PyTorch's parser; on an OVERLAP_F_B cell it is refused."""
    s = ppsched.make_schedule("1f1b", ranks=4, microbatches=8)
    lowered = ppsched.to_pytorch_csv(s, comms=True)
    grouped = [c for c in _cells(lowered) if "#" in c]
    assert grouped, "expected ppsched's lowering to group some send/recv cells"
    for cell in grouped:
        a = torch_schedules._Action.from_str(cell)
        assert str(a) == cell.split("#")[0]

    d = ppsched.make_schedule("dualpipev", ranks=2, microbatches=8)
    pairs = [c for c in _cells(ppsched.to_pytorch_csv(d)) if c.endswith("OVERLAP_F_B")]
    assert pairs, "expected DualPipeV's overlapped F&B pairs"
    for cell in pairs:
        a = torch_schedules._Action.from_str(cell)
        assert a.computation_type == torch_schedules.OVERLAP_F_B and len(a.sub_actions) == 2
    # A pair numbered out of the row's order keeps its id after '#', which PyTorch refuses.
    with pytest.raises(RuntimeError, match="Invalid computation type"):
        torch_schedules._Action.from_str(pairs[0] + "#7")


# --------------------------------------------------------------------------- no hang


def test_a_deadlocked_compute_comms_file_fails_with_its_name(runs):
    """A compute_comms file that deadlocks ends within its timeout, the case named, pytest not hung."""
    r = runs.results[DEADLOCK_ID]
    assert r["status"] in ("error", "stuck"), r
    assert any("Timed out" in e or "timed out" in e or "Connection closed" in e for e in r["errors"]), r["errors"]
