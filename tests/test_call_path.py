"""The path of one compressed call through the package (issue 29's measure of the structure).

A compressed ``Allreduce`` of NumPy buffers, traced with ``sys.settrace`` on
every thread: which modules of ``mpicomp/`` run code (the kernels, which
install as ``mpicomp.kernels`` from the top-level ``kernels/``, are not
counted), and whether any of them is entered again from a module it called
(``comm -> pipeline -> comm``): the call must flow one way down the layers.
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
#: the most modules of mpicomp/ a compressed Allreduce may run code in
MAX_MODULES = 10


def _module(frame) -> str | None:
    """The mpicomp/ module a frame runs in, else None."""
    path = pathlib.Path(frame.f_code.co_filename)
    if not path.is_absolute() or PACKAGE not in path.resolve().parents:
        return None
    return frame.f_globals.get("__name__")


def _trace(call) -> tuple[list[str], list[list[str]]]:
    """Run ``call``: the mpicomp/ modules that ran code (in order), and every chain of
    modules on a stack that entered a module again after leaving it for another."""
    modules: list[str] = []
    reentries: list[list[str]] = []

    def tracer(frame, event, arg):
        if event != "call":
            return None
        name = _module(frame)
        if name is None:
            return None
        if name not in modules:
            modules.append(name)
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
    return modules, reentries


@pytest.mark.parametrize("where", ["communicator", "call"])
def test_a_compressed_allreduce_flows_one_way_through_few_modules(comm, where):
    r = comm.Get_rank()
    settings = {"codec": "bitplane", "rate": 8.25}
    mc = mpicomp.Comm(comm, **settings) if where == "communicator" else mpicomp.Comm(comm)
    kwargs = {} if where == "communicator" else settings
    x = np.random.default_rng(r).standard_normal(1 << 18).astype(np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y, **kwargs)  # the first call of a size calibrates and asks the model
    modules, reentries = _trace(lambda: mc.Allreduce(x, y, **kwargs))
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 2, st
    assert reentries == [], reentries[:3]
    assert len(modules) <= MAX_MODULES, modules
    assert modules[0] == "mpicomp.comm"
