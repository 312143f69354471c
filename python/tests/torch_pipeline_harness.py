"""PyTorch's own pipelining runtime running schedules given as CSV: worker processes and driver.

Not a test module: test_torch_runtime.py builds the cases and asserts on what this returns.

One process per pipeline rank (gloo, CPU, float64), started once per pipeline size p; each
worker imports torch once and runs every case of that p in order:

- ``class``: PyTorch's own schedule class (ScheduleGPipe, ...) on the model;
- ``torch_csv``: PyTorch's own schedule class dumped as CSV (compute_only) and loaded into
  ``_PipelineScheduleRuntime`` (a control: the harness and PyTorch's runtime agree);
- ``csv``: a CSV text (ppsched's) loaded into ``_PipelineScheduleRuntime`` with ``format``.

Every case is compared, per stage the rank owns, with the model run whole on one process
(unpipelined: per micro-batch loss, backward, gradients divided by m, which is what PyTorch's
pipelining computes with a mean loss and ``scale_grads=True``), and a case that names
``torch_ref`` with that earlier ``class`` case's losses and gradients.

A case must not hang: gloo's timeout bounds every receive and barrier, so a deadlocked schedule
ends with an error on the stuck rank; a worker whose step failed exits (its communication state is
unknown), and the driver starts a fresh set of processes at the next case. A driver-side deadline
is the last resort.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

WIDTH = 16
ROWS_PER_MICROBATCH = 2

# PyTorch classes that take one stage per rank (PipelineScheduleSingle); the others take a list.
SINGLE_STAGE_CLASSES = {"ScheduleGPipe", "Schedule1F1B"}
# Placement PyTorch's class uses for its stages: stage s on rank s % p, or the V.
V_CLASSES = {"ScheduleZBVZeroBubble", "ScheduleDualPipeV"}


def looped_placement(p: int, stages: int) -> list[int]:
    return [s % p for s in range(stages)]


def v_placement(p: int, stages: int) -> list[int]:
    return [s if (s // p) % 2 == 0 else p - 1 - (s % p) for s in range(stages)]


def class_placement(cls: str, p: int, stages: int) -> list[int]:
    return v_placement(p, stages) if cls in V_CLASSES else looped_placement(p, stages)


# ----------------------------------------------------------------------------- worker side


class _Worker:
    def __init__(self, rank: int, world: int, store_path: str, timeout_s: float):
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        self.torch = torch
        self.dist = dist
        self.rank = rank
        self.world = world
        store = dist.FileStore(store_path, world)
        dist.init_process_group(
            "gloo",
            store=store,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        self._layers: dict[int, list] = {}
        self._data: dict[int, tuple] = {}
        self._reference: dict[tuple[int, int], tuple] = {}
        self._class_results: dict[str, tuple] = {}

    # The model: `stages` blocks Linear(16, 16) + tanh, float64, the same on every process.
    def layers(self, stages: int):
        torch = self.torch
        if stages not in self._layers:
            g = torch.Generator().manual_seed(1000 + stages)
            blocks = []
            for _ in range(stages):
                lin = torch.nn.Linear(WIDTH, WIDTH, dtype=torch.float64)
                with torch.no_grad():
                    lin.weight.copy_(torch.randn(WIDTH, WIDTH, generator=g, dtype=torch.float64) / WIDTH**0.5)
                    lin.bias.copy_(torch.randn(WIDTH, generator=g, dtype=torch.float64) * 0.1)
                blocks.append(torch.nn.Sequential(lin, torch.nn.Tanh()))
            self._layers[stages] = blocks
        return self._layers[stages]

    def data(self, m: int):
        torch = self.torch
        if m not in self._data:
            g = torch.Generator().manual_seed(2000 + m)
            x = torch.randn(m * ROWS_PER_MICROBATCH, WIDTH, generator=g, dtype=torch.float64)
            y = torch.randn(m * ROWS_PER_MICROBATCH, WIDTH, generator=g, dtype=torch.float64)
            self._data[m] = (x, y)
        return self._data[m]

    @staticmethod
    def loss_fn(output, target):
        import torch.nn.functional as F

        return F.mse_loss(output, target)

    def reference(self, stages: int, m: int):
        """Unpipelined: the whole model on this process, micro-batch by micro-batch."""
        import copy

        torch = self.torch
        key = (stages, m)
        if key not in self._reference:
            blocks = copy.deepcopy(self.layers(stages))
            model = torch.nn.Sequential(*blocks)
            x, y = self.data(m)
            losses = []
            for xm, ym in zip(torch.tensor_split(x, m), torch.tensor_split(y, m)):
                loss = self.loss_fn(model(xm), ym)
                loss.backward()
                losses.append(loss.detach())
            for prm in model.parameters():
                prm.grad.div_(m)
            grads = {s: [prm.grad.clone() for prm in blocks[s].parameters()] for s in range(stages)}
            self._reference[key] = (torch.stack(losses), grads)
        return self._reference[key]

    def _stages(self, case, local):
        import copy

        from torch.distributed.pipelining import PipelineStage

        blocks = self.layers(case["stages"])
        mods = {s: copy.deepcopy(blocks[s]) for s in local}
        group = None
        if case.get("timeout_s"):
            # A case of its own timeout (a deadlock probe): a group of every rank, made by all.
            import datetime

            group = self.dist.new_group(
                list(range(self.world)), timeout=datetime.timedelta(seconds=case["timeout_s"])
            )
        stages = [
            PipelineStage(mods[s], s, case["stages"], self.torch.device("cpu"), group=group) for s in local
        ]
        return stages, mods

    def _build(self, case, stages):
        """The schedule object; exceptions here are refusals (no communication happened)."""
        from torch.distributed.pipelining import schedules as sch

        run = case["run"]
        m = case["m"]
        if run["kind"] in ("class", "torch_csv"):
            cls = getattr(sch, run["cls"])
            if run["cls"] in SINGLE_STAGE_CLASSES:
                if len(stages) != 1:
                    raise ValueError(f"{run['cls']} takes one stage per rank")
                sched = cls(stages[0], n_microbatches=m, loss_fn=self.loss_fn)
            else:
                sched = cls(stages, n_microbatches=m, loss_fn=self.loss_fn)
            if run["kind"] == "class":
                return sched
            # PyTorch's own compute-only order as CSV text, then through the runtime like ours.
            out = io.StringIO()
            writer = csv.writer(out)
            for r in range(self.world):
                writer.writerow(["" if a is None else str(a) for a in sched.pipeline_order[r]])
            text, fmt = out.getvalue(), "compute_only"
        else:
            text, fmt = run["csv"], run["format"]
            if run.get("add_pytorch_waits"):
                text = self._with_pytorch_bookkeeping(text, m)
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False, newline="") as f:
            f.write(text)
            path = f.name
        try:
            sched = sch._PipelineScheduleRuntime(stages, n_microbatches=m, loss_fn=self.loss_fn)
            sched._load_csv(path, format=fmt)
        finally:
            os.unlink(path)
        return sched

    def _with_pytorch_bookkeeping(self, text: str, m: int) -> str:
        """A lowered CSV with what PyTorch's own lowering adds after SEND/RECV, by PyTorch's passes.

        PyTorch 2.15's compute_comms format wants one WAIT_SEND_F / WAIT_SEND_B per send and a
        REDUCE_GRAD / WAIT_REDUCE_GRAD per stage (which divides the gradients by m); ppsched's
        lowering writes neither. The order of every other action is kept as written.
        """
        from torch.distributed.pipelining import schedules as sch

        actions = {}
        for r, row in enumerate(csv.reader(io.StringIO(text))):
            acts = [a for a in (sch._Action.from_str(c) for c in row) if a is not None]
            actions[r] = sch._add_reduce_grad(acts, m)
        actions = sch._add_wait_send(actions)
        out = io.StringIO()
        writer = csv.writer(out)
        for r in range(len(actions)):
            writer.writerow([str(a) for a in actions[r]])
        return out.getvalue()

    def run(self, case) -> dict:
        torch = self.torch
        S, m = case["stages"], case["m"]
        placement = case["placement"]
        local = [s for s in range(S) if placement[s] == self.rank]
        result = {"id": case["id"], "index": case["index"], "rank": self.rank, "stages": local}
        stages, mods = self._stages(case, local)
        try:
            sched = self._build(case, stages)
        except Exception as e:  # noqa: BLE001 - a refusal is a result
            result["status"] = "refused"
            result["error"] = f"{type(e).__name__}: {e}".split("\n\nFull pipeline schedule")[0][:2000]
            return result
        x, y = self.data(m)
        args = (x,) if 0 in local else ()
        target = y if S - 1 in local else None
        losses: list = []
        t0 = time.perf_counter()
        try:
            sched.step(*args, target=target, losses=losses)
        except Exception as e:  # noqa: BLE001
            result["status"] = "error"
            result["error"] = f"{type(e).__name__}: {e}"[:2000]
            result["traceback"] = traceback.format_exc()[-3000:]
            result["fatal"] = True
            return result
        result["step_s"] = time.perf_counter() - t0
        result["status"] = "ok"
        grads = {
            s: [torch.zeros_like(prm) if prm.grad is None else prm.grad.detach().clone() for prm in mods[s].parameters()]
            for s in local
        }
        loss_t = torch.stack([loss.detach() for loss in losses]) if S - 1 in local else None
        if case["run"]["kind"] == "class":
            self._class_results[case["id"]] = (loss_t, grads)

        def compare(other_losses, other_grads, tag):
            err, identical = 0.0, True
            for s in local:
                for a, b in zip(grads[s], other_grads[s]):
                    err = max(err, float((a - b).abs().max()))
                    identical = identical and bool(torch.equal(a, b))
            result[f"grad_err_{tag}"] = err
            result[f"grad_identical_{tag}"] = identical
            if loss_t is not None:
                if other_losses.shape != loss_t.shape:
                    result[f"loss_err_{tag}"] = float("inf")
                    result[f"loss_identical_{tag}"] = False
                else:
                    result[f"loss_err_{tag}"] = float((loss_t - other_losses).abs().max())
                    result[f"loss_identical_{tag}"] = bool(torch.equal(loss_t, other_losses))

        ref_losses, ref_grads = self.reference(S, m)
        compare(ref_losses, ref_grads, "unpipelined")
        tref = case.get("torch_ref")
        if tref is not None and tref in self._class_results:
            compare(*self._class_results[tref], "torch")
        return result


def worker_main(argv: list[str]) -> int:
    workdir, rank, world, start, store_path, timeout_s = (
        argv[0],
        int(argv[1]),
        int(argv[2]),
        int(argv[3]),
        argv[4],
        float(argv[5]),
    )
    with open(os.path.join(workdir, "cases.json")) as f:
        cases = json.load(f)
    out_path = os.path.join(workdir, f"results_{rank}.jsonl")
    w = _Worker(rank, world, store_path, timeout_s)
    # The torch_ref class runs a restarted worker needs again (their results live in memory).
    needed = {c.get("torch_ref") for c in cases[start:]} - {None}
    todo = [c for c in cases[:start] if c["id"] in needed] + cases[start:]
    with open(out_path, "a") as out:
        for case in todo:
            rerun = case["index"] < start
            t0 = time.perf_counter()
            res = w.run(case)
            res["case_s"] = time.perf_counter() - t0
            if not rerun:
                out.write(json.dumps(res) + "\n")
                out.flush()
            if res.get("fatal"):
                return 3
            w.dist.barrier()
    w.dist.barrier()
    w.dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------- driver side


def run_cases(
    cases: list[dict], p: int, *, timeout_s: float = 20.0, max_restarts: int = 4, python: str | None = None
) -> dict:
    """Runs `cases` (all with p ranks) on p fresh processes; returns {case id: merged result}.

    A case whose step fails or hangs (gloo's `timeout_s` bounds every receive) ends its
    processes; the rest run on a fresh set, at most `max_restarts` times.

    A merged result has ``status`` ("ok", "refused", "error" or "stuck"), ``errors`` (one
    line per rank that had one), and the largest gradient and loss errors over the ranks
    (``grad_err_unpipelined``, ``grad_err_torch``, ...) with ``identical_*`` flags.
    """
    python = python or sys.executable
    for i, c in enumerate(cases):
        c["index"] = i
    by_rank: dict[int, dict[int, dict]] = {r: {} for r in range(p)}
    stuck: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix=f"ppsched_torch_p{p}_") as workdir:
        with open(os.path.join(workdir, "cases.json"), "w") as f:
            json.dump(cases, f)
        start, attempt = 0, 0
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        while start < len(cases):
            if attempt > max_restarts:
                # Each failed step costs a fresh set of processes: past a few, report the rest unrun.
                for i in range(start, len(cases)):
                    stuck[i] = f"not run: {max_restarts} earlier cases already failed a step"
                break
            attempt += 1
            store = os.path.join(workdir, f"store_{attempt}")
            logs = [open(os.path.join(workdir, f"log_{attempt}_{r}.txt"), "w") for r in range(p)]
            procs = [
                subprocess.Popen(
                    [python, os.path.abspath(__file__), workdir, str(r), str(p), str(start), store, str(timeout_s)],
                    stdout=logs[r],
                    stderr=subprocess.STDOUT,
                    env=env,
                )
                for r in range(p)
            ]
            # Last resort deadline: start-up, then every remaining case within gloo's timeout.
            deadline = time.monotonic() + 60 + 2 * timeout_s + 2 * len(cases[start:])
            first_exit = None
            while any(pr.poll() is None for pr in procs):
                now = time.monotonic()
                if first_exit is None and any(pr.poll() not in (None, 0) for pr in procs):
                    first_exit = now
                if now > deadline or (first_exit is not None and now - first_exit > timeout_s + 10):
                    for pr in procs:
                        if pr.poll() is None:
                            pr.kill()
                    break
                time.sleep(0.05)
            for pr in procs:
                pr.wait()
            for lg in logs:
                lg.close()
            for r in range(p):
                path = os.path.join(workdir, f"results_{r}.jsonl")
                if os.path.exists(path):
                    with open(path) as f:
                        for line in f:
                            res = json.loads(line)
                            by_rank[r][res["index"]] = res
            # The first case not finished cleanly on every rank: the one that failed or hung.
            nxt = next(
                (
                    i
                    for i in range(start, len(cases))
                    if any(i not in by_rank[r] or by_rank[r][i].get("fatal") for r in range(p))
                ),
                len(cases),
            )
            if nxt < len(cases) and any(nxt not in by_rank[r] for r in range(p)):
                tail = ""
                for r in range(p):
                    with open(os.path.join(workdir, f"log_{attempt}_{r}.txt")) as f:
                        text = f.read().strip()
                    if text:
                        tail += f"\n[rank {r} log] " + text[-1500:]
                stuck[nxt] = f"no result from ranks {[r for r in range(p) if nxt not in by_rank[r]]}" + tail
            start = nxt + 1
    merged = {}
    for i, c in enumerate(cases):
        per = [by_rank[r].get(i) for r in range(p)]
        m = {"id": c["id"], "case": {k: v for k, v in c.items() if k != "run"} | {"run": _short_run(c["run"])}}
        statuses = {x["status"] for x in per if x is not None}
        if "error" in statuses:
            m["status"] = "error"
        elif i in stuck:
            m["status"] = "stuck"
        elif statuses == {"refused"}:
            m["status"] = "refused"
        elif statuses == {"ok"}:
            m["status"] = "ok"
        else:
            m["status"] = "error"
        m["errors"] = [f"rank {x['rank']}: {x['error']}" for x in per if x is not None and "error" in x]
        if i in stuck:
            m["errors"].append(stuck[i])
        for tag in ("unpipelined", "torch"):
            for what in ("grad", "loss"):
                errs = [x[f"{what}_err_{tag}"] for x in per if x is not None and f"{what}_err_{tag}" in x]
                if errs:
                    m[f"{what}_err_{tag}"] = max(errs)
                    m[f"{what}_identical_{tag}"] = all(
                        x[f"{what}_identical_{tag}"] for x in per if x is not None and f"{what}_identical_{tag}" in x
                    )
        m["case_s"] = max([x.get("case_s", 0.0) for x in per if x is not None], default=None)
        steps = [x.get("step_s", 0.0) for x in per if x is not None]
        m["step_s"] = max(steps) if steps else None
        merged[c["id"]] = m
    return merged


# PyTorch's class for each family of ppsched's that PyTorch has too.
TORCH_CLASS = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "zb-v": "ScheduleZBVZeroBubble",
    "dualpipev": "ScheduleDualPipeV",
}

FORMATS = ("compute_only", "compute_comms")


def case_id(family: str, p: int, v: int, m: int, what: str) -> str:
    return f"{family} p={p} v={v} m={m} {what}"


def build_cases(schedules: list[dict]) -> list[dict]:
    """Cases for one p from ppsched's schedules.

    Each schedule: family, p, v, m, placement (stage -> rank) and the CSV texts under
    "compute_only" and "compute_comms". For a family PyTorch has, PyTorch's class runs first
    (its own placement) and each CSV run is compared with it as well as with the unpipelined
    model.
    """
    cases = []
    for sc in schedules:
        fam, p, v, m = sc["family"], sc["p"], sc["v"], sc["m"]
        stages = len(sc["placement"])
        ref = None
        cls = TORCH_CLASS.get(fam)
        if cls is not None:
            ref = case_id(fam, p, v, m, "torch-class")
            cases.append(
                dict(
                    id=ref,
                    family=fam, p=p, v=v, m=m, format="class",
                    stages=stages,
                    placement=class_placement(cls, p, stages),
                    run=dict(kind="class", cls=cls),
                )
            )
        variants = [(fmt, fmt, False) for fmt in FORMATS if fmt in sc]
        if "compute_comms" in sc and "WAIT_SEND" not in sc["compute_comms"]:
            variants.append(("compute_comms+waits", "compute_comms", True))
        for label, fmt, waits in variants:
            cases.append(
                dict(
                    id=case_id(fam, p, v, m, label),
                    family=fam, p=p, v=v, m=m, format=label,
                    stages=stages,
                    placement=list(sc["placement"]),
                    run=dict(kind="csv", csv=sc[fmt], format=fmt, add_pytorch_waits=waits),
                    torch_ref=ref,
                )
            )
    return cases


def _short_run(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "csv"}


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
