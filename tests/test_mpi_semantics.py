"""MPI's semantics under compression: mixed datatypes in one collective, probes, inherited methods.

Every test names a codec (bitplane 16.25, threshold 0), so that each call
would compress where mpicomp lets it. MPI lets the ranks of a collective
pass different datatypes with the same type signature; every rank must
then take the same path (a hang otherwise: each test has a short timeout).
Probes and statuses must describe the message, not its compressed frame.
The methods mpicomp inherits from mpi4py must either work with compressing
peers or stay plain on every rank.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.codecs import get_codec

CODEC = {"id": "bitplane", "rate": 16.25}
N = 4096

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


@pytest.fixture
def mc(comm):
    c = mpicomp.Comm(comm, codec=CODEC, threshold=0)
    yield c


def values(seed: int, n: int = N, dtype=np.float64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def assert_within_one_encode(y: np.ndarray, x: np.ndarray) -> None:
    """``y`` is ``x`` after one encode and decode with CODEC (its stated bound)."""
    c, a = bounds.codec_constants(get_codec(CODEC), x.dtype)
    err = np.abs(y.astype(np.float64) - x).max()
    assert err <= c * np.abs(x).max() + a, err


def path(mc, name: str) -> tuple[int, int]:
    st = mc.stats()[name]
    return st["calls"], st["compressed"]


def all_same(comm, value) -> bool:
    return len({repr(v) for v in comm.allgather(value)}) == 1


# -- 1. one collective, different datatypes with the same type signature --------------
def contiguous(n: int) -> MPI.Datatype:
    return MPI.DOUBLE.Create_contiguous(n).Commit()


def strided(n: int) -> MPI.Datatype:
    """n doubles, every other one of 2n: a datatype with gaps."""
    return MPI.DOUBLE.Create_vector(n, 1, 2).Commit()


@pytest.mark.parametrize("kind", ["contiguous", "strided", "typechar"])
def test_bcast_root_with_its_own_datatype(comm, mc, kind):
    """The root describes its buffer by a derived datatype (or a type character), the others
    by ``[x, n, MPI.DOUBLE]``: every root, and every rank takes the same path; a dense one
    compresses, one with gaps goes plain on every rank, exactly."""
    p, r = comm.Get_size(), comm.Get_rank()
    for root in range(p):
        x = values(root)
        if r == root:
            if kind == "contiguous":
                t = contiguous(N)
                mc.Bcast([x, 1, t], root=root)
                t.Free()
            elif kind == "strided":
                wide = np.zeros(2 * N)
                wide[::2] = x
                t = strided(N)
                mc.Bcast([wide, 1, t], root=root)
                t.Free()
            else:
                mc.Bcast([x, N, "d"], root=root)
            got = x
        else:
            got = np.zeros(N)
            mc.Bcast([got, N, MPI.DOUBLE], root=root)
        calls, compressed = path(mc, "Bcast")
        assert all_same(comm, (calls, compressed)), (calls, compressed)
        if kind == "strided":
            assert compressed == 0
            np.testing.assert_array_equal(got, x)
        else:
            assert compressed == calls
            assert_within_one_encode(got, x)


@pytest.mark.parametrize("nonblocking", [False, True])
def test_ibcast_strided_root_goes_plain_on_every_rank(comm, mc, nonblocking):
    """heat's matmul: an Ibcast whose root passes a vector datatype, the others an array."""
    p, r = comm.Get_size(), comm.Get_rank()
    for root in range(p):
        x = values(10 + root)
        if r == root:
            wide = np.zeros(2 * N)
            wide[::2] = x
            t = strided(N)
            spec = [wide, 1, t]
        else:
            got = np.zeros(N)
            spec = [got, N, MPI.DOUBLE]
        if nonblocking:
            mc.Ibcast(spec, root=root).Wait()
        else:
            mc.Bcast(spec, root=root)
        if r == root:
            t.Free()
        else:
            np.testing.assert_array_equal(got, x)
    name = "Ibcast" if nonblocking else "Bcast"
    st = mc.stats()[name]
    assert st["compressed"] == 0 and st["calls"] == p
    assert all_same(comm, mc.stats()[name]["fallbacks"].keys() != set())


@pytest.mark.parametrize("kind", ["contiguous", "strided"])
def test_scatter_and_gather_root_with_a_derived_datatype(comm, mc, kind):
    """heat's Scatter along axis 1: the root's send (Scatter) or receive (Gather) buffer by
    a derived datatype per rank's block; the others plain arrays."""
    p, r = comm.Get_size(), comm.Get_rank()
    for root in range(p):
        full = values(20 + root, N * p)
        part = np.zeros(N)
        if r == root:
            if kind == "contiguous":
                t = contiguous(N)
                send = [full, 1, t]
            else:
                wide = np.zeros(2 * N * p)
                wide[::2] = full
                t = MPI.DOUBLE.Create_vector(N, 1, 2).Create_resized(0, 2 * N * 8).Commit()
                send = [wide, 1, t]
            mc.Scatter(send, [part, N, MPI.DOUBLE], root=root)
        else:
            mc.Scatter(None, [part, N, MPI.DOUBLE], root=root)
        mine = full[r * N:(r + 1) * N]
        gathered = np.zeros(N * p)
        if r == root:
            if kind == "contiguous":
                mc.Gather([mine, N, MPI.DOUBLE], [gathered, 1, t], root=root)
            else:
                wide_out = np.zeros(2 * N * p)
                mc.Gather([mine, N, MPI.DOUBLE], [wide_out, 1, t], root=root)
                gathered = wide_out[::2]
            t.Free()
        else:
            mc.Gather([mine, N, MPI.DOUBLE], None, root=root)
        for name in ("Scatter", "Gather"):
            calls, compressed = path(mc, name)
            assert all_same(comm, (calls, compressed)), (name, calls, compressed)
            assert compressed == (calls if kind == "contiguous" else 0)
        if kind == "strided":
            np.testing.assert_array_equal(part, mine)
            if r == root:
                np.testing.assert_array_equal(gathered, full)
        else:
            assert_within_one_encode(part, mine)


def test_allreduce_one_rank_with_a_contiguous_datatype_compresses_everywhere(comm, mc):
    """Any rank (not only a root) may describe its buffers by a dense derived datatype."""
    p, r = comm.Get_size(), comm.Get_rank()
    for odd in range(p):
        x = values(30 + r)
        out = np.zeros(N)
        if r == odd:  # (mpi4py wants one datatype for both buffers of a rank)
            t = contiguous(N)
            mc.Allreduce([x, 1, t], [out, 1, t], op=MPI.SUM, algorithm="ring")
            t.Free()
        else:
            mc.Allreduce([x, N, MPI.DOUBLE], out, op=MPI.SUM, algorithm="ring")
        exact = np.zeros(N)
        comm.Allreduce(x, exact)
        c, a = bounds.codec_constants(get_codec(CODEC), x.dtype)
        g = sum(comm.allgather(float(np.abs(x).max())))
        assert np.abs(out - exact).max() <= bounds.allreduce_bound("ring", p, c, a, g, x.dtype)
    assert path(mc, "Allreduce") == (p, p)


def test_allgather_one_rank_with_a_strided_datatype_goes_plain_everywhere(comm, mc):
    """Any rank may pass a datatype with gaps: the call is plain on every rank, exact."""
    p, r = comm.Get_size(), comm.Get_rank()
    for odd in range(p):
        x = values(35 + r)
        gathered = np.zeros(N * p)
        if r == odd:
            wide = np.zeros(2 * N)
            wide[::2] = x
            t = strided(N)
            mc.Allgather([wide, 1, t], gathered)
            t.Free()
        else:
            mc.Allgather(x, gathered)
        np.testing.assert_array_equal(gathered, np.concatenate(comm.allgather(x)))
    assert path(mc, "Allgather") == (p, 0)


def test_persistent_bcast_with_mixed_datatypes_is_plain_and_exact(comm, mc):
    """Persistent collectives are mpi4py's own (plain on every rank), mixed datatypes too."""
    p, r = comm.Get_size(), comm.Get_rank()
    root = p - 1
    x = values(40)
    t = contiguous(N)
    got = x.copy() if r == root else np.zeros(N)
    req = (mc.Bcast_init([got, 1, t], root=root) if r == root
           else mc.Bcast_init([got, N, MPI.DOUBLE], root=root))
    for _ in range(2):
        req.Start()
        req.Wait()
    req.Free()
    t.Free()
    np.testing.assert_array_equal(got, x)


# -- 2. probes and statuses describe the message ------------------------------------
def sent_to_rank_1(comm, mc, seed: int, tags, n: int = 1000) -> np.ndarray | None:
    """Rank 0 sends float32 values to rank 1 once per tag, compressed; rank 1 gets the
    values it will receive, the others None."""
    x = values(seed, n, np.float32)
    if comm.Get_rank() == 0:
        for tag in tags:
            mc.Send(x, 1, tag=tag)
        assert mc.stats()["Send"]["compressed"] == len(tags)
    return x if comm.Get_rank() == 1 else None


def test_probe_iprobe_report_the_messages_count(comm, mc):
    """heat's cdist: Probe, Get_count, allocate, Recv."""
    x = sent_to_rank_1(comm, mc, 50, (1, 2))
    if x is not None:
        st = MPI.Status()
        mc.Probe(0, 1, st)
        assert (st.source, st.tag) == (0, 1)
        assert st.Get_count(MPI.FLOAT) == 1000 and st.Get_count(MPI.BYTE) == 4000
        assert st.Get_elements(MPI.FLOAT) == 1000
        y = np.empty(st.Get_count(MPI.FLOAT), np.float32)
        rst = MPI.Status()
        mc.Recv(y, 0, 1, rst)
        assert rst.Get_count(MPI.FLOAT) == 1000 and rst.Get_elements(MPI.FLOAT) == 1000
        assert (rst.source, rst.tag) == (0, 1)
        assert_within_one_encode(y, x.astype(np.float64))
        while not mc.Iprobe(0, 2, st):
            pass
        assert st.Get_count(MPI.FLOAT) == 1000 and st.tag == 2
        assert mc.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st) and st.tag == 2  # still there
        y = np.empty(1000, np.float32)
        mc.Recv(y, MPI.ANY_SOURCE, MPI.ANY_TAG)
        assert_within_one_encode(y, x.astype(np.float64))
        assert mc.stats()["Recv"]["compressed"] == 2
    comm.Barrier()


def test_matched_probes_decode_into_the_buffer(comm, mc):
    x = sent_to_rank_1(comm, mc, 51, (3, 4))
    if x is not None:
        st = MPI.Status()
        msg = mc.Mprobe(0, 3, st)
        assert st.Get_count(MPI.FLOAT) == 1000 and bool(msg)
        y = np.empty(1000, np.float32)
        rst = MPI.Status()
        msg.Recv(y, rst)
        assert rst.Get_count(MPI.FLOAT) == 1000 and not msg
        assert_within_one_encode(y, x.astype(np.float64))
        msg = None
        while msg is None:
            msg = mc.Improbe(0, 4, st)
        assert st.Get_count(MPI.FLOAT) == 1000
        y = np.empty(1000, np.float32)
        req = msg.Irecv(y)
        req.Wait(rst)
        assert rst.Get_count(MPI.FLOAT) == 1000 and rst.source == 0 and rst.tag == 4
        assert_within_one_encode(y, x.astype(np.float64))
    comm.Barrier()


def test_irecv_wait_status_reports_the_decoded_count(comm, mc):
    r = comm.Get_rank()
    x = values(52, 1000, np.float32)
    if r == 0:
        mc.Send(x, 1, tag=7)
        mc.Send(x[:999], 1, tag=8)
    elif r == 1:
        st = MPI.Status()
        y = np.empty(1000, np.float32)
        mc.Irecv(y, 0, 7).Wait(st)
        assert (st.source, st.tag, st.Get_count(MPI.FLOAT)) == (0, 7, 1000)
        req = mc.Irecv(y, MPI.ANY_SOURCE, MPI.ANY_TAG)
        while not req.Test(st):
            pass
        assert (st.source, st.tag, st.Get_count(MPI.FLOAT)) == (0, 8, 999)
    comm.Barrier()


def test_probe_then_lowercase_recv_of_an_odd_pickle(comm, mc):
    """A probe may take an odd-length message (a pickle) out of MPI's queue to read it:
    mpi4py's lowercase receives and probes still get it, in order."""
    r = comm.Get_rank()
    objs = ["abc", {"k": 1}, list(range(7)), "x" * 100]
    if r == 0:
        for obj in objs:
            mc.send(obj, 1, tag=9)
        mc.Send(np.arange(3, dtype=np.uint8), 1, tag=10)
    elif r == 1:
        st = MPI.Status()
        got = []
        for i in range(len(objs)):
            mc.Probe(0, 9, st)
            assert st.Get_count(MPI.BYTE) > 0
            if i % 2:
                assert mc.iprobe(0, 9)
                got.append(mc.recv(source=0, tag=9))
            else:
                got.append(mc.mprobe(0, 9).recv())
        assert got == objs
        mc.Probe(0, 10, st)
        assert st.Get_count(MPI.BYTE) == 3
        y = np.zeros(3, np.uint8)
        mc.Recv(y, 0, 10, st)
        np.testing.assert_array_equal(y, np.arange(3))
        assert "recv" not in mc.__dict__  # nothing held: mpi4py's own methods again
    comm.Barrier()


def test_compressed_message_into_a_strided_receive(comm, mc):
    """A receiver may lay the message out through a datatype with gaps: a frame is decoded,
    then laid out by MPI (blocking, nonblocking, after a probe)."""
    r = comm.Get_rank()
    x = values(53, N)
    if r == 0:
        for tag in (11, 12, 13):
            mc.Send(x, 1, tag=tag)
        assert mc.stats()["Send"]["compressed"] == 3
    elif r == 1:
        t = strided(N)
        for tag in (11, 12, 13):
            wide = np.full(2 * N, 7.0)
            st = MPI.Status()
            if tag == 11:
                mc.Recv([wide, 1, t], 0, tag, st)
            elif tag == 12:
                mc.Irecv([wide, 1, t], 0, tag).Wait(st)
            else:
                mc.Probe(0, tag)
                mc.Recv([wide, 1, t], 0, tag, st)
            assert st.Get_count(MPI.DOUBLE) == N, tag
            assert_within_one_encode(wide[::2], x)
            assert np.all(wide[1::2] == 7.0)
        t.Free()
    comm.Barrier()


@pytest.mark.parametrize("codec", [CODEC, {"id": "zfp", "rate": 24},
                                   {"id": "cast", "dtype": "bfloat16"}],
                         ids=["bitplane", "zfp", "cast"])
@pytest.mark.parametrize("method", ["Send", "Isend", "Sendrecv", "Isendrecv"])
def test_a_strided_send_of_a_transpose_is_gathered_and_compressed(comm, codec, method):
    """Issue 80's case (heat's non-contiguous tensors): rank 0 sends the transpose of a
    row-major 64 x 64 float32 matrix through a resized vector datatype over raw memory;
    rank 1 receives 4,096 contiguous floats. The sender's values are gathered, then
    compressed (not a hang, not zeros): the receiver gets the transpose within one
    encode's bound."""
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=codec, threshold=0)
    a = np.random.default_rng(80).standard_normal((64, 64)).astype(np.float32)
    c, k = bounds.codec_constants(get_codec(codec), np.float32) or (2.0**-12, 0.0)
    if r == 0:
        col = MPI.FLOAT.Create_vector(64, 1, 64).Create_resized(0, 4).Commit()
        spec = [MPI.memory.fromaddress(a.ctypes.data, a.nbytes), 64, col]
        if method == "Send":
            mc.Send(spec, 1, tag=80)
        elif method == "Isend":
            mc.Isend(spec, 1, tag=80).Wait()
        elif method == "Sendrecv":
            mc.Sendrecv(spec, 1, 80, np.empty(1, np.float32), 1, 81)
        else:
            mc.Isendrecv(spec, 1, 80, np.empty(1, np.float32), 1, 81).Wait()
        col.Free()
        st = mc.stats()["Isend" if method == "Isendrecv" else method]  # (its send's record)
        assert st["compressed"] == 1, st
        assert st["wire_bytes"] < a.nbytes
    elif r == 1:
        got = np.zeros(64 * 64, np.float32)
        mc.Recv([got, 64 * 64, MPI.FLOAT], 0, 80)
        if method in ("Sendrecv", "Isendrecv"):
            mc.Send(np.zeros(1, np.float32), 0, tag=81)
        expected = a.T.reshape(-1)
        err = np.abs(got.astype(np.float64) - expected).max()
        assert err <= c * np.abs(expected).max() + k, err
        assert np.any(got != 0)
    comm.Barrier()


def test_gather_reads_a_vetoed_host_buffer_in_signature_order():
    """A vetoed buffer's values, gathered by MPI in signature order; none for others."""
    from mpicomp import buffers

    t = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()
    b = buffers.parse([np.arange(8.0), 1, t], "buf")
    assert b.veto
    np.testing.assert_array_equal(buffers.gather(b), np.arange(0.0, 8.0, 2.0))
    assert buffers.gather(buffers.parse(np.arange(8.0), "buf")) is None
    t.Free()


def test_reduce_scatter_block_send_spec_count_is_one_blocks(comm, mc):
    """mpi4py reads an explicit count in Reduce_scatter_block's send spec as one block's
    (MPI's recvcount): one rank passing ``[x, n, MPI.DOUBLE]`` for its p blocks, the
    others a bare array, compress alike on every rank (they disagreed and hung)."""
    p, r = comm.Get_size(), comm.Get_rank()
    x = values(60 + r, N * p)
    out = np.zeros(N)
    spec = [x, N, MPI.DOUBLE] if r == 0 else x
    mc.Reduce_scatter_block(spec, out)
    exact = np.zeros(N)
    comm.Reduce_scatter_block(x, exact)
    c, a = bounds.codec_constants(get_codec(CODEC), x.dtype)
    g = sum(comm.allgather(float(np.abs(x).max())))
    assert np.abs(out - exact).max() <= bounds.allreduce_bound("ring", p, c, a, g, x.dtype)
    assert all_same(comm, path(mc, "Reduce_scatter_block")) and path(mc,
                                                                      "Reduce_scatter_block")[1]


@pytest.mark.parametrize("codec", ["none", "default"])
def test_a_permuted_datatype_without_gaps_is_not_taken_as_bytes(comm, codec):
    """An indexed datatype whose blocks come in reverse order has a dense datatype's size,
    extent and lower bound: the compiled plain path (from the second call on) took it as
    the array's bytes in order, receiving and sending the values permuted."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm.Dup(), **({"codec": "none"} if codec == "none" else {}))
    t = MPI.DOUBLE.Create_indexed([N // 2, N // 2], [N // 2, 0]).Commit()
    right, left = (r + 1) % p, (r - 1) % p
    for it in range(3):
        x = values(70 + 10 * it + r)
        got = np.zeros(N)
        mc.Sendrecv([x, 1, t], right, 7, [got, 1, t], left, 7)
        want = np.zeros(N)
        comm.Sendrecv([x, 1, t], right, 8, [want, 1, t], left, 8)
        np.testing.assert_array_equal(got, want, err_msg=f"call {it}")
        got = np.zeros(N)
        if r == 0:
            mc.Send(x, right, 9)
        if r == 1:
            mc.Recv([got, 1, t], left, 9)
            expected = values(70 + 10 * it)
            np.testing.assert_array_equal(got[N // 2:], expected[:N // 2])
            np.testing.assert_array_equal(got[:N // 2], expected[N // 2:])
        comm.Barrier()
    t.Free()
    mc.Free()


# -- 3. inherited methods with compressing peers --------------------------------------
def test_sendrecv_replace_and_isendrecv_decode_compressed_messages(comm, mc):
    p, r = comm.Get_size(), comm.Get_rank()
    right, left = (r + 1) % p, (r - 1) % p
    buf = values(60 + r)
    st = MPI.Status()
    mc.Sendrecv_replace(buf, right, 1, left, 1, st)
    assert st.Get_count(MPI.DOUBLE) == N and st.source == left
    assert_within_one_encode(buf, values(60 + left))
    out = np.zeros(N)
    mc.Isendrecv(values(70 + r), right, 2, out, left, 2).Wait(st)
    assert st.Get_count(MPI.DOUBLE) == N
    assert_within_one_encode(out, values(70 + left))
    buf = values(80 + r)
    mc.Isendrecv_replace(buf, right, 3, left, 3).Wait()
    assert_within_one_encode(buf, values(80 + left))
    assert mc.stats()["Isend"]["compressed"] >= 3


def test_sendrecv_replace_default_policy_receives_a_peers_frame(comm):
    """Under the default policy Sendrecv_replace is MPI's own (its send plain by size); a
    peer that compresses still arrives decoded, and plain peers exactly."""
    p, r = comm.Get_size(), comm.Get_rank()
    right, left = (r + 1) % p, (r - 1) % p
    compressing = r % 2 == 0 and not (p % 2 == 1 and r == p - 1)
    me = mpicomp.Comm(comm, codec=CODEC, threshold=0) if compressing else mpicomp.Comm(comm)
    buf = values(100 + r)
    st = MPI.Status()
    me.Sendrecv_replace(buf, right, 4, left, 4, st)
    left_compressed = left % 2 == 0 and not (p % 2 == 1 and left == p - 1)
    assert st.Get_count(MPI.DOUBLE) == N and st.source == left
    if left_compressed:
        assert_within_one_encode(buf, values(100 + left))
    else:
        np.testing.assert_array_equal(buf, values(100 + left))
    ints = np.arange(5, dtype=np.int32) + r
    me.Sendrecv_replace(ints, right, 5, left, 5)
    np.testing.assert_array_equal(ints, np.arange(5) + left)


def test_sendrecv_replace_and_isendrecv_receive_a_compressed_send(comm, mc):
    """The receiving half of Sendrecv_replace / Isendrecv(_replace) meets a peer's compressed
    Isend (mpi4py's methods would write the frame's bytes into the buffer)."""
    p, r = comm.Get_size(), comm.Get_rank()
    right, left = (r + 1) % p, (r - 1) % p
    default = mpicomp.Comm(comm)
    for tag, receiver in enumerate((mc, default, mc, mc)):
        req = mc.Isend(values(110 + r + tag), right, tag)
        buf = np.zeros(N)
        st = MPI.Status()
        if tag < 2:
            receiver.Sendrecv_replace(buf, MPI.PROC_NULL, tag, left, tag, st)
        elif tag == 2:
            receiver.Isendrecv(np.zeros(1), MPI.PROC_NULL, tag, buf, left, tag).Wait(st)
        else:
            receiver.Isendrecv_replace(buf, MPI.PROC_NULL, tag, left, tag).Wait(st)
        req.Wait()
        assert st.Get_count(MPI.DOUBLE) == N, tag
        assert_within_one_encode(buf, values(110 + left + tag))
    assert mc.stats()["Isend"]["compressed"] >= 4  # (and the replace forms' own sends)


def test_inherited_methods_stay_plain_and_exact(comm, mc):
    """Methods mpicomp does not override are mpi4py's, plain on every rank: v-collectives,
    Alltoallw, scans, persistent and synchronous point to point, one-sided windows,
    topology and intercommunicators made from mpicomp's communicator."""
    p, r = comm.Get_size(), comm.Get_rank()
    x = values(90 + r, 64)
    # Alltoallv, Alltoallw, Scan, Exscan
    counts = [64 // p] * p
    send, recv = np.tile(x[: 64 // p], p), np.zeros(64 // p * p)
    mc.Alltoallv([send, counts], [recv, counts])
    ref = np.zeros_like(recv)
    comm.Alltoallv([send, counts], [ref, counts])
    np.testing.assert_array_equal(recv, ref)
    displs = [i * (64 // p) * 8 for i in range(p)]
    types = [MPI.DOUBLE] * p
    recv_w = np.zeros_like(recv)
    mc.Alltoallw([send, counts, displs, types], [recv_w, counts, displs, types])
    np.testing.assert_array_equal(recv_w, ref)
    scan, exact = np.zeros(64), np.zeros(64)
    mc.Scan(x, scan)
    comm.Scan(x, exact)
    np.testing.assert_array_equal(scan, exact)
    # persistent and synchronous point to point
    right, left = (r + 1) % p, (r - 1) % p
    got = np.zeros(64)
    rreq = mc.Recv_init(got, left, 5)
    sreq = mc.Send_init(x, right, 5)
    MPI.Prequest.Startall([rreq, sreq])
    MPI.Request.Waitall([rreq, sreq])
    np.testing.assert_array_equal(got, values(90 + left, 64))
    rreq.Free()
    sreq.Free()
    req = mc.Issend(x, right, 6)
    mc.Recv(got, left, 6)
    req.Wait()
    np.testing.assert_array_equal(got, values(90 + left, 64))
    # a window over mpicomp's communicator
    mem = np.zeros(64)
    win = MPI.Win.Create(mem, comm=mc)
    win.Fence()
    win.Put(x, right)
    win.Fence()
    win.Free()
    np.testing.assert_array_equal(mem, values(90 + left, 64))
    # a topology communicator and an intercommunicator made from it
    cart = mc.Create_cart([p], periods=[True])
    nb = np.zeros(2 * 64)
    cart.Neighbor_allgather(x, nb)
    np.testing.assert_array_equal(nb[:64], values(90 + left, 64))
    cart.Free()
    half = mc.Split(r % 2, r)
    inter = half.Create_intercomm(0, mc, 1 - r % 2 if p > 1 else 0, 7)
    assert isinstance(inter, MPI.Intercomm)
    one = np.array([float(r)])
    total = np.zeros(1)
    inter.Allreduce(one, total)
    assert total[0] == sum(float(q) for q in range(p) if q % 2 != r % 2)
    inter.Free()
    half.Free()
    for name in ("Alltoallv", "Alltoallw", "Scan", "Issend"):
        assert name not in mc.stats()


def test_partitioned_point_to_point_stays_plain_and_exact(comm, mc):
    """Partitioned communication (MPI 4) is mpi4py's own on mpicomp's communicator."""
    p, r = comm.Get_size(), comm.Get_rank()
    right, left = (r + 1) % p, (r - 1) % p
    x = values(120 + r, 64)
    got = np.zeros(64)
    try:
        rreq = mc.Precv_init(got, 4, left, 8)
        sreq = mc.Psend_init(x, 4, right, 8)
    except (NotImplementedError, MPI.Exception) as exc:  # an MPI without MPI 4's
        pytest.skip(f"partitioned communication unavailable: {exc}")
    MPI.Prequest.Startall([rreq, sreq])
    sreq.Pready_range(0, 3)
    MPI.Request.Waitall([rreq, sreq])
    rreq.Free()
    sreq.Free()
    np.testing.assert_array_equal(got, values(120 + left, 64))
