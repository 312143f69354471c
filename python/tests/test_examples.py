"""The package's examples run and say what they claim (docs/python.md shows them)."""

import importlib.util
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _missing(module):
    return importlib.util.find_spec(module) is None


@pytest.mark.skipif(_missing("torch"), reason="torch is not installed")
def test_plan_and_run_matches_unpipelined_training():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, "plan_and_run.py")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "planned: " in done.stdout
    difference = float(done.stdout.rsplit("training: ", 1)[1])
    assert difference < 1e-5
