"""The layout sweep: every buffer form mpi4py accepts x every sending method x every codec,
through mpicomp and through plain MPI, on 2 and 3 ranks (issue 80).

Rank 0 draws cases with hypothesis (``tests/layout_cases.py`` says what a
case holds) and broadcasts each; every rank runs it and rank 0 gathers the
complaints, so a failure on any rank fails the example and hypothesis
shrinks it with every rank taking part. A call that raises on one rank and
not on another, or hangs, hangs the job: the runner's timeout fails it.
Before the drawn cases, a fixed set covers each form as sender and receiver,
each method under each codec, and issue 80's transpose.

``make test`` runs ``MPICOMP_SWEEP_EXAMPLES`` (400) drawn cases per stage; the
long run is ``make test-sweep`` (docs/reliability.md).
"""
from __future__ import annotations

import os

import layout_cases as lc  # tests/layout_cases.py
import numpy as np
import pytest
from mpi4py import MPI

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("MPICOMP_SWEEP_EXAMPLES", "400"))

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(1800)]


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _forms(forms: tuple[str, ...]) -> tuple[str, ...]:
    return forms if _has_torch() else tuple(f for f in forms if not f.startswith("torch"))


SEND = _forms(lc.SEND_FORMS)
RECV = _forms(lc.RECV_FORMS)


def _sizes(comm: MPI.Intracomm) -> None:
    if comm.Get_size() > 3:
        pytest.skip("the sweep runs on 2 and 3 ranks")


@st.composite
def cases(draw, p: int) -> lc.Case:
    method = draw(st.sampled_from(lc.METHODS))
    n = draw(st.one_of(st.integers(1, 300), st.sampled_from([1024, 4096, 5000])))
    extra = draw(st.lists(st.integers(0, 300), min_size=p, max_size=p))
    forms = st.tuples(st.sampled_from(SEND), st.integers(0, 2**16))
    rforms = st.tuples(st.sampled_from(RECV), st.integers(0, 2**16))
    return lc.Case(
        method=method, codec=draw(st.sampled_from(list(lc.CODECS))),
        dtype=draw(st.sampled_from("fd")), counts=lc.counts_for(method, p, n, extra),
        root=draw(st.integers(0, p - 1)), seed=draw(st.integers(0, 2**31)),
        send=draw(st.lists(forms, min_size=p, max_size=p)),
        recv=draw(st.lists(rforms, min_size=p, max_size=p)),
        vform=draw(st.sampled_from(lc.V_FORMS)))


def _drive(comm: MPI.Intracomm, driver: MPI.Intracomm, case: lc.Case) -> None:
    """Rank 0: run ``case`` on every rank; an AssertionError with every rank's complaints."""
    driver.bcast(case, root=0)
    complaints = driver.gather(lc.run_case(comm, case), root=0)
    flat = [c for rank in complaints for c in rank]
    if flat:  # (printed as it happens: the first failure, before hypothesis shrinks it)
        print(f"FAILED {case.short()}:\n  " + "\n  ".join(flat), flush=True)
    assert not flat, f"{case.short()}:\n  " + "\n  ".join(flat)


def _serve(comm: MPI.Intracomm, driver: MPI.Intracomm) -> None:
    """Ranks but 0: run the cases rank 0 sends until it sends None."""
    while (case := driver.bcast(None, root=0)) is not None:
        driver.gather(lc.run_case(comm, case), root=0)


def _fixed(p: int) -> list[lc.Case]:
    """Each send form (on rank 0) and receive form (on the last rank) in Send and
    Allgather; each method under each codec with arrays on all ranks but 0, a vector
    datatype on rank 0; issue 80's transpose."""
    out = []
    arrays = [("array", 0)] * p
    for i, form in enumerate(SEND):
        for method in ("Send", "Allgather", "Scatter"):
            out.append(lc.Case(method, "bitplane", "fd"[i % 2], [257], 0, i,
                               [(form, i)] + arrays[1:], arrays))
    for i, form in enumerate(RECV):
        for method in ("Isend", "Sendrecv_replace", "Isendrecv_replace", "Allreduce", "Bcast"):
            out.append(lc.Case(method, "bitplane16", "fd"[i % 2], [320], 0, i, arrays,
                               arrays[:-1] + [(form, i)]))
    for j, codec in enumerate(lc.CODECS):
        for i, method in enumerate(lc.METHODS):
            counts = lc.counts_for(method, p, 96, [96 + 7 * k for k in range(p)])
            out.append(lc.Case(method, codec, "fd"[(i + j) % 2], counts, (i + j) % p, i,
                               [("vector", i)] + arrays[1:], [("indexed", i)] + arrays[1:],
                               lc.V_FORMS[i % len(lc.V_FORMS)]))
    out.append(lc.Case("Send", "bitplane16", "f", [64 * 64], 0, 80,
                       [("resized_transpose", 3)] + arrays[1:], arrays))
    return out


def test_every_form_method_and_codec_once_matches_plain_mpi(comm):
    """The fixed cases (see :func:`_fixed`), every one on every rank."""
    _sizes(comm)
    problems = []
    for case in _fixed(comm.Get_size()):
        mine = lc.run_case(comm, case)
        problems += comm.allreduce([f"{case.short()}: {m}" for m in mine])
    lc.close()
    assert not problems, "\n".join(problems[:20]) + f"\n({len(problems)} in all)"


def test_drawn_layouts_methods_and_codecs_match_plain_mpi(comm):
    """``EXAMPLES`` cases drawn by hypothesis on rank 0, run on every rank."""
    _sizes(comm)
    driver = comm.Dup()
    try:
        if comm.Get_rank() != 0:
            _serve(comm, driver)
            return

        ran = []

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(case=cases(comm.Get_size()))
        def sweep(case: lc.Case) -> None:
            ran.append(case.method)
            _drive(comm, driver, case)

        try:
            sweep()
        finally:
            driver.bcast(None, root=0)
        print(f"layout sweep: {len(ran)} cases on {comm.Get_size()} ranks, "
              f"{len(set(ran))} methods")
        assert len(ran) >= EXAMPLES
    finally:
        lc.close()
        driver.Free()


STRIDED_CALLS = {
    "Send": lambda c, x, y: c.Send(x, (c.Get_rank() + 1) % c.Get_size()),
    "Isend": lambda c, x, y: c.Isend(x, (c.Get_rank() + 1) % c.Get_size()),
    "Sendrecv": lambda c, x, y: c.Sendrecv(x, (c.Get_rank() + 1) % c.Get_size(), 0, y,
                                           (c.Get_rank() - 1) % c.Get_size(), 0),
    "Allreduce": lambda c, x, y: c.Allreduce(x, y),
    "Reduce": lambda c, x, y: c.Reduce(x, y, root=0),
    "Bcast": lambda c, x, y: c.Bcast(x, root=0),
    "Allgather": lambda c, x, y: c.Allgather(x, np.empty(x.size * c.Get_size())),
    "Alltoall": lambda c, x, y: c.Alltoall(x, np.empty(x.size)),
}


@pytest.mark.parametrize("name", sorted(STRIDED_CALLS))
def test_a_strided_numpy_array_is_refused_on_every_rank_before_anything_is_sent(comm, name):
    """mpi4py refuses a NumPy array that is not contiguous (BufferError); mpicomp refuses it
    as well, with a ValueError naming the shape and strides or mpi4py's own error, on
    every rank and before any message leaves (the barrier after it would hang if one
    rank's message waited for a receive)."""
    _sizes(comm)
    mc = lc._compressing(comm, "bitplane")
    p = comm.Get_size()
    x = np.arange(8.0 * p)[::2]
    y = np.empty(4 * p)
    with pytest.raises((ValueError, BufferError)):
        STRIDED_CALLS[name](comm, x, y)
    with pytest.raises((ValueError, BufferError)) as refused:
        STRIDED_CALLS[name](mc, x, y)
    assert "contiguous" in str(refused.value)
    comm.Barrier()
    lc.close()
