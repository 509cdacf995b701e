"""Policies: precedence, the environment, thresholds, derived communicators, stats, debug log."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.policy import DEFAULT, Policy, environment_policy, resolve


def test_default_policy_when_nothing_is_set():
    res = resolve(Policy(), Policy(), environ={})
    assert res.codec.get_config() == {"id": "bitplane", "rate": 16.0, "block_size": 32}
    assert (res.threshold, res.algorithm) == (DEFAULT.threshold, "auto")


def test_call_beats_communicator_beats_environment():
    env = {"MPICOMP_CODEC": "zfp", "MPICOMP_RATE": "12", "MPICOMP_THRESHOLD": "1K",
           "MPICOMP_ALGORITHM": "ring"}
    only_env = resolve(Policy(), Policy(), environ=env)
    assert only_env.codec.get_config() == {"id": "zfp", "rate": 12.0, "dims": 1}
    assert (only_env.threshold, only_env.algorithm) == (1024, "ring")
    comm_level = resolve(Policy(), Policy(codec="bitplane", rate=8.25), environ=env)
    assert comm_level.codec.get_config()["id"] == "bitplane"
    assert comm_level.codec.get_config()["rate"] == 8.25
    assert comm_level.threshold == 1024  # still from the environment
    call = resolve(Policy(rate=4.25, algorithm="allgather"),
                   Policy(codec="bitplane", rate=8.25), environ=env)
    assert call.codec.get_config()["rate"] == 4.25 and call.algorithm == "allgather"


def test_codec_none_in_environment_turns_compression_off():
    assert not resolve(Policy(), Policy(), environ={"MPICOMP_CODEC": "none"}).enabled
    assert resolve(Policy(codec="zfp"), Policy(), environ={"MPICOMP_CODEC": "none"}).enabled


def test_codec_config_json_in_environment():
    env = {"MPICOMP_CODEC": '{"id": "zfp", "dims": 3, "rate": 8}'}
    assert resolve(Policy(), Policy(), environ=env).codec.get_config() == {
        "id": "zfp", "rate": 8.0, "dims": 3}


@pytest.mark.parametrize(
    ("var", "value", "exc", "match"),
    [
        ("MPICOMP_CODEC", "lz4", ValueError, "unknown codec id 'lz4'"),
        ("MPICOMP_RATE", "fast", ValueError, "MPICOMP_RATE must be a number, got 'fast'"),
        ("MPICOMP_RATE", "-3", ValueError, "MPICOMP_RATE must be a positive number"),
        ("MPICOMP_THRESHOLD", "12 parsecs", ValueError, "MPICOMP_THRESHOLD must be a byte count"),
        ("MPICOMP_ALGORITHM", "butterfly", ValueError, "MPICOMP_ALGORITHM must be one of"),
    ],
)
def test_bad_environment_values_are_named(var, value, exc, match):
    with pytest.raises(exc, match=match):
        environment_policy({var: value})


def test_threshold_suffixes():
    for text, expected in [("65536", 65536), ("64K", 65536), ("64KiB", 65536), ("1M", 1 << 20),
                           ("2MB", 2 << 20), ("1G", 1 << 30)]:
        assert environment_policy({"MPICOMP_THRESHOLD": text}).threshold == expected


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"rate": "8"}, TypeError, "rate must be a number of bits per value, got '8'"),
        ({"rate": 0}, ValueError, "rate must be a positive number"),
        ({"threshold": -1}, ValueError, "threshold must be >= 0 bytes, got -1"),
        ({"threshold": 1.5}, TypeError, "threshold must be an integer number of bytes"),
        ({"algorithm": "tree"}, ValueError, "algorithm must be one of"),
        ({"codec": 3}, TypeError, "codec must be a codec id, a config dict or a Codec"),
    ],
)
def test_bad_policy_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        mpicomp.Comm(MPI.COMM_WORLD, **kwargs)


def test_codec_rejects_the_policy_rate_with_its_own_message():
    mc = mpicomp.Comm(MPI.COMM_WORLD, codec="cast", rate=8)
    with pytest.raises(ValueError, match=r"policy codec .*cast.*rate must be in \[16"):
        mc.resolved_policy()


def test_comm_is_an_intracomm_sharing_the_handle():
    mc = mpicomp.Comm(MPI.COMM_WORLD, codec="zfp")
    assert isinstance(mc, MPI.Intracomm) and mc == MPI.COMM_WORLD
    assert mc.handle == MPI.COMM_WORLD.handle
    assert isinstance(mpicomp.COMM_WORLD, mpicomp.Comm)
    assert mc.Get_rank() == MPI.COMM_WORLD.Get_rank()
    assert mc.allreduce(1) == MPI.COMM_WORLD.Get_size()  # lowercase methods: mpi4py's own
    with pytest.raises(TypeError, match="wraps an MPI.Intracomm"):
        mpicomp.Comm("world")


@pytest.mark.mpi
def test_derived_communicators_carry_and_override_the_policy(comm):
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25, threshold=0)
    dup = mc.Dup()
    dup_over = mc.Dup(rate=4.25)
    split = mc.Split(color=comm.Get_rank() % 2, key=0)
    split_over = mc.Split(comm.Get_rank() % 2, 0, codec="none")
    local = mc.Split_type(MPI.COMM_TYPE_SHARED)
    created = mc.Create(mc.Get_group())
    try:
        for c in (dup, dup_over, split, split_over, local, created):
            assert isinstance(c, mpicomp.Comm)
        assert dup.policy == mc.policy and split.policy == mc.policy
        assert local.policy == mc.policy and created.policy == mc.policy
        assert dup_over.policy.rate == 4.25 and dup_over.policy.codec == "bitplane"
        assert split_over.policy.codec == "none" and split_over.policy.rate == 8.25
        x = np.ones(3000, np.float32)
        y = np.empty_like(x)
        split.Allreduce(x, y)
        assert np.all(y == split.Get_size())
        st = split.stats()["Allreduce"]
        assert st["compressed"] == (1 if split.Get_size() > 1 else 0)
    finally:
        for c in (dup, dup_over, split, split_over, local, created):
            c.Free()


@pytest.mark.mpi
def test_threshold_and_dtype_fallbacks_are_counted(comm):
    p = comm.Get_size()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25, threshold=4096)
    small = np.ones(100, np.float32)  # 400 B
    mc.Allreduce(small, np.empty_like(small))
    ints = np.ones(5000, np.int32)
    mc.Allreduce(ints, np.empty_like(ints))
    big = np.ones(5000, np.float32)
    mc.Allreduce(big, np.empty_like(big), op=MPI.PROD)
    mc.Allreduce(big, np.empty_like(big))
    st = mc.stats()["Allreduce"]
    assert st["calls"] == 4
    if p == 1:
        assert st["fallbacks"] == {"single rank": 4}
        return
    assert st["fallbacks"] == {
        "below threshold (400 B < 4096 B)": 1,
        "dtype int32 is not float32/float64": 1,
        "op PROD cannot be computed on bitplane streams": 1,
    }
    assert st["compressed"] == 1
    assert st["raw_bytes"] == 400 + 20000 + 20000 + 20000
    assert st["wire_bytes"] < st["raw_bytes"]


def test_buffer_spec_errors():
    mc = mpicomp.Comm(MPI.COMM_WORLD, codec="bitplane", threshold=0)
    x = np.ones((40, 40), np.float32)
    with pytest.raises(ValueError, match="must be contiguous"):
        mc.Allreduce(x[:, ::2], np.empty((40, 20), np.float32))
    with pytest.raises(ValueError, match="mismatch in send and receive MPI datatypes"):
        mc.Allreduce([x, MPI.DOUBLE], np.empty_like(x))  # to MPI as given: mpi4py's own error
    # one rank: every collective is plain, so bare arrays reach mpi4py, which says it
    mismatch = ("sendbuf has 1600 values, recvbuf 10" if mc.Get_size() > 1
                else "mismatch in send count 1600 and receive count 10")
    with pytest.raises(ValueError, match=mismatch):
        mc.Allreduce(x, np.empty(10, np.float32))
    with pytest.raises(ValueError, match="count 2000 at displacement 0 needs 2000 elements"):
        mc.Allreduce([x, 2000, MPI.FLOAT], np.empty(2000, np.float32))


def test_debug_log_names_the_path(tmp_path):
    script = tmp_path / "debug.py"
    script.write_text(
        "import numpy as np\n"
        "from mpicomp import COMM_WORLD as c\n"
        "x = np.ones(1000, np.float32)\n"
        "req = c.Isend(x, 0, 1); y = np.empty_like(x); c.Recv(y, 0, 1); req.Wait()\n"
        "c.Allreduce(x, np.empty_like(x))\n"
    )
    env = dict(os.environ, MPICOMP_DEBUG="1", MPICOMP_THRESHOLD="0", MPICOMP_CODEC="zfp",
               MPICOMP_RATE="16")
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("[mpicomp rank 0]")]
    assert lines[0].startswith("[mpicomp rank 0] Isend: compressed (frame, zfp)")
    assert lines[1].startswith("[mpicomp rank 0] Recv: compressed (frame, zfp)")
    assert lines[2].startswith("[mpicomp rank 0] Allreduce: plain MPI (single rank)")
