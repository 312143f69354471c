"""From a PyTorch model to PyTorch's own pipelining runtime running a ppsched schedule.

Profiles an nn.Sequential's children, plans a pipeline of RANKS ranks with ppsched's planner over
every training family, writes the chosen schedule as PyTorch's CSV, then runs one training step on
RANKS CPU processes (gloo) with torch.distributed.pipelining's _PipelineScheduleRuntime loading
that CSV: each rank builds one PipelineStage per (virtual) stage the schedule places on it, from
the cut the planner priced. Checks the gradients against the same model trained unpipelined.

    python plan_and_run.py            # 2 ranks, 4 micro-batches, whatever the planner recommends
    python plan_and_run.py zb-v       # the families named only (here a V: two stages per rank)
"""

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


def plan(workdir, families):
    model = make_model()
    profile = ppsched.profile_module(model, lambda rows: torch.randn(rows, WIDTH), microbatch_sizes=(ROWS, 2 * ROWS),
                                     repeats=3)
    profile.write(os.path.join(workdir, "model.json"))
    # families empty: every family the request allows; forward-only ones are never recommended.
    result = ppsched.plan(ppsched.load_profile(os.path.join(workdir, "model.json")), ranks=RANKS,
                          microbatches=MICROBATCHES, families=families)
    best = result.recommended
    ppsched.save_pytorch_csv(best.schedule, os.path.join(workdir, "schedule.csv"))
    # The cut this schedule was priced on: stage s holds children boundaries[s]:boundaries[s+1]
    # and runs on rank placement[s].
    return best.name, list(best.partition.boundaries), list(best.schedule.placement)


def rank_main(rank, workdir, boundaries, placement, inputs, targets):
    dist.init_process_group("gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=RANKS)
    children = list(make_model().children())
    num_stages = len(placement)
    mine = [s for s in range(num_stages) if placement[s] == rank]
    stages = [PipelineStage(torch.nn.Sequential(*children[boundaries[s]:boundaries[s + 1]]), s, num_stages,
                            torch.device("cpu")) for s in mine]
    runtime = _PipelineScheduleRuntime(stages, n_microbatches=MICROBATCHES, loss_fn=loss_fn)
    runtime._load_csv(os.path.join(workdir, "schedule.csv"), format="compute_only")
    runtime.step(*([inputs] if 0 in mine else []), target=targets if num_stages - 1 in mine else None)
    for s, stage in zip(mine, stages):
        torch.save({name: p.grad for name, p in stage.submod.named_parameters()}, os.path.join(workdir, f"grads{s}.pt"))
    dist.destroy_process_group()


def main(families):
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        family, boundaries, placement = plan(workdir, families)
        print(f"planned: {family}, {len(placement)} stages on ranks {placement}, layers {boundaries}")
        inputs, targets = torch.randn(MICROBATCHES * ROWS, WIDTH), torch.randn(MICROBATCHES * ROWS, WIDTH)
        mp.spawn(rank_main, args=(workdir, boundaries, placement, inputs, targets), nprocs=RANKS, join=True)

        # The same step unpipelined: the mean of the micro-batches' losses, as the runtime takes it.
        whole = make_model()
        loss = sum(loss_fn(whole(x), y) for x, y in zip(inputs.chunk(MICROBATCHES), targets.chunk(MICROBATCHES)))
        (loss / MICROBATCHES).backward()
        reference = list(whole.children())
        worst = 0.0
        for s in range(len(placement)):
            grads = torch.load(os.path.join(workdir, f"grads{s}.pt"))
            ours = torch.nn.Sequential(*reference[boundaries[s]:boundaries[s + 1]])
            for name, p in ours.named_parameters():
                worst = max(worst, (grads[name] - p.grad).abs().max().item())
        print(f"largest gradient difference against unpipelined training: {worst:.3g}")
        return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
