"""The path of one compressed call through the package (issues 29 and 55: the structure).

A compressed ``Allreduce`` of NumPy buffers, traced with ``sys.settrace`` on
every thread: which modules of ``mpicomp/`` run code (the kernels, which
install as ``mpicomp.kernels`` from the top-level ``kernels/``, are not
counted), whether any of them is entered again from a module it called
(``comm -> pipeline -> comm``), and how often each module of the layers a
call passes (comm, calls, pipeline, settings, decision) is entered from
another module: once each. The call must flow one way down the layers.
"""
from __future__ import annotations

import pathlib
import sys
import threading

import numpy as np
import pytest

import mpicomp

pytestmark = pytest.mark.mpi(min_size=2)

PACKAGE = pathlib.Path(mpicomp.__file__).resolve().parent
#: the most modules of mpicomp/ a compressed Allreduce may run code in: comm, its calls
#: module, the settings, buffers, pipeline, stats, the decision's screen (with ops, the
#: names of MPI ops), predictor and agreement, the call's body (call_bodies), the host
#: backend, the algorithms' common part, the algorithm and the codec. Issue 29 set 10 with
#: one Decider, whose closures the pipeline called back in calls/; issue 55 split the
#: decision by job and moved the bodies below the pipeline (docs/decisions.md)
MAX_MODULES = 15

#: the modules of the layers above the algorithms: each entered once by a call
ENTERED_ONCE = ("mpicomp.comm", "mpicomp.calls.", "mpicomp.pipeline", "mpicomp.settings",
                "mpicomp.decision.")


def _module(frame) -> str | None:
    """The mpicomp/ module a frame runs in, else None."""
    path = pathlib.Path(frame.f_code.co_filename)
    if not path.is_absolute() or PACKAGE not in path.resolve().parents:
        return None
    return frame.f_globals.get("__name__")


def _trace(call) -> tuple[list[str], list[list[str]], dict[str, int]]:
    """Run ``call``: the mpicomp/ modules that ran code (in order), every chain of modules
    on a stack that entered a module again after leaving it for another, and how often
    each module was entered from another (or from outside mpicomp/)."""
    modules: list[str] = []
    reentries: list[list[str]] = []
    entered: dict[str, int] = {}

    def tracer(frame, event, arg):
        if event != "call":
            return None
        name = _module(frame)
        if name is None:
            return None
        if name not in modules:
            modules.append(name)
        caller = frame.f_back
        while caller is not None and caller.f_code.co_name == "<genexpr>":
            caller = caller.f_back
        if caller is None or _module(caller) != name:
            entered[name] = entered.get(name, 0) + 1
        chain: list[str] = []
        f = frame
        while f is not None:
            m = _module(f)
            if m is not None and (not chain or chain[-1] != m):
                chain.append(m)
            f = f.f_back
        if len(set(chain)) < len(chain):
            reentries.append(chain[::-1])
        return None

    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return modules, reentries, entered


@pytest.mark.parametrize("where", ["communicator", "call"])
def test_a_compressed_allreduce_flows_one_way_through_few_modules(comm, where):
    r = comm.Get_rank()
    settings = {"codec": "bitplane", "rate": 8.25}
    mc = mpicomp.Comm(comm, **settings) if where == "communicator" else mpicomp.Comm(comm)
    kwargs = {} if where == "communicator" else settings
    x = np.random.default_rng(r).standard_normal(1 << 18).astype(np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y, **kwargs)  # the first call of a size calibrates and asks the model
    modules, reentries, entered = _trace(lambda: mc.Allreduce(x, y, **kwargs))
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 2, st
    assert reentries == [], reentries[:3]
    assert len(modules) <= MAX_MODULES, (len(modules), modules)
    assert modules[0] == "mpicomp.comm"
    again = {m: n for m, n in entered.items()
             if n > 1 and any(m == p or m.startswith(p) for p in ENTERED_ONCE)}
    assert again == {}, entered
