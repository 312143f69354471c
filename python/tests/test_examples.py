"""The package's examples run and say what they claim (docs/python.md shows them)."""

import importlib.util
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _missing(module):
    return importlib.util.find_spec(module) is None


# The recommended family (every training family planned), and a V forced: two stages per rank,
# each rank building its stages from the cut the planner priced (ScheduleResult.partition).
@pytest.mark.skipif(_missing("torch"), reason="torch is not installed")
@pytest.mark.parametrize("families", [[], ["zb-v"]], ids=["recommended", "zb-v"])
def test_plan_and_run_matches_unpipelined_training(families):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, "plan_and_run.py"), *families], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "planned: " in done.stdout
    if families:
        assert "planned: zb-v, 4 stages on ranks [0, 1, 1, 0]" in done.stdout
    difference = float(done.stdout.rsplit("training: ", 1)[1])
    assert difference < 1e-5
