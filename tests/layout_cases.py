"""Buffer layouts x methods x codecs: one case of the layout sweep, run on every rank.

A case (:class:`Case`, picklable: rank 0 draws it, every rank runs it) names
a method, the communicator's settings, an element type, counts, a root and,
per rank, the *form* of each buffer: a NumPy array (C, Fortran, read-only,
with a slack tail), a ``[buf, count, datatype]`` spec, a type character,
``MPI.memory`` over raw memory, a byte view described by a float datatype,
a PyTorch tensor, or a derived datatype of every MPI constructor (contiguous,
vector, hvector, indexed (also permuted without gaps), indexed_block, hindexed,
hindexed_block, subarray, darray, struct, resized, nested, dup) over that one
element type. Each rank's values are laid out through its form by MPI itself
(a message to itself), so the forms cover what MPI means by them, not what
this file thinks they mean.

:func:`run_case` makes the call once through plain mpi4py and once through
``mpicomp.Comm`` on buffers built alike, and returns this rank's complaints:
output buffers (their whole memory, gaps included) that differ from plain
MPI's beyond the codec's stated bound (bitwise under codec ``none``), send
buffers that changed, or an exception. An exception raised on one rank and
not on the others leaves them waiting: the runner's timeout fails that.
"""
from __future__ import annotations

import dataclasses
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.codecs import get_codec

#: forms a send buffer may take (each over the signature's element type)
PLAIN_FORMS = ("array", "array2d", "fortran", "slack", "count", "displ", "typechar",
               "memory", "bytes", "torch", "torch_spec")
DERIVED_FORMS = ("contiguous", "contiguous_items", "vector", "vector_items", "hvector",
                 "indexed", "indexed_permuted", "indexed_block", "hindexed", "hindexed_block",
                 "subarray", "subarray_f", "darray", "struct", "resized_transpose", "nested", "dup")
SEND_FORMS = PLAIN_FORMS + ("readonly",) + DERIVED_FORMS
RECV_FORMS = PLAIN_FORMS + DERIVED_FORMS
#: forms of a v-spec (Allgatherv, Gatherv, Scatterv, Alltoallv)
V_FORMS = ("packed", "counts_dt", "gapped", "permuted", "vector_dt")

P2P = ("Send", "Ssend", "Isend", "Sendrecv", "Isendrecv", "Sendrecv_replace",
       "Isendrecv_replace", "Send_init", "Probe_Recv", "Mprobe")
COLLECTIVES = ("Allreduce", "Allreduce_in_place", "Allreduce_max", "Iallreduce",
               "Allreduce_init", "Reduce", "Reduce_scatter_block", "Reduce_scatter",
               "Allgather", "Iallgather", "Allgatherv", "Alltoall", "Ialltoall", "Alltoallv",
               "Bcast", "Ibcast", "Bcast_init", "Gather", "Gatherv", "Scatter", "Scatterv")
METHODS = P2P + COLLECTIVES
REDUCING = ("Allreduce", "Allreduce_in_place", "Iallreduce", "Allreduce_init", "Reduce",
            "Reduce_scatter_block", "Reduce_scatter")

#: the settings each codec of the sweep runs under (threshold 0: every call may compress)
CODECS = {
    "none": {"codec": "none"},
    "default": {},
    "bitplane": {"codec": "bitplane", "rate": 8.25, "threshold": 0},
    "bitplane16": {"codec": "bitplane", "rate": 16.25, "threshold": 0},
    "zfp": {"codec": "zfp", "rate": 24, "threshold": 0},
    "cast": {"codec": {"id": "cast", "dtype": "bfloat16"}, "threshold": 0},
    "tolerance": {"tolerance": 1e-3, "threshold": 0},
}
#: zfp states no pointwise bound: the sweep holds its rate-24 results to this fraction of
#: the largest input magnitude per encode (an empirical margin, not a guarantee)
ZFP_MARGIN = 2.0**-10
SENTINEL = -7.25  #: what output memory holds before a call (gaps must keep it)


@dataclasses.dataclass
class Case:
    method: str
    codec: str
    dtype: str  #: "f" or "d"
    counts: list[int]  #: values per rank (a v-call's counts; others use counts[0])
    root: int
    seed: int
    send: list[tuple[str, int]]  #: per rank: (form, parameter seed)
    recv: list[tuple[str, int]]
    vform: str = "packed"

    def short(self) -> str:
        return (f"{self.method} codec={self.codec} dtype={self.dtype} counts={self.counts} "
                f"root={self.root} send={self.send} recv={self.recv} vform={self.vform}")


# -- forms ---------------------------------------------------------------------------
def _lay_out(values: np.ndarray, spec: Any) -> None:
    """Write ``values`` (signature order) into ``spec``'s memory through its datatype, by
    a message to this rank itself."""
    t = MPI._typedict[values.dtype.char]
    MPI.COMM_SELF.Sendrecv([values, t], 0, 0, spec, 0, 0)


def _divisor(n: int, rng: np.random.Generator, most: int = 8) -> int:
    ds = [d for d in range(1, min(n, most) + 1) if n % d == 0]
    return int(rng.choice(ds))


def _derived(form: str, n: int, t: MPI.Datatype, rng: np.random.Generator
             ) -> tuple[MPI.Datatype, int]:
    """A committed datatype over ``t`` and the items of it per block that hold ``n``
    elements."""
    isz = t.Get_size()
    k = _divisor(n, rng)
    gap = int(rng.integers(1, 4))
    if form == "contiguous":
        dt, c = t.Create_contiguous(n), 1
    elif form == "contiguous_items":
        dt, c = t.Create_contiguous(k), n // k
    elif form == "vector":
        dt, c = t.Create_vector(n // k, k, k + gap), 1
    elif form == "vector_items":
        dt, c = t.Create_vector(k, 1, 1 + gap), n // k
    elif form == "hvector":
        dt, c = t.Create_hvector(n // k, k, (k + gap) * isz), 1
    elif form == "indexed_permuted":
        # no gaps, the blocks in reverse order: the size, extent and lower bound of a dense
        # datatype, not its order
        half = n // 2
        dt, c = t.Create_indexed([n - half, half], [half, 0]), 1
    elif form in ("indexed", "hindexed"):
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(3, n - 1), replace=False)) \
            if n > 1 else np.array([], int)
        lens = np.diff(np.concatenate([[0], cuts, [n]])).astype(int).tolist()
        displs, at = [], 0
        for ln in lens:
            displs.append(at)
            at += ln + int(rng.integers(0, 3))
        order = rng.permutation(len(lens))  # blocks in any order, never overlapping
        lens = [lens[i] for i in order]
        displs = [displs[i] for i in order]
        if form == "indexed":
            dt = t.Create_indexed(lens, displs)
        else:
            dt = t.Create_hindexed(lens, [d * isz for d in displs])
        c = 1
    elif form in ("indexed_block", "hindexed_block"):
        m = n // k
        displs = [i * (k + gap) for i in rng.permutation(m)]
        dt = (t.Create_indexed_block(k, displs) if form == "indexed_block"
              else t.Create_hindexed_block(k, [d * isz for d in displs]))
        c = 1
    elif form in ("subarray", "subarray_f"):
        rows = k
        cols = n // k
        sizes = [rows + gap, cols + 1]
        starts = [int(rng.integers(0, gap + 1)), int(rng.integers(0, 2))]
        order = MPI.ORDER_C if form == "subarray" else MPI.ORDER_FORTRAN
        dt, c = t.Create_subarray(sizes, [rows, cols], starts, order=order), 1
    elif form == "darray":
        # process 0's part of a cyclic distribution of 2n elements over 2 processes
        dt = t.Create_darray(2, 0, [2 * n], [MPI.DISTRIBUTE_CYCLIC], [1], [2])
        c = 1
    elif form == "struct":
        first = n // 2
        dt = MPI.Datatype.Create_struct([first, n - first], [0, (first + gap) * isz], [t, t])
        c = 1
    elif form == "resized_transpose":
        # the columns of a rows x cols matrix, one an item (heat's non-contiguous tensors);
        # the row stride spans every block's columns so that no two items overlap
        dt, c = t.Create_vector(k, 1, 0), n // k  # placeholder, rebuilt with the blocks
    elif form == "nested":
        inner = t.Create_contiguous(k)
        dt, c = inner.Create_vector(n // k, 1, 2), 1
        inner.Free()
    elif form == "dup":
        base = t.Create_vector(n // k, k, k + gap)
        dt, c = base.Dup(), 1
        base.Free()
    else:
        raise ValueError(form)
    return dt, c


def _transpose_type(t: MPI.Datatype, rows: int, stride: int) -> MPI.Datatype:
    col = t.Create_vector(rows, 1, stride)
    out = col.Create_resized(0, t.Get_size())
    col.Free()
    return out


@dataclasses.dataclass
class Built:
    """A buffer of one form: the ``spec`` passed to MPI, the NumPy ``base`` array over all
    of its memory (compared whole), and whatever must stay alive with it."""

    spec: Any
    base: np.ndarray
    keep: list[Any]
    types: list[MPI.Datatype]


def build(form: str, pseed: int, n: int, blocks: int, dtype: np.dtype,
          values: np.ndarray | None, like: Built | None = None) -> Built:
    """A buffer of ``blocks`` x ``n`` elements of ``dtype`` in ``form``, holding ``values``
    (signature order) or, for an output (``values`` None), :data:`SENTINEL` everywhere;
    ``like``: a buffer of the same form whose datatype object this one shares (mpi4py
    wants a reduction's send and receive datatypes to be one)."""
    rng = np.random.default_rng(pseed)
    t = MPI._typedict[dtype.char]
    total = n * blocks
    if n == 0 and form in DERIVED_FORMS:  # (no datatype of every constructor holds none)
        form = "count"
    types: list[MPI.Datatype] = []
    keep: list[Any] = []
    if form in DERIVED_FORMS:
        if form == "resized_transpose":
            k = _divisor(n, rng)
            dt, c = _transpose_type(t, k, blocks * (n // k)), n // k
        else:
            dt, c = _derived(form, n, t, rng)
        if like is not None and like.types:
            dt.Free()
            dt = like.types[0]
        else:
            dt.Commit()
            types.append(dt)
        items = c * blocks
        lb, extent = dt.Get_extent()
        tlb, textent = dt.Get_true_extent()
        nbytes = max(tlb + (items - 1) * extent + textent, 0) if items else 0
        base = np.full(-(-nbytes // dtype.itemsize) + 2, SENTINEL, dtype)
        spec = [base, c, dt]
    else:
        slack = int(rng.integers(1, 5))
        base = np.full(total + slack, SENTINEL, dtype)
        head = base[:total]
        if form == "array":
            spec = head
        elif form == "readonly":
            spec = head
        elif form == "array2d":
            spec = head.reshape(blocks, n) if blocks > 1 else head.reshape(
                _divisor(n, rng), -1) if n else head
        elif form == "fortran":
            rows = _divisor(total, rng) if total else 1
            fa = np.full((rows, total // rows if rows else 0), SENTINEL, dtype, order="F")
            base = fa.T.reshape(-1)  # its memory, in memory order
            spec = fa
        elif form == "slack":
            spec = [base, n, t]  # the spec's count names part of a longer array
        elif form == "count":
            spec = [head, n, t]
        elif form == "displ":
            d = int(rng.integers(1, 4))
            base = np.full(total + d, SENTINEL, dtype)
            spec = [base, (n, d), t]
        elif form == "typechar":
            spec = [head, n, dtype.char]
        elif form == "memory":
            spec = [MPI.memory.fromaddress(head.ctypes.data, head.nbytes), n, t]
        elif form == "bytes":
            spec = [head.view(np.uint8), n, t]
        elif form in ("torch", "torch_spec"):
            import torch

            tensor = torch.from_numpy(head)
            spec = tensor if form == "torch" else [tensor, n, t]
        else:
            raise ValueError(form)
        keep.append(head)
    if values is not None:
        lay_spec = spec
        if form in DERIVED_FORMS:
            lay_spec = [base, c * blocks, spec[2]]
        elif form in ("count", "slack", "displ", "typechar", "memory", "bytes", "torch_spec"):
            lay_spec = [base[(spec[1][1] if form == "displ" else 0):], total, t]
        else:
            lay_spec = [base, total, t]
        _lay_out(np.ascontiguousarray(values, dtype), lay_spec)
    if form == "readonly":
        head.flags.writeable = False
    return Built(spec, base, keep, types)


def build_v(vform: str, counts: list[int], dtype: np.dtype, values: np.ndarray | None,
            pseed: int) -> Built:
    """A v-spec over ``counts`` (one per rank) holding ``values`` (the ranks' parts one
    after another) or :data:`SENTINEL` (an output)."""
    rng = np.random.default_rng(pseed)
    t = MPI._typedict[dtype.char]
    p = len(counts)
    types: list[MPI.Datatype] = []
    if vform == "vector_dt":
        # every part a run of items of a vector type (1 element of every 2); counts in items
        vt = t.Create_vector(1, 1, 2).Create_resized(0, 2 * t.Get_size()).Commit()
        types.append(vt)
        displs, at = [], 0
        for cnt in counts:
            displs.append(at)
            at += cnt + int(rng.integers(0, 2))
        base = np.full(2 * at + 2, SENTINEL, dtype)
        spec = [base, counts, displs, vt]
        if values is not None:
            for i in range(p):
                part = values[sum(counts[:i]):sum(counts[:i + 1])]
                base[2 * displs[i]:2 * displs[i] + 2 * counts[i]:2] = part
        return Built(spec, base, [], types)
    if vform in ("packed", "counts_dt"):
        displs = [sum(counts[:i]) for i in range(p)]
        size = sum(counts) + 1
    else:
        order = rng.permutation(p) if vform == "permuted" else np.arange(p)
        displs, at = [0] * p, 0
        for i in order:
            displs[int(i)] = at
            at += counts[int(i)] + int(rng.integers(0, 3))
        size = at + 1
    base = np.full(size, SENTINEL, dtype)
    if values is not None:
        for i in range(p):
            base[displs[i]:displs[i] + counts[i]] = values[sum(counts[:i]):sum(counts[:i + 1])]
    if vform == "packed":
        spec = [base, counts]
    elif vform == "counts_dt":
        spec = [base, counts, t]
    elif vform == "gapped":
        spec = [base, counts, displs, t]
    else:
        spec = [base, (counts, displs), t]
    return Built(spec, base, [], types)


def free(*built: Built | None) -> None:
    for b in built:
        if b is not None:
            for t in b.types:
                t.Free()


# -- one call ----------------------------------------------------------------------
def _values(case: Case, rank: int, n: int, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng([case.seed, rank, salt])
    scale = np.exp(rng.normal(0, 1.0, size=n))
    return (rng.standard_normal(n) * scale).astype(np.dtype(case.dtype))


def _call(comm: Any, case: Case) -> tuple[list[Built], list[Built], float, float]:
    """Build this rank's buffers and make the call on ``comm``; returns the outputs, the
    inputs (with their original contents kept in ``keep``), this rank's largest input
    magnitude and the count of summands."""
    p, r = comm.Get_size(), comm.Get_rank()
    dt = np.dtype(case.dtype)
    n = case.counts[0]
    sform, spseed = case.send[r]
    rform, rpseed = case.recv[r]
    m, root = case.method, case.root
    if (m in REDUCING or m == "Allreduce_max") and sform in DERIVED_FORMS:
        sform = "count"  # (MPICH's reductions take predefined datatypes only)
    outs: list[Built] = []
    ins: list[Built] = []

    def send(nn: int, blocks: int = 1, salt: int = 0) -> Built:
        x = _values(case, r, nn * blocks, salt)
        b = build(sform, spseed, nn, blocks, dt, x)
        b.keep.append(x)
        ins.append(b)
        return b

    def recv(nn: int, blocks: int = 1) -> Built:
        if m in REDUCING or m == "Allreduce_max":  # (one datatype for both buffers)
            b = build(sform if sform != "readonly" else "array", spseed, nn, blocks, dt,
                      None, like=ins[0] if ins else None)
        else:
            b = build(rform, rpseed, nn, blocks, dt, None)
        outs.append(b)
        return b

    if m in P2P:
        right, left = (r + 1) % p, (r - 1) % p
        if m in ("Send", "Ssend"):
            fn = comm.Send if m == "Send" else comm.Ssend
            s = send(n)
            o = recv(n)
            if r == 0:
                fn(s.spec, right, 5)
                comm.Recv(o.spec, left, 5)
            else:
                comm.Recv(o.spec, left, 5)
                fn(s.spec, right, 5)
        elif m == "Isend":
            s, o = send(n), recv(n)
            rq = comm.Irecv(o.spec, left, 6)
            sq = comm.Isend(s.spec, right, 6)
            sq.Wait()
            rq.Wait()
        elif m == "Sendrecv":
            s, o = send(n), recv(n)
            comm.Sendrecv(s.spec, right, 7, o.spec, left, 7)
        elif m == "Isendrecv":
            s, o = send(n), recv(n)
            comm.Isendrecv(s.spec, right, 8, o.spec, left, 8).Wait()
        elif m in ("Sendrecv_replace", "Isendrecv_replace"):
            x = _values(case, r, n)
            b = build(rform, rpseed, n, 1, dt, x)
            outs.append(b)
            if m == "Sendrecv_replace" or not isinstance(comm, mpicomp.Comm):
                # (the reference: MPICH 5.0.2's own Isendrecv_replace sends wrong values
                # from a datatype with gaps; its Sendrecv_replace is right)
                comm.Sendrecv_replace(b.spec, right, 9, left, 9)
            else:
                comm.Isendrecv_replace(b.spec, right, 9, left, 9).Wait()
        elif m == "Send_init":
            s, o = send(n), recv(n)
            sq = comm.Send_init(s.spec, right, 10)
            rq = comm.Recv_init(o.spec, left, 10)
            for _ in range(2):
                MPI.Prequest.Startall([rq, sq])
                MPI.Request.Waitall([sq, rq])
            sq.Free()
            rq.Free()
        elif m in ("Probe_Recv", "Mprobe"):
            s, o = send(n), recv(n)
            sq = comm.Isend(s.spec, right, 11)
            st = MPI.Status()
            if m == "Probe_Recv":
                comm.Probe(left, 11, st)
                comm.Recv(o.spec, left, 11)
            else:
                msg = comm.Mprobe(left, 11, st)
                msg.Recv(o.spec)
            sq.Wait()
        else:
            raise ValueError(m)
        mine = float(np.abs(ins[0].keep[-1]).max()) if ins and n else 0.0
        if m in ("Sendrecv_replace", "Isendrecv_replace"):
            mine = float(np.abs(_values(case, r, n)).max()) if n else 0.0
        return outs, ins, mine, 1
    op = MPI.MAX if m == "Allreduce_max" else MPI.SUM
    if m in ("Allreduce", "Allreduce_max", "Iallreduce", "Allreduce_init"):
        s, o = send(n), recv(n)
        if m == "Iallreduce":
            comm.Iallreduce(s.spec, o.spec, op=op).Wait()
        elif m == "Allreduce_init":
            rq = comm.Allreduce_init(s.spec, o.spec, op=op)
            rq.Start()
            rq.Wait()
            rq.Free()
        else:
            comm.Allreduce(s.spec, o.spec, op=op)
    elif m == "Allreduce_in_place":
        x = _values(case, r, n)
        o = build(rform if rform not in DERIVED_FORMS else "count", rpseed, n, 1, dt, x)
        outs.append(o)
        comm.Allreduce(MPI.IN_PLACE, o.spec)
    elif m == "Reduce":
        s = send(n)
        o = recv(n) if r == root else None
        comm.Reduce(s.spec, o.spec if o else None, root=root)
    elif m == "Reduce_scatter_block":
        s, o = send(n, p), recv(n)
        comm.Reduce_scatter_block(s.spec, o.spec)
    elif m == "Reduce_scatter":
        counts = case.counts
        # (counts in the datatype's items: the forms of predefined datatypes only)
        form = sform if sform not in DERIVED_FORMS else "count"
        x = _values(case, r, sum(counts))
        s = build(form, spseed, sum(counts), 1, dt, x)
        s.keep.append(x)
        ins.append(s)
        o = build(form if form != "readonly" else "array", spseed, counts[r], 1, dt, None)
        outs.append(o)
        comm.Reduce_scatter(s.spec, o.spec, counts)
    elif m in ("Allgather", "Iallgather"):
        s, o = send(n), recv(n, p)
        if m == "Allgather":
            comm.Allgather(s.spec, o.spec)
        else:
            comm.Iallgather(s.spec, o.spec).Wait()
    elif m in ("Alltoall", "Ialltoall"):
        s, o = send(n, p), recv(n, p)
        if m == "Alltoall":
            comm.Alltoall(s.spec, o.spec)
        else:
            comm.Ialltoall(s.spec, o.spec).Wait()
    elif m in ("Bcast", "Ibcast", "Bcast_init"):
        x = _values(case, root, n)
        o = build(rform if r != root else sform if sform != "readonly" else "array",
                  rpseed if r != root else spseed, n, 1, dt, x if r == root else None)
        outs.append(o)
        if m == "Bcast":
            comm.Bcast(o.spec, root=root)
        elif m == "Ibcast":
            comm.Ibcast(o.spec, root=root).Wait()
        else:
            rq = comm.Bcast_init(o.spec, root=root)
            rq.Start()
            rq.Wait()
            rq.Free()
        mine = float(np.abs(x).max()) if n else 0.0
        return outs, ins, mine, 1
    elif m == "Gather":
        s = send(n)
        o = recv(n, p) if r == root else None
        comm.Gather(s.spec, o.spec if o else None, root=root)
    elif m == "Scatter":
        s = send(n, p) if r == root else None
        o = recv(n)
        comm.Scatter(s.spec if s else None, o.spec, root=root)
    elif m in ("Allgatherv", "Gatherv"):
        counts = case.counts
        s = send(counts[r])
        o = None
        if m == "Allgatherv" or r == root:
            o = build_v(case.vform, counts, dt, None, rpseed)
            outs.append(o)
        if m == "Allgatherv":
            comm.Allgatherv(s.spec, o.spec)
        else:
            comm.Gatherv(s.spec, o.spec if o else None, root=root)
    elif m == "Scatterv":
        counts = case.counts
        s = None
        if r == root:
            x = _values(case, r, sum(counts))
            s = build_v(case.vform, counts, dt, x, spseed)
            s.keep.append(x)
            ins.append(s)
        o = recv(counts[r])
        comm.Scatterv(s.spec if s else None, o.spec, root=root)
    elif m == "Alltoallv":
        counts = case.counts  # rank r sends counts[j] to rank j, receives counts[r] from each
        x = _values(case, r, sum(counts))
        s = build_v(case.vform, counts, dt, x, spseed)
        s.keep.append(x)
        ins.append(s)
        o = build_v(case.vform, [counts[r]] * p, dt, None, rpseed)
        outs.append(o)
        comm.Alltoallv(s.spec, o.spec)
    else:
        raise ValueError(m)
    mine = max((float(np.abs(b.keep[-1]).max()) for b in ins if b.keep[-1].size), default=0.0)
    if m == "Allreduce_in_place":
        mine = float(np.abs(_values(case, r, n)).max()) if n else 0.0
    return outs, ins, mine, p if m in REDUCING else 1


def bound(case: Case, p: int, largest: float, total: float) -> float | None:
    """The largest difference allowed between an mpicomp output and plain MPI's (None:
    bitwise equal). ``largest``: the largest input magnitude on any rank; ``total``: the
    sum over ranks of each rank's largest (a reduction's partial sums stay below it)."""
    settings = CODECS[case.codec]
    dt = np.dtype(case.dtype)
    if case.codec in ("none", "default"):
        return None
    eps = float(np.finfo(dt).eps)
    reducing = case.method in REDUCING
    rounding = p * eps * total if reducing else 0.0  # plain MPI's own order of additions
    if case.codec == "tolerance":
        return settings["tolerance"] * (1 + 1e-6) + rounding
    codec = get_codec(settings["codec"] if isinstance(settings["codec"], dict)
                      else {"id": settings["codec"], "rate": settings["rate"]})
    consts = bounds.codec_constants(codec, dt)
    c, a = consts if consts is not None else (ZFP_MARGIN, 0.0)
    if not reducing:
        return c * largest + a
    worst = max(bounds.allreduce_bound(alg, p, c, a, total, dt)
                for alg in ("ring", "direct", "recursive_doubling", "allgather"))
    worst = max(worst, bounds.allreduce_bound("hierarchical", p, c, a, total, dt, nodes=p))
    return worst + rounding


def run_case(world: MPI.Intracomm, case: Case) -> list[str]:
    """Run ``case`` on plain MPI and through mpicomp (every rank of ``world``); this rank's
    complaints. Whatever raises on this rank becomes a complaint, and every rank makes
    the same collectives of its own in the same order, so the ranks stay in step."""
    p = world.Get_size()
    problems: list[str] = []
    plain_out: list[Built] = []
    plain_in: list[Built] = []
    outs: list[Built] = []
    ins: list[Built] = []
    mine = 0.0
    try:
        plain_out, plain_in, mine, _ = _call(world, case)
    except Exception as exc:  # noqa: BLE001 - a case plain MPI refuses is a broken case
        problems.append(f"plain MPI raised {_raised(exc)}")
    mc = _compressing(world, case.codec)
    mc.reset_stats()
    if not problems:
        try:
            outs, ins, _, _ = _call(mc, case)
        except Exception as exc:  # noqa: BLE001 - reported with the case
            problems.append(_raised(exc))
    largest = world.allreduce(mine, op=MPI.MAX)
    total = world.allreduce(mine, op=MPI.SUM)
    if not problems:
        try:
            problems += _compare(case, p, plain_out, plain_in, outs, ins, largest, total)
        except Exception as exc:  # noqa: BLE001 - reported with the case
            problems.append(f"the comparison raised {_raised(exc)}")
    problems += _leftovers(world, mc)
    st = mc.stats()
    free(*plain_out, *plain_in, *outs, *ins)
    return [f"rank {world.Get_rank()}: {pr} [stats: {_brief(st)}]" for pr in problems]


def _raised(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-3:]
    return (f"{type(exc).__name__}: {exc} (at "
            + " < ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(where)) + ")")


def _compare(case: Case, p: int, plain_out: list[Built], plain_in: list[Built],
             outs: list[Built], ins: list[Built], largest: float, total: float) -> list[str]:
    """The complaints about mpicomp's buffers against plain MPI's."""
    problems = []
    lim = bound(case, p, largest, total)
    for i, (want, got) in enumerate(zip(plain_out, outs, strict=True)):
        if lim is None:
            if want.base.tobytes() != got.base.tobytes():
                bad = np.flatnonzero(want.base != got.base)
                problems.append(f"output {i}: {bad.size} values differ from plain MPI "
                                f"(first at {bad[:5]}), codec none")
        else:
            gaps = want.base == SENTINEL
            err = np.abs(got.base.astype(np.float64) - want.base)
            if not np.all(got.base[gaps] == SENTINEL):
                problems.append(f"output {i}: memory outside the datatype was written")
            elif err.size and not err.max() <= lim:
                problems.append(f"output {i}: error {err.max():.3g} over the bound "
                                f"{lim:.3g} (largest input {largest:.3g})")
    for i, b in enumerate(ins):
        if b.base.tobytes() != plain_in[i].base.tobytes():
            problems.append(f"input {i}: the send buffer changed")
    return problems


def _leftovers(world: MPI.Intracomm, mc: mpicomp.Comm) -> list[str]:
    """Messages a case left unreceived (on either communicator, or held by mpicomp's
    probes): named, and received so that the next case starts clean."""
    world.Barrier()
    found = []
    status = MPI.Status()
    for name, c in (("plain", world), ("mpicomp", mc)):
        while MPI.Intracomm.Iprobe(c, MPI.ANY_SOURCE, MPI.ANY_TAG, status):
            n = status.Get_count(MPI.BYTE)
            MPI.Intracomm.Recv(c, [np.empty(n, np.uint8), MPI.BYTE], status.Get_source(),
                               status.Get_tag())
            found.append(f"{name}: a message of {n} bytes from rank {status.Get_source()} "
                         f"(tag {status.Get_tag()}) was never received")
    if mc._ready().mailbox:
        found.append("mpicomp: a probed message is still held")
    world.Barrier()
    return found


_COMMS: dict[str, mpicomp.Comm] = {}


def _compressing(world: MPI.Intracomm, codec: str) -> mpicomp.Comm:
    """mpicomp's communicator of ``codec``'s settings over a duplicate of ``world`` (made
    once per codec: collective, so every rank makes it at the same case)."""
    if codec not in _COMMS:
        _COMMS[codec] = mpicomp.Comm(world.Dup(), **CODECS[codec])
    return _COMMS[codec]


def close() -> None:
    """Free the communicators :func:`run_case` made (collective)."""
    for name in sorted(_COMMS):
        _COMMS.pop(name).Free()


def _brief(stats: dict[str, Any]) -> str:
    return "; ".join(f"{k}: {v.get('compressed', 0)}/{v.get('calls', 0)} compressed "
                     f"{dict(v.get('fallbacks', {}))}" for k, v in stats.items())


def counts_for(method: str, p: int, n: int, extra: list[int]) -> list[int]:
    """The counts a case needs: one per rank for the v-calls (``extra``), else ``[n]``."""
    if method in ("Allgatherv", "Gatherv", "Scatterv", "Alltoallv", "Reduce_scatter"):
        return [int(e) for e in extra[:p]]
    return [n]

