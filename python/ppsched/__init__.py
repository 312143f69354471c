"""ppsched: pipeline-parallel training schedules.

Bindings of the ppsched C++ library: the schedule families and their generators, PyTorch's
pipelining CSV and action strings, lowering to SEND/RECV, validation (a deadlock proof),
simulation, timelines and their writers, partitioning and the planner. Nothing here computes on
its own: every function calls the C++ library.

    >>> import ppsched
    >>> s = ppsched.make_schedule("1f1b", ranks=4, microbatches=8)
    >>> csv = ppsched.to_pytorch_csv(s, comms=True)   # PyTorch's compute_comms format
    >>> ppsched.simulate(s).makespan
    33.0
"""

from ._ppsched import *  # noqa: F401,F403
from ._ppsched import Error  # noqa: F401

__version__ = "0.1.0"

# Profiling an nn.Module (ppsched/profile.py) imports torch only when called, so `import ppsched`
# works without torch; the guard keeps the bindings importable should that module be absent.
try:
    from .profile import profile_module  # noqa: F401
except ImportError:  # pragma: no cover - a tree without the profiler
    pass
