"""ppsched: pipeline-parallel training schedules.

Bindings of the ppsched C++ library: the schedule families and their generators, PyTorch's
pipelining CSV and action strings, lowering to SEND/RECV, validation (a deadlock proof),
simulation, timelines and their writers, partitioning and the planner. Nothing here computes on
its own: every function calls the C++ library.

    >>> import ppsched
    >>> s = ppsched.make_schedule("1f1b", ranks=4, microbatches=8)
    >>> csv = ppsched.to_pytorch_csv(s, comms=True)
"""

from ._ppsched import *  # noqa: F401,F403
from ._ppsched import Error, __doc__ as _native_doc  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    # The profiler imports torch, which `import ppsched` must not need: ppsched.profile_module
    # loads ppsched.profile on first use.
    if name == "profile_module":
        from .profile import profile_module

        return profile_module
    raise AttributeError(f"module 'ppsched' has no attribute {name!r}")
