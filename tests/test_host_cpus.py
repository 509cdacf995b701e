"""bench/host_cpus.sh: how the simulated cluster shares this machine's cores out to its hosts."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "host_cpus.sh"


def cores_of(index: int, hosts: int, cpus: str) -> str:
    p = subprocess.run(["bash", str(SCRIPT), str(index), str(hosts), cpus],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@pytest.mark.parametrize("hosts, cpus, expected", [
    (4, "0-1", ["0", "1", "0", "1"]),                 # more hosts than cores: i mod n
    (2, "0-1", ["0", "1"]),
    (2, "0-3", ["0,1", "2,3"]),                       # a share of its own each
    (3, "0-7", ["0,1", "2,3", "4,5"]),                # cores left over stay unused
    (2, "1,3,5-6", ["1,3", "5,6"]),                   # the allowed set, gaps and ranges
    (1, "4", ["4"]),
])
def test_each_host_gets_its_own_cores(hosts, cpus, expected):
    assert [cores_of(i, hosts, cpus) for i in range(hosts)] == expected


def test_ring_neighbours_never_share_a_core():
    got = [cores_of(i, 5, "0-1") for i in range(5)]
    assert all(got[i] != got[i + 1] for i in range(4)), got


@pytest.mark.parametrize("args", [["0", "2"], ["2", "2", "0-1"], ["0", "0", "0-1"],
                                  ["0", "2", ""]])
def test_refuses_bad_arguments(args):
    p = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and p.stderr, p
