"""CUDA-awareness detection through the loaded MPI library, and its override."""
from __future__ import annotations

import pytest

from mpicomp.backend import mpi_library as ca


def test_pypi_mpich_says_it_is_not_cuda_aware(monkeypatch):
    monkeypatch.delenv(ca.ENV, raising=False)
    path = ca.path()
    aware, how = ca.cuda_aware()
    assert path is not None and "libmpi" in path
    assert aware is False
    assert "MPIX_GPU_query_support(CUDA) = 0" in how or "MPIX_Query_cuda_support() = 0" in how


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("0", False)])
def test_environment_overrides(monkeypatch, value, expected):
    monkeypatch.setenv(ca.ENV, value)
    assert ca.cuda_aware() == (expected, f"{ca.ENV}={value}")


def test_bad_environment_value(monkeypatch):
    monkeypatch.setenv(ca.ENV, "yes")
    with pytest.raises(ValueError, match="MPICOMP_CUDA_AWARE must be 0 or 1, got 'yes'"):
        ca.cuda_aware()


def test_library_without_query_functions():
    aware, how = ca._query_library("libc.so.6")
    assert aware is False and "no CUDA query function" in how
