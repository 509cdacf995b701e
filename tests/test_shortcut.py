"""The compiled plain-MPI shortcut (mpicomp/shortcut.py, mpicomp/_shortcut.c)."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp import shortcut
from mpicomp.comm import ONE_NODE


def test_the_shortcut_is_compiled():
    """`make venv` has a C compiler: without the extension, tiny calls cost 0.6 us more."""
    assert shortcut.COMPILED, "mpicomp._shortcut was not built (pip install needs a C compiler)"


def _shortcut_on(mc: mpicomp.Comm) -> bool:
    """Whether ``mc``'s calls can take the compiled shortcut (it has a state with a limit)."""
    try:
        return mc._shortcut.limit > 0
    except AttributeError:
        return False


def test_the_methods_are_compiled_method_descriptors():
    for name in shortcut.METHODS:
        method = mpicomp.Comm.__dict__[name]
        assert isinstance(method, shortcut.PlainMethod), name
        assert method.plain is getattr(MPI.Intracomm, name)
        assert method.__name__ == name  # the Python method's, for help() and tracebacks


@pytest.mark.mpi(min_size=2)
def test_default_on_one_node_takes_the_shortcut_and_counts_every_call(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    x = np.arange(8, dtype=np.float32) + r
    y, want = np.empty_like(x), np.empty_like(x)
    big = np.ones(1 << 18, np.float32)
    mc.Allreduce(big, np.empty_like(big))  # above the threshold: finds the job on one node
    assert _shortcut_on(mc) and mc._shortcut.limit == float("inf")
    # more sizes than the shortcut's table holds (16): the rest are counted in its dict
    sizes = list(range(1, 41))
    for n in sizes:
        a = np.full(n, r + 1, np.float64)
        b = np.empty_like(a)
        mc.Allreduce(a, b)
        mc.Allreduce(a, b, op=MPI.MAX)  # mpi4py's own keywords take the shortcut too
        np.testing.assert_array_equal(b, np.full(n, p, np.float64))
    comm.Allreduce(x, want)
    mc.Allreduce(x, y)
    np.testing.assert_array_equal(y, want)
    st = mc.stats()["Allreduce"]
    assert st["calls"] == 2 + 2 * len(sizes)
    assert st["raw_bytes"] == big.nbytes + x.nbytes + 2 * 8 * sum(sizes)
    assert st["fallbacks"] == {ONE_NODE: st["calls"]} and st["compressed"] == 0
    # what the shortcut does not take goes on to the class's method: keywords, IN_PLACE
    z = x.copy()
    mc.Allreduce(MPI.IN_PLACE, z)
    np.testing.assert_array_equal(z, want)
    mc.Allreduce(x, y, codec="bitplane", rate=16.25, algorithm="ring", threshold=0)
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-3)
    st = mc.stats()["Allreduce"]
    assert st["calls"] == 4 + 2 * len(sizes) and st["compressed"] == 1
    # the other methods, each exact and counted
    b = np.arange(5, dtype=np.int32) if r == 0 else np.zeros(5, np.int32)
    mc.Bcast(b, root=0)
    np.testing.assert_array_equal(b, np.arange(5))
    g = np.empty(p * x.size, np.float32)
    mc.Allgather(x, g)
    np.testing.assert_array_equal(g.reshape(p, -1), [np.arange(8) + q for q in range(p)])
    t = np.empty_like(g)
    mc.Alltoall(g, t)
    np.testing.assert_array_equal(t.reshape(p, -1), [np.arange(8) + r for _ in range(p)])
    rs = np.empty(8, np.float32)
    mc.Reduce_scatter_block(g, rs)
    np.testing.assert_array_equal(rs, p * (np.arange(8) + r))
    req = mc.Iallreduce(x, y)
    req.Wait()
    np.testing.assert_array_equal(y, want)
    st = mc.stats()
    for name in ("Bcast", "Allgather", "Alltoall", "Reduce_scatter_block", "Iallreduce"):
        assert st[name]["calls"] == 1 and st[name]["fallbacks"] == {ONE_NODE: 1}, (name, st[name])
    mc.reset_stats()
    mc.Allreduce(x, y)
    assert mc.stats()["Allreduce"]["calls"] == 1


@pytest.mark.mpi(min_size=2)
def test_threshold_limit_sends_small_calls_plain_and_large_ones_compressed(comm):
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=4096, algorithm="ring")
    small = np.ones(100, np.float32)
    mc.Allreduce(small, np.empty_like(small))
    assert _shortcut_on(mc) and mc._shortcut.limit == 4096
    for _ in range(3):
        mc.Allreduce(small, np.empty_like(small))
    big = np.ones(1 << 14, np.float32)
    out = np.empty_like(big)
    mc.Allreduce(big, out)
    np.testing.assert_allclose(out, comm.Get_size(), rtol=1e-3)
    st = mc.stats()["Allreduce"]
    assert st["fallbacks"] == {"below threshold (400 B < 4096 B)": 4}
    assert st["calls"] == 5 and st["compressed"] == 1


@pytest.mark.mpi(min_size=2)
def test_a_subclass_override_is_not_shadowed(comm):
    class Counting(mpicomp.Comm):
        seen = 0

        def Allreduce(self, *args, **kwargs):  # noqa: N802
            type(self).seen += 1
            return super().Allreduce(*args, **kwargs)

    mc = Counting(comm)
    x = np.ones(4, np.float32)
    for _ in range(3):
        mc.Allreduce(x, np.empty_like(x))
    assert Counting.seen == 3 and _shortcut_on(mc)
    assert mc.stats()["Allreduce"]["calls"] == 3


@pytest.mark.mpi(min_size=2)
def test_without_the_extension_the_python_path_counts_the_same(comm, monkeypatch):
    monkeypatch.setattr(shortcut, "COMPILED", False)
    mc = mpicomp.Comm(comm)
    x = np.ones(1 << 18, np.float32)
    for n in (x.size, 4, 4):
        mc.Allreduce(x[:n], np.empty(n, np.float32))
    assert not _shortcut_on(mc)
    assert mc.stats()["Allreduce"]["fallbacks"] == {ONE_NODE: 3}


@pytest.mark.mpi(min_size=2)
def test_the_shortcut_itself_takes_the_calls_with_mpi4pys_keywords(comm):
    """The state's own counts (not the Python path's): positional and mpi4py's keywords
    (op, root) are taken; an mpicomp setting, IN_PLACE or a list buffer spec are not."""
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=1 << 20)
    x = np.ones(64, np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y)  # settles the limit
    mc._shortcut.take(shortcut.METHODS.index("Allreduce"))
    mc.Allreduce(x, y)
    mc.Allreduce(x, y, MPI.MAX)
    mc.Allreduce(x, y, op=MPI.MIN)
    mc.Allreduce(x, y, rate=8.25)  # a setting: the Python method
    mc.Allreduce(MPI.IN_PLACE, y)
    mc.Allreduce([x, MPI.FLOAT], [y, MPI.FLOAT])
    mc.Bcast(x, root=0)
    mc.Bcast(x, 0)
    assert mc._shortcut.take(shortcut.METHODS.index("Allreduce")) == {x.nbytes: 3}
    assert mc._shortcut.take(shortcut.METHODS.index("Bcast")) == {x.nbytes: 2}
    assert mc.stats()["Allreduce"]["calls"] == 4  # the first call and the three not taken
