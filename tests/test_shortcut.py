"""The compiled plain-MPI shortcut (mpicomp/fastpath/: install.py, _shortcut.c)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.decision.screen import ONE_NODE, P2P_AUTO
from mpicomp.fastpath import install as shortcut
from mpicomp.fastpath import methods as fast_methods

#: the compiled shortcut calls MPI itself only on MPICH (bind_mpi: C int handles); on any
#: other MPI (Open MPI: pointer handles) every call goes through mpi4py's methods
MPICH = MPI.Get_library_version().startswith("MPICH")
NOT_BOUND = (f"the shortcut calls MPI itself only on MPICH (C int handles); "
             f"{MPI.get_vendor()[0]}'s calls go through mpi4py's methods")


def test_the_shortcut_is_compiled():
    """`make venv` has a C compiler: without the extension, tiny calls cost 0.6 us more."""
    assert shortcut.COMPILED, "mpicomp.fastpath._shortcut was not built (pip install needs a C compiler)"


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


def test_one_table_describes_every_fast_method():
    """fast_methods.FAST_METHODS is the only description: its MPI functions are the
    extension's, its parameters mpi4py's, every Comm method it names exists."""
    assert shortcut.METHODS == fast_methods.METHODS
    assert len(set(fast_methods.METHODS)) == len(fast_methods.METHODS)
    for m in fast_methods.FAST_METHODS:
        names = fast_methods.params(m.name)
        assert m.mpi in shortcut._shortcut.FUNCTIONS, m
        for param in (m.sized, m.other, m.vspec):
            assert param is None or param in names, (m.name, param)
        assert set(fast_methods.keywords(m)) <= set(names), m
        assert callable(mpicomp.Comm.__dict__[m.name])


def test_the_compiled_allgatherv_reads_a_v_specs_largest_count():
    """The compiled Allgatherv reads a v-spec's size as the forms below say (the test's own
    reading, :func:`_largest_count`), form by form, and refuses the other forms."""
    a = np.zeros(12, np.float32)
    counts = [3, 5, 4]
    displs = [0, 3, 8]
    forms = [
        [a, counts], (a, counts), [a, (counts, displs)], [a, (tuple(counts), displs)],
        [a, counts, MPI.FLOAT], [a, counts, "f"], [a, counts, MPI.DOUBLE], [a, counts, "d"],
        [a, (counts, displs), MPI.BYTE], [a, counts, displs, MPI.FLOAT],
        [a, counts, displs, "i"], [a, [0, 0]], [a, []], [a, [2, -1]], [a, [2.0, 1]],
        [a, (3, 5)], [a, np.array(counts)], [a, counts, "Zf"], [a, counts, 7],
        [a.tolist(), counts], [a], [a, counts, displs, MPI.FLOAT, 1], a,
        [a, [True, 2]], [a, [1 << 40, 1]],
    ]
    for spec in forms:
        c_reading = shortcut._shortcut.largest_count(spec, np.ndarray)
        assert _largest_count(spec) == c_reading, spec


def _largest_count(spec: Any) -> int | None:
    """The test's reading of a v-spec's largest count in bytes, for the compiled one's:
    ``[array, counts]``, ``[array, (counts, displs)]``, ``[array, counts, datatype]``,
    ``[array, (counts, displs), datatype]`` or ``[array, counts, displs, datatype]``
    (counts a list of ints, a list or tuple in a pair; the datatype an ``MPI.Datatype``
    or a type character, the counts' unit; else the array's items), as the compiled
    shortcut reads it; None for any other form (device memory, counts in an array)."""
    if (type(spec) not in (list, tuple) or not 2 <= len(spec) <= 4
            or type(spec[0]) is not np.ndarray):
        return None
    unit = spec[0].itemsize
    if len(spec) > 2:
        datatype = spec[-1]
        if type(datatype) is str:
            datatype = MPI._typedict.get(datatype)
        if not isinstance(datatype, MPI.Datatype):
            return None
        unit = datatype.size
    counts = spec[1]
    if (len(spec) <= 3 and type(counts) is tuple and len(counts) == 2
            and type(counts[0]) in (list, tuple)):
        counts = counts[0]  # (counts, displs)
    elif type(counts) is not list:
        return None  # (a tuple of two ints reads as (count, displacement) to mpi4py)
    if not counts or not all(type(c) is int and c >= 0 for c in counts):
        return None
    return max(counts) * unit


def _plain_method(name: str, **kw):
    args = (getattr(MPI.Intracomm, name), mpicomp.Comm.__dict__[name].slow, np.ndarray,
            mpicomp.Comm.__dict__["_shortcut"], 0, fast_methods.params(name), ())
    return shortcut.PlainMethod(*args, **kw)


def test_the_extension_refuses_a_description_that_does_not_fit():
    assert _plain_method("Allreduce", mpi="MPI_Allreduce", other=2)  # as install makes it
    with pytest.raises(ValueError, match="kind 'collective', 'send'"):
        _plain_method("Allreduce", kind="gather")
    with pytest.raises(ValueError, match="a 'collective' method calls, got 'MPI_Send'"):
        _plain_method("Allreduce", mpi="MPI_Send")
    with pytest.raises(ValueError, match="got 'MPI_Nothing'"):
        _plain_method("Allreduce", mpi="MPI_Nothing")
    with pytest.raises(ValueError, match="a 'send' method calls, got 'MPI_Get_count'"):
        _plain_method("Send", kind="send", mpi="MPI_Get_count")
    with pytest.raises(ValueError, match="a send's params have dest"):
        _plain_method("Allreduce", kind="send")
    with pytest.raises(ValueError, match="a receive's params have its buffer"):
        _plain_method("Send", kind="receive")
    with pytest.raises(ValueError, match="sized, other and vspec are among them"):
        _plain_method("Bcast", other=3)
    with pytest.raises(ValueError, match="methods from 1 to 256, got 0"):
        shortcut.ShortcutState(0)


def test_a_state_too_small_for_a_method_leaves_its_calls_to_python():
    """A state counts for as many methods as it was made for; a method whose counts lie
    beyond it runs the Python method instead of writing past the state."""
    mc = mpicomp.Comm(MPI.COMM_SELF)
    x = np.ones(4, np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y)  # the first call gives it a state
    assert _shortcut_on(mc)
    mc._shortcut = small = shortcut.ShortcutState(1)  # Allreduce (index 0) only
    small.limit = small.p2p_limit = float("inf")
    mc.Bcast(x)
    mc.Allreduce(x, y)
    assert small.take(0) == {x.nbytes: 1}
    with pytest.raises(ValueError, match="from 0 to 0, got 1"):
        small.take(1)


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
    (op, root), buffer specs over arrays and MPI.IN_PLACE (sized by the receive buffer)
    are taken; an mpicomp setting or a
    spec over another kind of buffer are not."""
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=1 << 20)
    x = np.ones(64, np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y)  # settles the limit
    mc._shortcut.take(shortcut.METHODS.index("Allreduce"))
    mc.Allreduce(x, y)
    mc.Allreduce(x, y, MPI.MAX)
    mc.Allreduce(x, y, op=MPI.MIN)
    mc.Allreduce(x, y, rate=8.25)  # a setting: the Python method
    mc.Allreduce(MPI.IN_PLACE, y)  # sized by y
    mc.Allreduce([x, MPI.FLOAT], [y, MPI.FLOAT])
    mc.Allreduce([x, 10, MPI.FLOAT], [y, 10, MPI.FLOAT])  # counted by its count
    mc.Allreduce([memoryview(x), MPI.FLOAT], [y, MPI.FLOAT])
    mc.Bcast(x, root=0)
    mc.Bcast(x, 0)
    mc.Bcast([x, 3, 2, MPI.FLOAT], 0)
    with pytest.raises(ValueError, match="count 60 at displacement 5 needs 65 elements"):
        mc.Bcast([x, 60, 5, MPI.FLOAT], 0)  # past the array's end: the Python method says so
    assert mc._shortcut.take(shortcut.METHODS.index("Allreduce")) == {x.nbytes: 5, 40: 1}
    assert mc._shortcut.take(shortcut.METHODS.index("Bcast")) == {x.nbytes: 2, 12: 1}
    assert mc.stats()["Allreduce"]["calls"] == 3  # the first call and the two not taken


@pytest.mark.mpi(min_size=2)
def test_keyword_calls_take_the_shortcut_as_the_same_calls_by_position(comm):
    """Buffers and mpi4py's own parameters by keyword: the compiled method puts them in
    their places (mpi4py's defaults in the gaps) and takes the call as it takes the same
    call by position, with the same result; a keyword of mpicomp's goes to the Python
    method, a parameter given twice raises mpi4py's TypeError."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=1 << 20)
    x = np.full(64, r + 1, np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y)  # settles the limits
    for name in ("Allreduce", "Bcast", "Sendrecv", "Sendrecv_replace", "Recv"):
        _take(mc, name)
    mc.Allreduce(sendbuf=x, recvbuf=y)
    np.testing.assert_array_equal(y, p * (p + 1) / 2)
    mc.Allreduce(x, recvbuf=y, op=MPI.MAX)
    np.testing.assert_array_equal(y, p)
    mc.Allreduce(x, y, rate=8.25)  # a setting of mpicomp's: the Python method
    b = x.copy()
    mc.Bcast(buf=b, root=p - 1)
    np.testing.assert_array_equal(b, p)
    right, left = (r + 1) % p, (r - 1) % p
    mc.Sendrecv(x, dest=right, recvbuf=y, source=left)
    np.testing.assert_array_equal(y, left + 1)
    b = x.copy()
    mc.Sendrecv_replace(b, dest=right, sendtag=3, source=left, recvtag=3)
    np.testing.assert_array_equal(b, left + 1)
    with pytest.raises(TypeError):
        mc.Allreduce(x, y, sendbuf=x)
    assert _take(mc, "Allreduce") == {x.nbytes: 2}
    assert _take(mc, "Bcast") == {x.nbytes: 1}
    assert _take(mc, "Sendrecv") == {x.nbytes: 1}
    assert _take(mc, "Sendrecv_replace") == {x.nbytes: 1}
    assert _take(mc, "Recv") == {x.nbytes: 2}  # the receives of Sendrecv(_replace)
    assert mc.stats()["Allreduce"]["calls"] == 2  # the first call and the one with a setting


def _take(mc: mpicomp.Comm, name: str) -> dict[int, int]:
    return mc._shortcut.take(shortcut.METHODS.index(name))


def _default_pair(comm):
    """A default-policy communicator on ``comm`` (made on every rank: the construction is
    collective) with its point-to-point limits bound (no collective check), for a test of
    ranks 0 and 1; None on the other ranks."""
    mc = mpicomp.Comm(comm)
    if comm.Get_rank() > 1:
        return None
    mc.resolved_policy()
    return mc


@pytest.fixture
def pair(comm):
    """:func:`_default_pair` for a test of ranks 0 and 1; the other ranks skip it."""
    mc = _default_pair(comm)
    if mc is None:
        pytest.skip("a test of ranks 0 and 1")
    return mc


@pytest.fixture(params=["direct", "mpi4py"])
def receive_path(request):
    """The receiving shortcuts both ways: calling MPI itself (bound, the default on
    MPICH) and through mpi4py's methods (unbound); bound again afterwards."""
    direct = request.param == "direct"
    if direct and not MPICH:
        pytest.skip(NOT_BOUND)
    assert shortcut.bind_mpi(direct) == direct
    yield request.param
    assert shortcut.bind_mpi(True) == MPICH


@pytest.mark.skipif(not MPICH, reason=NOT_BOUND)
def test_receives_call_mpi_itself_on_mpich():
    """The project's MPI is MPICH: the shortcut is bound to its library (receives,
    Allreduce, Bcast, Reduce call MPI themselves)."""
    assert MPI.Get_library_version().startswith("MPICH")
    assert shortcut.bind_mpi() and shortcut._shortcut.bound()
    assert not shortcut.bind_mpi(False) and not shortcut._shortcut.bound()
    assert shortcut.bind_mpi() and shortcut._shortcut.bound()
    capi = MPI.__pyx_capi__
    addresses = {name: 1 for name in shortcut._shortcut.FUNCTIONS}
    good = (capi["PyMPIComm_Get"], capi["PyMPIStatus_Get"], capi["PyMPIOp_Get"],
            MPI.BYTE.handle)
    ops = (MPI.SUM.handle,)
    with pytest.raises(ValueError, match="one-letter buffer formats"):
        shortcut._shortcut.bind(addresses, *good, {"Zf": MPI.C_FLOAT_COMPLEX.handle}, ops,
                                MPI.Op, MPI.Exception)
    with pytest.raises(ValueError, match="nonzero int for MPI_Bcast"):
        shortcut._shortcut.bind({**addresses, "MPI_Bcast": 0}, *good, {}, ops, MPI.Op,
                                MPI.Exception)
    with pytest.raises(ValueError, match="SUM first"):
        shortcut._shortcut.bind(addresses, *good, {}, (), MPI.Op, MPI.Exception)
    assert shortcut._shortcut.bound()  # a refused bind leaves the binding as it was


@pytest.mark.skipif(MPICH, reason="on MPICH the shortcut calls MPI itself "
                    "(test_receives_call_mpi_itself_on_mpich)")
def test_other_mpis_take_the_shortcut_through_mpi4pys_methods():
    """On an MPI whose handles are not C ints (Open MPI) bind_mpi refuses: the compiled
    methods still take their calls, counted, and hand them to mpi4py's methods; nothing
    calls MPI from C."""
    assert MPI._sizeof(MPI.Comm) != 4 or not MPI.Get_library_version().startswith("MPICH")
    assert not shortcut.bind_mpi() and not shortcut._shortcut.bound()
    assert not shortcut._shortcut.nonblocking_bound()
    mc = mpicomp.Comm(MPI.COMM_SELF)
    x = np.arange(10, dtype=np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y)  # the first call settles the limit (and the settings check)
    before = shortcut._shortcut.direct_calls()
    mc.Allreduce(x, y)
    mc.Bcast(y, 0)
    request = mc.Iallreduce(x, y)
    request.Wait()
    np.testing.assert_array_equal(y, x)
    assert shortcut._shortcut.direct_calls() == before
    assert _take(mc, "Allreduce")[x.nbytes] >= 1
    assert _take(mc, "Bcast") == {y.nbytes: 1}
    assert _take(mc, "Iallreduce") == {x.nbytes: 1}


def test_a_blocked_receive_lets_other_threads_run():
    """A receive waiting in MPI releases the GIL, as mpi4py's does: the send that it
    waits for comes from another thread of the same rank."""
    import threading

    mc = mpicomp.Comm(MPI.COMM_SELF)
    mc.check_settings()
    try:
        for on in (True, False) if MPICH else (False,):  # elsewhere: mpi4py's Recv
            assert shortcut.bind_mpi(on) == on
            x = np.arange(100, dtype=np.float32) + on
            y = np.zeros_like(x)
            thread = threading.Thread(target=mc.Recv, args=(y, 0, 11))
            thread.start()
            thread.join(0.2)  # the receive is waiting (a held GIL would hang the send below)
            mc.Send(x, 0, 11)
            thread.join(10)
            assert not thread.is_alive()
            np.testing.assert_array_equal(y, x)
    finally:
        assert shortcut.bind_mpi(True) == MPICH


@pytest.mark.mpi(min_size=2)
def test_point_to_point_under_the_default_takes_the_shortcut(comm, receive_path):
    """Send, Isend, Irecv and Recv of the default policy (codec auto: point to point is
    never compressed) go straight to mpi4py, counted; the data arrive exact."""
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm)
    x = np.arange(1000, dtype=np.float32) + r
    y = np.empty_like(x)
    mc.check_settings()  # what a first collective does: settles the limits
    assert mc._shortcut.p2p_limit == float("inf")
    peer = 1 - r if r < 2 else None
    if peer is not None:
        st = MPI.Status()
        if r == 0:
            mc.Send(x, 1, 3)
            mc.Recv(y, 1, 4, st)  # status positional
            req = mc.Isend(x, dest=1, tag=5)
            req.Wait()
            mc.Recv(y, source=1, tag=6, status=st)  # keywords
        else:
            mc.Recv(y, 0, 3)  # no status: the shortcut's own
            np.testing.assert_array_equal(y, x - 1)
            mc.Send(x, dest=0, tag=4)
            req = mc.Irecv(y, 0, 5)
            req.Wait()
            np.testing.assert_array_equal(y, x - 1)
            mc.Send(x, 0, 6)
        if r == 0:
            np.testing.assert_array_equal(y, x + 1)
            assert st.Get_count(MPI.FLOAT) == x.size and st.Get_source() == 1
        # the state's own counts (taking them leaves them out of the stats)
        assert _take(mc, "Send") == {x.nbytes: 1 if r == 0 else 2}
        assert _take(mc, "Recv") == {x.nbytes: 2 if r == 0 else 1}
        assert _take(mc, ("Isend" if r == 0 else "Irecv")) == {x.nbytes: 1}
    # buffer specs are taken; what the shortcut does not take goes to the Python method:
    # settings
    if peer is not None:
        if r == 0:
            mc.Send([x, MPI.FLOAT], 1, 7)
            mc.Send(x, 1, 8, codec="none")
        else:
            mc.Recv([y, MPI.FLOAT], 0, 7)
            mc.Recv(y, 0, 8, codec="none")
        assert _take(mc, "Send") == ({x.nbytes: 1} if r == 0 else {})
        assert _take(mc, "Recv") == ({} if r == 0 else {x.nbytes: 1})
        st = mc.stats()
        if r == 0:
            assert st["Send"]["fallbacks"] == {"codec none": 1}
        else:
            assert st["Recv"]["fallbacks"] == {shortcut.RECEIVED_PLAIN: 1}


@pytest.mark.mpi(min_size=2)
def test_a_frame_reaches_a_default_receiver_through_the_shortcut(comm, receive_path, pair):
    """A sender that names a codec sends a compressed frame; the receiver's shortcut
    receives it as bytes into the buffer and decodes it there (any status form, a larger
    buffer, ANY_SOURCE), and an odd-length plain message of bytes stays exact."""
    r = comm.Get_rank()
    mc = pair
    x = np.sin(np.arange(4096, dtype=np.float64) / 50)
    odd = np.arange(13, dtype=np.uint8)
    if r == 0:
        for tag in range(4):
            mc.Send(x, 1, tag, codec="bitplane", rate=24.25, threshold=0)
        mc.Send(odd, 1, 9)
        assert mc.stats()["Send"]["compressed"] == 4
        return
    st = MPI.Status()
    y = np.zeros(x.size)
    mc.Recv(y, 0, 0)
    np.testing.assert_allclose(y, x, atol=1e-5)
    y[:] = 0
    mc.Recv(y, 0, 1, st)
    np.testing.assert_allclose(y, x, atol=1e-5)
    assert st.Get_count(MPI.DOUBLE) == x.size
    big = np.full(2 * x.size, 7.0)
    mc.Recv(big, source=MPI.ANY_SOURCE, tag=2, status=st)
    np.testing.assert_allclose(big[: x.size], x, atol=1e-5)
    assert st.Get_count(MPI.DOUBLE) == x.size and st.Get_source() == 0
    np.testing.assert_array_equal(big[x.size:], 7.0)  # nothing written past the message
    with pytest.raises(ValueError, match="does not fit"):
        mc.Recv(np.zeros(x.size // 2 + 200), 0, 3)  # the frame fits, its values do not
    b = np.zeros(16, np.uint8)
    mc.Recv(b, 0, 9, st)
    np.testing.assert_array_equal(b[:13], odd)
    assert st.Get_count(MPI.BYTE) == 13
    s = mc.stats()["Recv"]
    assert s["compressed"] == 3 and s["calls"] == 4  # the frame that did not fit: an error


@pytest.mark.mpi(min_size=2)
def test_sendrecv_under_the_default_is_plain_and_decodes_a_partners_frame(comm, receive_path,
                                                                         pair):
    r = comm.Get_rank()
    mc = pair
    def values(rank: int) -> np.ndarray:
        return np.cos(np.arange(2048, dtype=np.float32) / 30) + rank

    x, want = values(r), values(1 - r)
    y = np.empty_like(x)
    mc.Sendrecv(x, 1 - r, 1, y, 1 - r, 1)
    np.testing.assert_array_equal(y, want)
    # rank 1 names a codec: its message is a frame, which rank 0's fast path decodes
    kw = {"codec": "bitplane", "rate": 16.25, "threshold": 0} if r == 1 else {}
    mc.Sendrecv(x, 1 - r, 2, y, 1 - r, 2, **kw)
    np.testing.assert_allclose(y, want, atol=1e-3)
    st = mc.stats()
    assert st["Sendrecv"]["calls"] == 2
    assert st["Recv"]["compressed"] == (1 if r == 0 else 0)


@pytest.mark.mpi(min_size=2)
def test_point_to_point_without_the_extension_goes_plain_for_the_same_reasons(comm, monkeypatch):
    monkeypatch.setattr(shortcut, "COMPILED", False)
    r = comm.Get_rank()
    mc = _default_pair(comm)
    if mc is None:
        return
    assert mc._fast.limits.p2p == float("inf") and not hasattr(mc, "_shortcut")
    x = np.arange(10, dtype=np.float32)
    y = np.empty_like(x)
    if r == 0:
        mc.Send(x, 1, 0)
        mc.Send(x, 1, 1, codec="bitplane", threshold=0)  # 40 B: a frame is longer: plain
    else:
        mc.Recv(y, 0, 0)
        mc.Recv(y, 0, 1)
        np.testing.assert_array_equal(y, x)
    st = mc.stats()
    if r == 0:
        assert st["Send"]["fallbacks"] == {
            P2P_AUTO: 1, "no gain (compressed frame not smaller than the data)": 1}
    else:
        assert st["Recv"]["fallbacks"] == {shortcut.RECEIVED_PLAIN: 2}


@pytest.mark.mpi(min_size=2)
def test_sendrecv_positional_takes_the_shortcut_and_counts_its_receive(comm, receive_path, pair):
    r = comm.Get_rank()
    mc = pair
    x = np.full(300, r, np.float64)
    y = np.empty_like(x)
    st = MPI.Status()
    mc.Sendrecv(x, 1 - r, 0, y, 1 - r, 0)
    mc.Sendrecv(x, 1 - r, 0, y, 1 - r, 0, st)
    mc.Sendrecv(x, 1 - r, 0, recvbuf=y, status=st)  # keywords: put in their places
    np.testing.assert_array_equal(y, 1 - r)
    assert st.Get_count(MPI.DOUBLE) == x.size and st.Get_source() == 1 - r
    with pytest.raises(TypeError):  # a call of the wrong shape: refused, and not counted
        mc.Sendrecv(x, 1 - r, 0, y, 1 - r, 0, st, "one too many")
    assert _take(mc, "Sendrecv") == {x.nbytes: 3}
    assert _take(mc, "Recv") == {x.nbytes: 3}
    st = mc.stats()
    assert "Sendrecv" not in st and "Recv" not in st


@pytest.mark.mpi(min_size=2)
def test_reduce_gather_and_the_nonblocking_collectives_take_the_shortcut(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    mc.check_settings()  # the threshold limit (64 KiB): small calls are plain by size
    x = np.arange(6, dtype=np.float32) + r
    y = np.zeros_like(x)
    mc.Reduce(x, y, op=MPI.SUM, root=0)
    if r == 0:
        np.testing.assert_array_equal(y, sum(np.arange(6) + q for q in range(p)))
    g = np.zeros(p * x.size, np.float32)
    mc.Gather(x, g if r == 0 else None, root=0)
    if r == 0:
        np.testing.assert_array_equal(g.reshape(p, -1), [np.arange(6) + q for q in range(p)])
    b = x.copy()
    mc.Ibcast(b, root=1).Wait()
    np.testing.assert_array_equal(b, np.arange(6) + 1)
    mc.Iallgather(x, g).Wait()
    np.testing.assert_array_equal(g.reshape(p, -1), [np.arange(6) + q for q in range(p)])
    a = np.arange(2 * p, dtype=np.float32) + 10 * r
    t = np.empty_like(a)
    mc.Ialltoall(a, t).Wait()
    np.testing.assert_array_equal(t.reshape(p, 2), [[10 * q + 2 * r, 10 * q + 2 * r + 1]
                                                    for q in range(p)])
    for name, nbytes in (("Reduce", x.nbytes), ("Gather", x.nbytes), ("Ibcast", b.nbytes),
                         ("Iallgather", x.nbytes), ("Ialltoall", a.nbytes)):
        assert _take(mc, name) == {nbytes: 1}, name
    # in place at the root: the Python method, by the same size rule
    z = x.copy()
    mc.Reduce(MPI.IN_PLACE if r == 0 else z, z if r == 0 else None, root=0)
    if r == 0:
        np.testing.assert_array_equal(z, sum(np.arange(6) + q for q in range(p)))
        assert mc.stats()["Reduce"]["fallbacks"] == {"below threshold (24 B < 65536 B)": 1}


def _forbid_parsing(monkeypatch, name: str) -> None:
    """Make every method module's ``name`` (``parse`` or ``parse_v``) raise: a call that
    parses its buffers fails."""
    import importlib
    import pkgutil

    import mpicomp.calls

    def no_parse(*args, **kwargs):
        raise AssertionError("the fast path parsed a buffer")

    for info in pkgutil.iter_modules(mpicomp.calls.__path__):
        module = importlib.import_module(f"mpicomp.calls.{info.name}")
        if hasattr(module, name):
            monkeypatch.setattr(module, name, no_parse)


@pytest.mark.mpi(min_size=2)
def test_scatter_and_reduce_scatter_take_a_fast_path(comm, monkeypatch):
    """Small calls of the default skip parsing (a parse would raise here) and stay exact,
    the root in place included."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    mc.check_settings()
    _forbid_parsing(monkeypatch, "parse")
    send = np.arange(3 * p, dtype=np.float32)
    y = np.empty(3, np.float32)
    mc.Scatter(send if r == 0 else None, y, root=0)
    np.testing.assert_array_equal(y, np.arange(3 * r, 3 * r + 3))
    mine = send.copy()
    mc.Scatter(mine if r == 1 else None, MPI.IN_PLACE if r == 1 else y, root=1)
    if r != 1:
        np.testing.assert_array_equal(y, np.arange(3 * r, 3 * r + 3))
    out = np.empty(3, np.float32)
    mc.Reduce_scatter(send, out, [3] * p)
    np.testing.assert_array_equal(out, p * np.arange(3 * r, 3 * r + 3))
    mc.Reduce_scatter(send, out)  # recvcounts from the receive buffers (mpi4py's rule)
    np.testing.assert_array_equal(out, p * np.arange(3 * r, 3 * r + 3))
    monkeypatch.undo()
    st = mc.stats()
    assert st["Scatter"]["calls"] == 2 and st["Reduce_scatter"]["calls"] == 2


@pytest.mark.mpi(min_size=2)
def test_without_the_extension_the_python_methods_send_small_calls_plain(comm, monkeypatch):
    """No compiled shortcut: small calls of the default on bare arrays run the Python
    methods, which screen them and send them plain, exact."""
    monkeypatch.setattr(shortcut, "COMPILED", False)
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    mc.check_settings()
    assert not hasattr(mc, "_shortcut")
    x = np.arange(4, dtype=np.float64) + r
    total = sum(np.arange(4) + q for q in range(p))
    y = np.zeros_like(x)
    mc.Reduce(x, y, root=0)
    if r == 0:
        np.testing.assert_array_equal(y, total)
    g = np.zeros(4 * p)
    mc.Gather(x, g, root=0)
    mc.Iallgather(x, g).Wait()
    np.testing.assert_array_equal(g.reshape(p, 4), [np.arange(4) + q for q in range(p)])
    b = x.copy()
    mc.Ibcast(b, root=0).Wait()
    np.testing.assert_array_equal(b, np.arange(4))
    t = np.zeros(4 * p)
    mc.Ialltoall(np.repeat(x, p), t).Wait()
    mc.Scatter(g, y, root=0)
    np.testing.assert_array_equal(y, np.arange(4) + r)
    mc.Reduce_scatter(g, y, [4] * p)
    np.testing.assert_array_equal(y, p * (np.arange(4) + r))
    if r < 2:
        peer = 1 - r
        mc.Isend(x, peer, 1).Wait()
        mc.Irecv(y, peer, 1).Wait()
        np.testing.assert_array_equal(y, np.arange(4) + peer)
    monkeypatch.undo()
    st = mc.stats()
    for name in ("Reduce", "Gather", "Iallgather", "Ibcast", "Ialltoall", "Scatter",
                 "Reduce_scatter"):
        assert st[name]["calls"] == 1 and st[name]["compressed"] == 0, name


@pytest.mark.mpi(min_size=2)
def test_allgatherv_skips_parsing_where_every_size_goes_plain(comm, monkeypatch):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    big = np.ones(1 << 18, np.float32)
    mc.Allreduce(big, np.empty_like(big))  # finds the job on one node: every size plain
    assert mc._fast.limits.collective == float("inf")

    _forbid_parsing(monkeypatch, "parse_v")
    counts = [q + 1 for q in range(p)]
    out = np.zeros(sum(counts), np.float32)
    mc.Allgatherv(np.full(r + 1, r, np.float32), [out, counts])
    np.testing.assert_array_equal(out, np.repeat(np.arange(p), counts))
    monkeypatch.undo()
    assert mc.stats()["Allgatherv"]["fallbacks"] == {ONE_NODE: 1}
    # a threshold limit: the size is the largest count, read from the v-spec's counts
    # without parsing it (every rank sees the same counts, so decides alike)
    mc2 = mpicomp.Comm(comm, codec="bitplane")
    mc2.Allgatherv(np.full(r + 1, r, np.float32), [out, counts])  # settles the limit
    assert 0 < mc2._fast.limits.collective < float("inf")
    displs = [sum(counts[:q]) for q in range(p)]
    _forbid_parsing(monkeypatch, "parse_v")
    for spec in ([out, counts], [out, (counts, displs)], (out, (tuple(counts), displs))):
        out[:] = -1
        mc2.Allgatherv(np.full(r + 1, r, np.float32), spec)
        np.testing.assert_array_equal(out, np.repeat(np.arange(p), counts))
    monkeypatch.undo()
    st = mc2.stats()["Allgatherv"]
    assert st["calls"] == 4 and sum(st["fallbacks"].values()) == 4
    assert st["raw_bytes"] == 4 * p * 4  # the largest count's bytes, as the method counts
    # forms the fast path does not read go to the Python method, which decides the same
    out[:] = -1
    mc2.Allgatherv(np.full(r + 1, r, np.float32), [out, counts, MPI.FLOAT])
    np.testing.assert_array_equal(out, np.repeat(np.arange(p), counts))
    # above the threshold: compressed, by the Python method
    many = [16384 + q for q in range(p)]
    big_out = np.zeros(sum(many), np.float32)
    mc2.Allgatherv(np.full(16384 + r, r, np.float32), [big_out, many])
    np.testing.assert_allclose(big_out, np.repeat(np.arange(p), many), atol=1e-2)
    assert mc2.stats()["Allgatherv"]["compressed"] == 1


@pytest.mark.mpi(min_size=2)
def test_the_shortcut_takes_host_buffers_only(comm):
    """A call whose other buffer is not a NumPy array or a spec over one (a memoryview
    here; a device array alike) runs the Python method, which checks both buffers."""
    mc = mpicomp.Comm(comm)
    mc.check_settings()
    x = np.ones(16, np.float32)
    y = np.empty_like(x)
    index = shortcut.METHODS.index("Allreduce")
    mc._shortcut.take(index)
    mc.Allreduce(x, [memoryview(y), MPI.FLOAT])
    assert mc._shortcut.take(index) == {}
    mc.Allreduce(x, y)
    assert mc._shortcut.take(index) == {x.nbytes: 1}
    g = np.empty(16 * comm.Get_size(), np.float32)
    index = shortcut.METHODS.index("Gather")
    mc.Gather(x, g if comm.Get_rank() == 0 else None, root=0)  # None off the root: taken
    assert mc._shortcut.take(index) == {x.nbytes: 1}
    np.testing.assert_array_equal(y, comm.Get_size())


@pytest.mark.mpi(min_size=2)
def test_receives_keep_mpi4pys_types_errors_and_status(comm, receive_path, pair):
    """Both receive paths: every dtype arrives exact (Sendrecv's send datatype from the
    buffer's format, complex ones "Zf" and "Zd" too), a
    message too long for the buffer raises MPI.Exception (ERR_TRUNCATE) and leaves the
    pair in step, a strided receive buffer raises as mpi4py does, and a status reports
    source, tag and count."""
    r = comm.Get_rank()
    mc = pair
    peer = 1 - r
    before = shortcut._shortcut.direct_calls()
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_,
                  np.complex64, np.float16):
        x = (np.arange(37) % 3 + r).astype(dtype)
        y = np.zeros_like(x)
        st = MPI.Status()
        mc.Sendrecv(x, peer, 5, y, peer, 5, st)
        np.testing.assert_array_equal(y, (np.arange(37) % 3 + peer).astype(dtype))
        assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)) == (peer, 5, x.nbytes)
    # bound, every Sendrecv called MPI itself (complex64's format "Zf" too)
    assert shortcut._shortcut.direct_calls() - before == (8 if receive_path == "direct" else 0)
    x = np.arange(64, dtype=np.float64)
    if r == 0:
        mc.Send(x, 1, 6)
        mc.Send(x[:8], 1, 7)
        mc.Send(x[:8], 1, 8)
    else:
        with pytest.raises(MPI.Exception) as caught:
            mc.Recv(np.zeros(8), 0, 6)  # 512 bytes into 64
        assert caught.value.Get_error_class() == MPI.ERR_TRUNCATE
        with pytest.raises((BufferError, ValueError)):
            mc.Recv(np.zeros(16)[::2], 0, 7)  # not contiguous: refused before receiving
        y = np.zeros(8)
        mc.Recv(y, 0, 7)
        np.testing.assert_array_equal(y, x[:8])
        st = MPI.Status()
        mc.Recv(y, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
        assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.DOUBLE)) == (0, 8, 8)
    # a strided send buffer: refused by both paths as mpi4py refuses it
    with pytest.raises((BufferError, ValueError)):
        mc.Sendrecv(np.zeros(16)[::2], peer, 9, np.zeros(8), peer, 9)
    y = np.zeros(4)
    mc.Sendrecv(np.full(4, r, np.float64), peer, 10, y, peer, 10)  # still in step
    np.testing.assert_array_equal(y, peer)


def _spec_forms(a: np.ndarray, count: int, displ: int) -> list:
    """Receive specs over ``a`` in every form mpi4py reads that addresses ``count`` values
    from ``displ`` (the whole array where a form has no count)."""
    dt = MPI.FLOAT if a.dtype == np.float32 else MPI.DOUBLE
    char = a.dtype.char
    return [[a, dt], [a, char], (a, dt), [a, count], [a, (count, displ)],
            [a, count, dt], [a, (count, displ), dt], [a, count, displ, dt],
            [a, count, char], [a, count, displ, char]]


@pytest.mark.mpi(min_size=2)
def test_receives_of_buffer_specs_take_the_shortcut(comm, receive_path, pair):
    """Recv and Sendrecv into every buffer spec form over an array (a datatype or a type
    character, a count, a displacement) take the shortcut both ways: the values land
    where mpi4py puts them, nothing else is written, the status counts the values, a
    sender's compressed frame is decoded into the spec's part of the array, and a spec
    the shortcut does not read (a strided datatype, a count past the end) goes to the
    Python method, which gives mpi4py's result or mpicomp's error."""
    r = comm.Get_rank()
    mc = pair
    peer = 1 - r
    before = shortcut._shortcut.direct_calls()
    n, count, displ = 24, 10, 5
    for dtype in (np.float32, np.float64):
        x = (np.arange(n) * (r + 1)).astype(dtype)
        for i in range(len(_spec_forms(x, count, displ))):
            y, want = np.full(n, -1, dtype), np.full(n, -1, dtype)
            spec = _spec_forms(y, count, displ)[i]
            st = MPI.Status()
            mc.Sendrecv(x[:count], peer, i, spec, peer, i, st)
            comm.Sendrecv(x[:count], peer, i, _spec_forms(want, count, displ)[i], peer, i)
            np.testing.assert_array_equal(y, want)
            assert st.Get_count(_spec_forms(y, 1, 0)[0][1]) == count
            # Recv, and the send buffer a spec too
            y[:] = -1
            if r == 0:
                mc.Send(x[:count], 1, 100 + i)
                mc.Recv(spec, 1, 200 + i, st)
            else:
                mc.Recv(spec, 0, 100 + i, st)
                mc.Send(_spec_forms(x[:count], count, 0)[i], 0, 200 + i)
            np.testing.assert_array_equal(y, want)
            assert st.Get_source() == peer and st.Get_count(MPI.BYTE) == count * x.itemsize
    # two receive paths, 2 dtypes x 10 forms, a Sendrecv and a Recv each: all in the shortcut
    taken = sum(_take(mc, "Recv").values())
    assert taken == 2 * 2 * 10
    assert sum(_take(mc, "Sendrecv").values()) == 2 * 10
    # bound: each receive called MPI itself, and rank 0's sends of bare arrays (a spec
    # of a send goes to mpi4py's method)
    assert shortcut._shortcut.direct_calls() - before == (
        2 * 10 * (3 if r == 0 else 2) if receive_path == "direct" else 0)
    # a frame from a sender that names a codec, decoded into the spec's part
    x = np.sin(np.arange(300, dtype=np.float64) / 20)
    if r == 0:
        mc.Send(x, 1, 7, codec="bitplane", rate=24.25, threshold=0)
        mc.Send(x, 1, 8, codec="bitplane", rate=24.25, threshold=0)
    else:
        y = np.full(400, 7.0)
        st = MPI.Status()
        mc.Recv([y, 300, 50, MPI.DOUBLE], 0, 7, st)
        np.testing.assert_allclose(y[50:350], x, atol=1e-5)
        np.testing.assert_array_equal(y[:50], 7.0)
        np.testing.assert_array_equal(y[350:], 7.0)
        assert st.Get_count(MPI.DOUBLE) == x.size
        with pytest.raises(ValueError, match="does not fit"):
            mc.Recv([y, 200, 0, MPI.DOUBLE], 0, 8)  # the frame fits, its values do not
        assert mc.stats()["Recv"]["compressed"] == 1
    # specs the shortcut does not read: the Python method
    strided = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
    try:
        x = np.arange(8, dtype=np.float64) + r
        y, want = np.full(8, -1.0), np.full(8, -1.0)
        mc.Sendrecv(x[:4], peer, 9, [y, 1, strided], peer, 9)  # every other value
        comm.Sendrecv(x[:4], peer, 9, [want, 1, strided], peer, 9)
        np.testing.assert_array_equal(y, want)
    finally:
        strided.Free()
    with pytest.raises(ValueError, match="count 60 at displacement 5 needs 65 elements"):
        mc.Sendrecv(x, peer, 10, [y, 60, 5, MPI.DOUBLE], peer, 10)  # past the end: refused
    mc.Sendrecv(x, peer, 11, y, peer, 11)  # and the pair still in step
    np.testing.assert_array_equal(y, x - r + peer)
    assert not comm.Iprobe(peer, 10)  # the refused call sent nothing (sent before 11)
    assert _take(mc, "Recv") == {y.nbytes: 1}


@pytest.mark.mpi(min_size=2)
def test_derived_datatypes_in_order_take_the_shortcut_and_permuted_ones_do_not(comm, pair):
    """A contiguous run of a predefined datatype and a dup of one are their array's bytes in
    order: received in the shortcut. An indexed datatype whose blocks come in reverse
    order, with no gaps, has the same size, extent and lower bound but not their order:
    the Python method receives it, as mpi4py does (the shortcut once took it as bytes)."""
    r = comm.Get_rank()
    mc = pair
    peer = 1 - r
    n = 16
    contiguous = MPI.DOUBLE.Create_contiguous(n).Commit()
    dup = contiguous.Dup().Commit()
    permuted = MPI.DOUBLE.Create_indexed([n // 2, n // 2], [n // 2, 0]).Commit()
    try:
        x = np.arange(n, dtype=np.float64) + 100 * r
        mc.Sendrecv(x, peer, 99, np.empty(n), peer, 99)  # (a first call turns the shortcut on)
        _take(mc, "Sendrecv")
        for tag, t in enumerate((contiguous, dup, permuted, permuted)):
            y, want = np.full(n, -1.0), np.full(n, -1.0)
            mc.Sendrecv(x, peer, tag, [y, 1, t], peer, tag)
            comm.Sendrecv(x, peer, tag, [want, 1, t], peer, tag)
            np.testing.assert_array_equal(y, want)
        assert sum(_take(mc, "Sendrecv").values()) == 2
    finally:
        for t in (contiguous, dup, permuted):
            t.Free()


@pytest.mark.mpi(min_size=2)
def test_allgatherv_of_buffer_specs_takes_the_shortcut(comm, receive_path):
    """Allgatherv's send buffer as a spec, and its receive v-spec with a datatype or a
    type character (counts and displacements in its units), take the shortcut, sized by
    the largest count, and give what mpi4py gives."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc, _ = _default_with_shortcut(comm)
    counts = [q + 2 for q in range(p)]
    displs = [sum(counts[:q]) + q for q in range(p)]
    x = np.full(r + 2, r + 1, np.float64)
    cases = [(x, lambda o: [o, counts, MPI.DOUBLE]),
             ([x, MPI.DOUBLE], lambda o: [o, counts]),
             ([x, r + 2, MPI.DOUBLE], lambda o: [o, (counts, displs), MPI.DOUBLE]),
             ([x, "d"], lambda o: [o, counts, displs, "d"]),
             ([x, r + 2, 0, MPI.DOUBLE], lambda o: (o, counts, displs, MPI.DOUBLE))]
    for send, vspec in cases:
        got = np.full(sum(counts) + p, -1.0)
        want = got.copy()
        mc.Allgatherv(send, vspec(got))
        comm.Allgatherv(send, vspec(want))
        np.testing.assert_array_equal(got, want)
    assert _take(mc, "Allgatherv") == {8 * max(counts): len(cases)}
    assert "Allgatherv" not in mc.stats()  # none went to the Python method


def _default_with_shortcut(comm):
    """A communicator of the default policy on ``comm`` with its shortcut on, and how many
    calls have called MPI themselves so far."""
    mc = mpicomp.Comm(comm)
    mc.check_settings()
    assert _shortcut_on(mc)
    return mc, shortcut._shortcut.direct_calls()


@pytest.mark.mpi(min_size=2)
def test_in_place_collectives_take_the_shortcut_sized_by_their_receive_buffer(comm):
    """MPI.IN_PLACE: the compiled methods size the call by the other buffer (Allgather: one
    rank's part of it, as the Python methods' fast path does) and call MPI (Allreduce,
    Iallreduce, bound) or mpi4py: the plain result, counted as plain calls of that size."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc, before = _default_with_shortcut(comm)
    y = np.full(6, r + 1.0)
    mc.Allreduce(MPI.IN_PLACE, y)
    np.testing.assert_array_equal(y, p * (p + 1) / 2)
    z = np.full(4, float(r))
    mc.Iallreduce(MPI.IN_PLACE, z, op=MPI.MAX).Wait()
    np.testing.assert_array_equal(z, p - 1.0)
    # bound (MPICH), both called MPI_Allreduce / MPI_Iallreduce with MPI_IN_PLACE themselves
    # (and below, Allgather and Iallgather)
    direct = int(shortcut._shortcut.bound()) + int(shortcut._shortcut.nonblocking_bound())
    assert shortcut._shortcut.direct_calls() - before == direct
    assert mc._shortcut.take(shortcut.METHODS.index("Allreduce")) == {y.nbytes: 1}
    assert mc._shortcut.take(shortcut.METHODS.index("Iallreduce")) == {z.nbytes: 1}
    g = np.zeros(3 * p)
    g[3 * r: 3 * r + 3] = r
    mc.Allgather(MPI.IN_PLACE, g)
    np.testing.assert_array_equal(g, np.repeat(np.arange(p, dtype=float), 3))
    assert mc._shortcut.take(shortcut.METHODS.index("Allgather")) == {3 * 8: 1}
    gi = np.zeros(2 * p, np.float32)
    gi[2 * r: 2 * r + 2] = r
    mc.Iallgather(MPI.IN_PLACE, gi).Wait()
    np.testing.assert_array_equal(gi, np.repeat(np.arange(p, dtype=np.float32), 2))
    assert shortcut._shortcut.direct_calls() - before == 2 * direct
    mc._shortcut.size = 0  # (no size known: the Python method's fast path, the same count)
    mc.Allgather(MPI.IN_PLACE, g)
    np.testing.assert_array_equal(g, np.repeat(np.arange(p, dtype=float), 3))
    assert mc._shortcut.take(shortcut.METHODS.index("Allgather")) == {}
    st = mc.stats()  # (take drained the compiled counts: the Python path's call is left)
    assert st["Allgather"]["calls"] == 1 and st["Allgather"]["raw_bytes"] == 3 * 8
    assert st["Allgather"]["compressed"] == 0


def _gather_and_exchange_match(mc, comm, x, every, gather: str, exchange: str) -> None:
    """``mc``'s ``gather`` of ``x`` and ``exchange`` of ``every`` (Allgather and Alltoall,
    or their nonblocking forms, waited for) give what the plain ``comm``'s blocking ones
    give."""
    for name, plain, sent in ((gather, "Allgather", x), (exchange, "Alltoall", every)):
        got, want = np.zeros_like(every), np.zeros_like(every)
        req = getattr(mc, name)(sent, got)
        if req is not None:
            req.Wait()
        getattr(comm, plain)(sent, want)
        np.testing.assert_array_equal(got, want)


@pytest.mark.mpi(min_size=2)
def test_blocking_collectives_give_what_mpi4py_gives(comm, receive_path):
    """Both ways (MPI called directly, bound; mpi4py's methods, unbound): Allreduce, Reduce,
    Bcast, Gather, Scatter, Allgather and Alltoall on every dtype, predefined ops, every
    root, keywords; a user-defined op and mismatched buffers (which go to mpi4py): the
    plain communicator's results and errors, every call counted."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc, before = _default_with_shortcut(comm)
    cases = [(np.float32, MPI.SUM), (np.float64, MPI.MAX), (np.int32, MPI.PROD),
             (np.int64, MPI.BAND), (np.uint8, MPI.BOR), (np.bool_, MPI.LOR),
             (np.float16, MPI.MIN), (np.complex64, MPI.SUM)]  # complex: format "Zf"
    for dtype, op in cases:
        x = (np.arange(23) % 5 + r + 1).astype(dtype)
        got, want = np.empty_like(x), np.empty_like(x)
        mc.Allreduce(x, got, op)
        comm.Allreduce(x, want, op)
        np.testing.assert_array_equal(got, want)
        mc.Allreduce(x, got, op=op)  # keyword
        np.testing.assert_array_equal(got, want)
        for root in range(p):
            got[:] = 0
            want[:] = 0
            mc.Reduce(x, got if r == root else None, op, root)
            comm.Reduce(x, want if r == root else None, op, root)
            np.testing.assert_array_equal(got, want)
            b = x.copy() if r == root else np.zeros_like(x)
            mc.Bcast(b, root=root)
            np.testing.assert_array_equal(b, (np.arange(23) % 5 + root + 1).astype(dtype))
            every = np.concatenate([x + k for k in range(p)]).astype(dtype)  # p parts
            got_p, want_p = np.zeros_like(every), np.zeros_like(every)
            mc.Gather(x, got_p if r == root else None, root)
            comm.Gather(x, want_p if r == root else None, root)
            np.testing.assert_array_equal(got_p, want_p)
            part, want_part = np.zeros_like(x), np.zeros_like(x)
            mc.Scatter(every if r == root else None, part, root=root)
            comm.Scatter(every if r == root else None, want_part, root=root)
            np.testing.assert_array_equal(part, want_part)
        _gather_and_exchange_match(mc, comm, x, every, "Allgather", "Alltoall")
    st = mc.stats()
    n = len(cases)
    assert (st["Allreduce"]["calls"], st["Reduce"]["calls"], st["Bcast"]["calls"],
            st["Gather"]["calls"], st["Scatter"]["calls"], st["Allgather"]["calls"],
            st["Alltoall"]["calls"]) == (2 * n, p * n, p * n, p * n, p * n, n, n)
    # bound, every call called MPI itself (complex64's format "Zf": MPI.C_FLOAT_COMPLEX)
    direct = n * (4 + 4 * p) if receive_path == "direct" else 0
    assert shortcut._shortcut.direct_calls() - before == direct
    # a user-defined op: mpi4py's own (the op's Python function runs)
    def add(a, b, datatype):
        out = np.frombuffer(b, np.float64)
        out += 2 * np.frombuffer(a, np.float64)

    doubled = MPI.Op.Create(add, commute=True)
    x = np.full(4, r + 1.0)
    y, want = np.zeros(4), np.zeros(4)
    try:
        mc.Allreduce(x, y, doubled)
        comm.Allreduce(x, want, doubled)
    finally:
        doubled.Free()
    np.testing.assert_array_equal(y, want)
    # a receive buffer of another dtype, and one of another size: what mpi4py does
    for other in (np.zeros(4, np.float32), np.zeros(5)):
        try:
            comm.Allreduce(x, other.copy())
            plain = None
        except Exception as e:  # noqa: BLE001 - compared below
            plain = type(e)
        if plain is None:
            mc.Allreduce(x, other)
        else:
            with pytest.raises(plain):
                mc.Allreduce(x, other)
    # an Allgather receive buffer larger than the parts: mpi4py's counts (from the buffer)
    x = np.arange(3.0) + r
    got_p, want_p = np.zeros(3 * p + p), np.zeros(3 * p + p)
    mc.Allgather(x, got_p)
    comm.Allgather(x, want_p)
    np.testing.assert_array_equal(got_p, want_p)
    # a root out of range: MPI's own error, as mpi4py raises it
    with pytest.raises(MPI.Exception) as caught:
        mc.Bcast(np.zeros(3), root=p)
    assert caught.value.Get_error_class() == MPI.ERR_ROOT
    with pytest.raises(MPI.Exception):
        mc.Reduce(np.zeros(3), np.zeros(3), root=p)
    y = np.zeros(3)
    mc.Allreduce(np.ones(3), y)  # still in step
    np.testing.assert_array_equal(y, p)


@pytest.mark.mpi(min_size=2)
def test_nonblocking_calls_give_what_mpi4py_gives(comm, receive_path):
    """Both ways (bound: Send, Isend, Irecv, Iallreduce, Ibcast, Iallgather and Ialltoall
    call MPI themselves; unbound: mpi4py's methods): the plain communicator's results, an
    MPI.Request that keeps its buffers alive until it completes (as mpi4py's do), MPI's
    errors as mpi4py raises them, every call counted."""
    import gc
    import sys

    p, r = comm.Get_size(), comm.Get_rank()
    right, left = (r + 1) % p, (r - 1) % p
    mc = mpicomp.Comm(comm)
    mc.check_settings()
    assert _shortcut_on(mc)
    bound = receive_path == "direct"
    assert shortcut._shortcut.nonblocking_bound() == bound
    before = shortcut._shortcut.direct_calls()
    dtypes = [np.float32, np.float64, np.int32, np.uint8, np.complex64]  # complex: "Zf"
    for dtype in dtypes:
        x = (np.arange(11) % 7 + 3 * r + 1).astype(dtype)
        y, z = np.zeros_like(x), np.zeros_like(x)
        reqs = [mc.Irecv(y, left, 5), mc.Irecv(z, source=left, tag=6),
                mc.Isend(x, right, 5), mc.Isend(x, dest=right, tag=6)]
        assert all(type(q) is MPI.Request for q in reqs)
        MPI.Request.Waitall(reqs)
        assert all(q == MPI.REQUEST_NULL for q in reqs)
        want = (np.arange(11) % 7 + 3 * left + 1).astype(dtype)
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(z, want)
        if r == 0:
            mc.Send(x, right, 7)
            mc.Recv(y, left, 7)
        else:
            mc.Recv(y, left, 7)
            mc.Send(x, right, 7)
        np.testing.assert_array_equal(y, want)
        got, ref = np.zeros_like(x), np.zeros_like(x)
        op = MPI.MAX if dtype is not np.complex64 else MPI.SUM
        MPI.Request.Waitall([mc.Iallreduce(x, got, op), comm.Iallreduce(x, ref, op)])
        np.testing.assert_array_equal(got, ref)
        for root in range(p):
            b = x.copy() if r == root else np.zeros_like(x)
            mc.Ibcast(b, root=root).Wait()
            np.testing.assert_array_equal(b, (np.arange(11) % 7 + 3 * root + 1).astype(dtype))
        every = np.concatenate([x + k for k in range(p)]).astype(dtype)
        _gather_and_exchange_match(mc, comm, x, every, "Iallgather", "Ialltoall")
    st = mc.stats()
    n = len(dtypes)
    assert (st["Isend"]["calls"], st["Irecv"]["calls"], st["Send"]["calls"],
            st["Iallreduce"]["calls"], st["Ibcast"]["calls"], st["Iallgather"]["calls"],
            st["Ialltoall"]["calls"]) == (2 * n, 2 * n, n, n, p * n, n, n)
    # every dtype calls MPI itself (complex64's format "Zf": MPI.C_FLOAT_COMPLEX)
    direct = n * (9 + p) if bound else 0
    assert shortcut._shortcut.direct_calls() - before == direct
    # a pending request holds its buffers, and lets go of them when it completes
    buf = np.zeros(1000)
    held = sys.getrefcount(buf)
    req = mc.Irecv(buf, left, 8)
    assert sys.getrefcount(buf) > held
    out = mc.Isend(np.full(1000, float(r)), right, 8)  # the request holds the only reference
    gc.collect()
    MPI.Request.Waitall([req, out])
    np.testing.assert_array_equal(buf, float(left))
    assert sys.getrefcount(buf) == held
    # MPI's errors as mpi4py raises them; a read-only receive buffer as mpi4py refuses it
    with pytest.raises(MPI.Exception) as caught:
        mc.Isend(np.zeros(3), p, 9)
    assert caught.value.Get_error_class() == MPI.ERR_RANK
    with pytest.raises(MPI.Exception):
        mc.Send(np.zeros(3), p, 9)
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        mc.Irecv(frozen, left, 9)
    y = np.zeros(3)
    mc.Iallreduce(np.ones(3), y).Wait()  # still in step
    np.testing.assert_array_equal(y, p)


@pytest.mark.mpi(min_size=2)
def test_allgatherv_takes_the_compiled_shortcut_by_its_largest_count(comm, receive_path):
    """Allgatherv's size is its v-spec's largest count (the same on every rank): the
    compiled method reads it from ``[array, counts]`` and ``[array, (counts, displs)]``
    and counts the call there (bound: calling MPI_Allgatherv itself, with mpicomp's
    displacements where none are given, as mpi4py makes them); other forms go to the
    Python method."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    mc.check_settings()
    assert _shortcut_on(mc)
    counts = [q + 2 for q in range(p)]
    displs = [sum(counts[:q]) for q in range(p)]
    out = np.zeros(sum(counts), np.float32)
    x = np.full(r + 2, r, np.float32)
    before = shortcut._shortcut.direct_calls()
    for spec in ([out, counts], [out, (counts, displs)], (out, (tuple(counts), displs))):
        out[:] = -1
        mc.Allgatherv(x, spec)
        np.testing.assert_array_equal(out, np.repeat(np.arange(p), counts))
    # displacements in another order, with gaps: each part where they say
    backwards = [sum(counts[q + 1:]) + 3 * (p - 1 - q) for q in range(p)]
    wide, want = np.full(sum(counts) + 3 * p, -1, np.float32), None
    mc.Allgatherv(x, [wide, (counts, backwards)])
    want = np.full_like(wide, -1)
    comm.Allgatherv(x, [want, (counts, backwards)])
    np.testing.assert_array_equal(wide, want)
    assert _take(mc, "Allgatherv") == {4 * max(counts): 4}
    assert shortcut._shortcut.direct_calls() - before == (4 if receive_path == "direct" else 0)
    mc.Allgatherv(x, [out, np.array(counts)])  # counts in an array: the Python method
    mc.Allgatherv(x, [out, counts])
    assert _take(mc, "Allgatherv") == {4 * max(counts): 1}
    assert mc.stats()["Allgatherv"]["calls"] == 1  # the Python method's own count


@pytest.mark.mpi(min_size=2)
def test_reduce_scatter_gives_what_mpi4py_gives(comm, receive_path):
    """Both ways (bound: MPI_Reduce_scatter_block and MPI_Reduce_scatter called directly,
    the counts gathered first where the call gives none, as mpi4py does; unbound:
    mpi4py's methods): the plain communicator's results on every dtype and predefined op,
    with counts of every form and uneven ones; calls that do not fit (counts in an array,
    counts that do not match the buffers) go to mpi4py and raise what it raises, on every
    rank, so no rank is left waiting."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc, before = _default_with_shortcut(comm)
    cases = [(np.float32, MPI.SUM), (np.float64, MPI.MAX), (np.int32, MPI.PROD),
             (np.uint8, MPI.BOR), (np.complex64, MPI.SUM)]  # complex: format "Zf"
    uneven = [q % 3 + 1 for q in range(p)]  # a rank-dependent receive count
    for dtype, op in cases:
        x = (np.arange(5 * p) % 4 + r + 1).astype(dtype)
        got, want = np.zeros(5, dtype), np.zeros(5, dtype)
        mc.Reduce_scatter_block(x, got, op)
        comm.Reduce_scatter_block(x, want, op)
        np.testing.assert_array_equal(got, want)
        for counts in (None, [5] * p, tuple([5] * p)):
            got[:] = 0
            mc.Reduce_scatter(x, got, counts, op=op)
            np.testing.assert_array_equal(got, want)
        y = (np.arange(sum(uneven)) % 4 + r + 1).astype(dtype)
        got, want = np.zeros(uneven[r], dtype), np.zeros(uneven[r], dtype)
        mc.Reduce_scatter(y, got, uneven, op)
        comm.Reduce_scatter(y, want, uneven, op)
        np.testing.assert_array_equal(got, want)
        got[:] = 0
        mc.Reduce_scatter(y, got, op=op)  # the uneven counts gathered
        np.testing.assert_array_equal(got, want)
    n = len(cases)
    st = mc.stats()
    assert (st["Reduce_scatter_block"]["calls"], st["Reduce_scatter"]["calls"]) == (n, 5 * n)
    direct = n * 6 if receive_path == "direct" else 0
    assert shortcut._shortcut.direct_calls() - before == direct
    # counts in an array: mpi4py's own call, the same result
    x = np.arange(4.0 * p) + r
    got, want = np.zeros(4), np.zeros(4)
    mc.Reduce_scatter(x, got, np.full(p, 4))
    comm.Reduce_scatter(x, want, [4] * p)
    np.testing.assert_array_equal(got, want)
    # counts that do not match the buffers (on every rank): mpi4py's errors
    for counts in ([4] * (p + 1), [5] * p, [-4, 8] + [4] * (p - 2)):
        try:
            comm.Reduce_scatter(x, want, counts)
            plain = None
        except ValueError as e:
            plain = str(e)
        assert plain is not None
        with pytest.raises(ValueError) as caught:
            mc.Reduce_scatter(x, got, counts)
        assert str(caught.value) == plain
    with pytest.raises(ValueError, match=f"mismatch in send count {5 * p} and sum"):
        mc.Reduce_scatter(np.zeros(5 * p), got)  # gathered: 4 a rank, not 5
    for wrong in (np.zeros(4 * p + 1), np.zeros(5 * p)):
        with pytest.raises(ValueError) as plain:
            comm.Reduce_scatter_block(wrong, want)
        with pytest.raises(ValueError) as caught:
            mc.Reduce_scatter_block(wrong, got)
        assert str(caught.value) == str(plain.value)
    mc.Reduce_scatter_block(np.ones(4 * p), got)  # still in step
    np.testing.assert_array_equal(got, p)


def test_a_one_rank_communicator_takes_the_fast_path_at_every_size():
    """One rank (a job started without mpiexec): every collective is plain, so after the
    first call every bare-array collective of any size takes the compiled path, counted
    under its reason "single rank"; results are mpi4py's."""
    mc = mpicomp.Comm(MPI.COMM_SELF)
    big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB, far above the threshold
    out = np.empty_like(big)
    mc.Allreduce(big, out)  # the first call settles the limits
    for _ in range(3):
        mc.Allreduce(big, out)
        mc.Bcast(big, root=0)
    np.testing.assert_array_equal(out, big)
    st = mc.stats()
    assert st["Allreduce"]["fallbacks"] == {"single rank": 4}
    assert st["Bcast"]["fallbacks"] == {"single rank": 3}
    if shortcut.COMPILED:
        assert mc._shortcut.limit == float("inf")


#: every dtype mpi4py maps, as the overhead benchmark's --dtypes all times them
EVERY_DTYPE = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
               "uint16", "uint32", "uint64", "bool", "complex64", "complex128")


def _small(dtype: str, n: int) -> np.ndarray:
    return (np.arange(n) % 2 == 1) if dtype == "bool" else (np.arange(n) % 3).astype(dtype)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", EVERY_DTYPE)
def test_odd_and_empty_messages_of_every_dtype_stay_in_the_shortcut(comm, receive_path, pair,
                                                                    dtype):
    """A message of 0, 1, 3 or 5 values of any dtype (an odd number of bytes too) is
    received by the compiled shortcut and counted there, exact: too short to be a
    compressed frame (frame_format.MIN_FRAME_NBYTES), it never goes to the Python side."""
    r = comm.Get_rank()
    mc = pair
    counts = (0, 1, 3, 5)
    for tag, n in enumerate(counts):
        x = _small(dtype, n)
        if r == 0:
            mc.Send(x, 1, tag)
        else:
            y = np.zeros_like(x) if n else np.zeros(1, x.dtype)
            st = MPI.Status()
            mc.Recv(y, 0, tag, st)
            assert st.Get_count(MPI.BYTE) == x.nbytes
            np.testing.assert_array_equal(y[:n], x)
    sizes = {}
    for n in counts:
        nbytes = _small(dtype, n).nbytes if r == 0 else max(_small(dtype, n).nbytes,
                                                           np.dtype(dtype).itemsize)
        sizes[nbytes] = sizes.get(nbytes, 0) + 1
    assert _take(mc, "Send" if r == 0 else "Recv") == sizes
    assert "Recv" not in mc.stats()  # (nothing reached the Python methods)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", EVERY_DTYPE)
def test_empty_and_odd_collectives_of_every_dtype_take_the_shortcut(comm, dtype):
    """Allreduce (bool: LOR), Bcast and Allgather of 0, 1 and 3 values of any dtype under
    the default on one node: counted by the compiled shortcut, exact."""
    mc = mpicomp.Comm(comm)
    p = comm.Get_size()
    op = MPI.LOR if dtype == "bool" else MPI.SUM
    mc.Allreduce(np.zeros(8, np.float32), np.zeros(8, np.float32))  # settles the default
    _take(mc, "Allreduce")
    for n in (0, 1, 3):
        x = _small(dtype, n)
        y = np.zeros_like(x)
        mc.Allreduce(x, y, op)
        ref = np.zeros_like(x)
        comm.Allreduce(x, ref, op)
        np.testing.assert_array_equal(y, ref)
        mc.Bcast(x, root=0)
        g = np.zeros(n * p, x.dtype)
        mc.Allgather(x, g)
        np.testing.assert_array_equal(g, np.tile(x, p))
    nbytes = {_small(dtype, n).nbytes for n in (0, 1, 3)}
    for name in ("Allreduce", "Bcast", "Allgather"):
        assert set(_take(mc, name)) == nbytes, name


@pytest.mark.skipif(not MPICH, reason=NOT_BOUND)
@pytest.mark.mpi(min_size=2)
def test_complex_buffers_call_mpi_themselves(comm):
    """complex64/complex128 arrays (buffer formats "Zf", "Zd") take the direct calls as the
    one-letter formats do: MPI's C_FLOAT_COMPLEX / C_DOUBLE_COMPLEX."""
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm)
    mc.Allreduce(np.zeros(8, np.float32), np.zeros(8, np.float32))  # settles the default
    for dtype in (np.complex64, np.complex128):
        x = (np.arange(5) + 1j * r).astype(dtype)
        y = np.zeros_like(x)
        before = shortcut._shortcut.direct_calls()
        mc.Allreduce(x, y)
        ref = np.zeros_like(x)
        comm.Allreduce(x, ref)
        np.testing.assert_array_equal(y, ref)
        if r < 2:
            if r == 0:
                mc.Send(x, 1, 3)
            else:
                mc.Recv(y, 0, 3)
                np.testing.assert_array_equal(y, (np.arange(5) + 0j).astype(dtype))
        assert shortcut._shortcut.direct_calls() - before == (2 if r < 2 else 1), dtype


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", EVERY_DTYPE)
def test_sendrecv_replace_of_every_dtype_stays_in_the_shortcut(comm, receive_path, pair, dtype):
    """Sendrecv_replace of 0, 1, 3, 5 and 64 values of any dtype, positional, with a status
    positional or by keyword, or a buffer spec: exchanged by the compiled shortcut (calling
    MPI_Sendrecv_replace itself where bound) and counted there, exact, the status the
    message's; never the Python method."""
    r = comm.Get_rank()
    mc = pair
    before = shortcut._shortcut.direct_calls()
    for tag, n in enumerate((0, 1, 3, 5, 64)):
        mine, theirs = _small(dtype, n), np.roll(_small(dtype, n), 1)
        x = mine.copy() if r == 0 else theirs.copy()
        st = MPI.Status()
        if tag % 3 == 0:
            mc.Sendrecv_replace(x, 1 - r, tag, 1 - r, tag, st)
        elif tag % 3 == 1:
            mc.Sendrecv_replace(x, 1 - r, tag, status=st)
        else:
            mc.Sendrecv_replace([x, MPI.BYTE], 1 - r, tag, 1 - r, tag, st)
        np.testing.assert_array_equal(x, theirs if r == 0 else mine)
        assert (st.Get_source(), st.Get_tag(), st.Get_count(MPI.BYTE)) == (1 - r, tag, x.nbytes)
    # every call calls MPI itself where bound (a keyword status put in its place)
    assert shortcut._shortcut.direct_calls() - before == (5 if receive_path == "direct" else 0)
    assert "Sendrecv_replace" not in mc.stats() or mc.stats()["Sendrecv_replace"]["calls"] == 5
    assert "Recv" not in mc.stats() or mc.stats()["Recv"]["compressed"] == 0


@pytest.mark.mpi(min_size=2)
def test_sendrecv_replace_under_the_default_decodes_a_partners_frame(comm, receive_path, pair):
    """A partner that compresses sends a frame; the compiled Sendrecv_replace receives it
    as bytes and decodes it in place."""
    r = comm.Get_rank()
    mc = pair
    want = np.cos(np.arange(2048, dtype=np.float32) / 30) + (1 - r)
    x = np.cos(np.arange(2048, dtype=np.float32) / 30) + r
    kw = {"codec": "bitplane", "rate": 16.25, "threshold": 0} if r == 1 else {}
    if kw:  # rank 1 names a codec (a Sendrecv: Sendrecv_replace takes no settings)
        mc.Sendrecv(x.copy(), 0, 5, x, 0, 5, **kw)
    else:
        mc.Sendrecv_replace(x, 1, 5, 1, 5)
    np.testing.assert_allclose(x, want, atol=1e-3)
    assert mc.stats()["Recv"]["compressed"] == (1 if r == 0 else 0)
