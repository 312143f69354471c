"""From a PyTorch model to PyTorch's own pipelining runtime running a ppsched schedule.

Profiles an nn.Sequential's children, plans a pipeline of RANKS ranks with ppsched's planner,
writes the chosen schedule as PyTorch's CSV, then runs one training step on RANKS CPU processes
(gloo) with torch.distributed.pipelining's _PipelineScheduleRuntime loading that CSV, and checks
the gradients against the same model trained unpipelined.

    python plan_and_run.py            # 2 ranks, 4 micro-batches
"""

import copy
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

import ppsched

RANKS, MICROBATCHES, ROWS, WIDTH = 2, 4, 4, 32


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(6)])


def loss_fn(output, target):
    return torch.nn.functional.mse_loss(output, target)


def plan(workdir):
    model = make_model()
    profile = ppsched.profile_module(model, lambda rows: torch.randn(rows, WIDTH), microbatch_sizes=(ROWS, 2 * ROWS),
                                     repeats=3)
    profile.write(os.path.join(workdir, "model.json"))
    # Families of one stage per rank, so that plan.partition is the split each rank builds.
    result = ppsched.plan(ppsched.load_profile(os.path.join(workdir, "model.json")), ranks=RANKS,
                          microbatches=MICROBATCHES, families=["gpipe", "1f1b", "zb-h1", "zb-h2"])
    best = result.recommended
    ppsched.save_pytorch_csv(best.schedule, os.path.join(workdir, "schedule.csv"))
    return best.name, list(result.partition.boundaries)


def rank_main(rank, workdir, boundaries, inputs, targets):
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=RANKS)
    model = make_model()
    layers = list(model.children())[boundaries[rank]:boundaries[rank + 1]]
    stage = PipelineStage(torch.nn.Sequential(*layers), rank, RANKS, torch.device("cpu"))
    runtime = _PipelineScheduleRuntime([stage], n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    runtime._load_csv(os.path.join(workdir, "schedule.csv"), format="compute_only")
    runtime.step(*([inputs] if rank == 0 else []), target=targets if rank == RANKS - 1 else None)
    grads = {name: p.grad for name, p in stage.submod.named_parameters()}
    torch.save(grads, os.path.join(workdir, f"grads{rank}.pt"))
    dist.destroy_process_group()


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        family, boundaries = plan(workdir)
        print(f"planned: {family}, layers per rank {boundaries}")
        inputs, targets = torch.randn(MICROBATCHES * ROWS, WIDTH), torch.randn(MICROBATCHES * ROWS, WIDTH)
        mp.spawn(rank_main, args=(workdir, boundaries, inputs, targets), nprocs=RANKS, join=True)

        # The same step unpipelined: the mean of the micro-batches' losses, as the runtime takes it.
        whole = make_model()
        loss = sum(loss_fn(whole(x), y) for x, y in zip(inputs.chunk(MICROBATCHES), targets.chunk(MICROBATCHES)))
        (loss / MICROBATCHES).backward()
        reference = list(whole.children())
        worst = 0.0
        for rank in range(RANKS):
            grads = torch.load(os.path.join(workdir, f"grads{rank}.pt"))
            ours = torch.nn.Sequential(*reference[boundaries[rank]:boundaries[rank + 1]])
            for name, p in ours.named_parameters():
                worst = max(worst, (grads[name] - p.grad).abs().max().item())
        print(f"largest gradient difference against unpipelined training: {worst:.3g}")
        return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
