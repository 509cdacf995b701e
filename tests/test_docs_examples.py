"""The examples of docs/usage.md and README.md run as written and pass their own asserts.

Each example is a fenced ``python`` block preceded by a comment line

    <!-- example: NAME nprocs=N env=VAR=VALUE,VAR=VALUE -->

(``nprocs`` defaults to 1, ``env`` to nothing). It is written to a file and
run under ``mpiexec -n N`` (the one next to ``sys.executable``) with the
``MPICOMP_*`` variables of the caller's environment removed and the
example's set. Not marked ``mpi``: the test launches its own mpiexec, so it
runs in the serial stage only.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import launcher  # tests/launcher.py
import pytest

pytestmark = pytest.mark.slow  # left out of make test-quick

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "docs" / "usage.md"
README = ROOT / "README.md"
TIMEOUT_S = 120

_EXAMPLE = re.compile(
    r"^<!--\s*example:\s*(?P<name>[\w-]+)(?P<opts>[^\n]*?)\s*-->\s*\n"
    r"```python\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def parse_examples(text: str) -> list[dict]:
    """[{name, nprocs, env, code}] of every marked example, in document order."""
    examples = []
    for m in _EXAMPLE.finditer(text):
        nprocs, env = 1, {}
        for opt in m["opts"].split():
            key, _, value = opt.partition("=")
            if key == "nprocs":
                nprocs = int(value)
            elif key == "env":
                for pair in value.split(","):
                    var, _, val = pair.partition("=")
                    env[var] = val
            else:
                raise ValueError(f"example {m['name']}: unknown option {opt!r}")
        examples.append({"name": m["name"], "nprocs": nprocs, "env": env, "code": m["code"]})
    return examples


EXAMPLES = parse_examples(USAGE.read_text()) + parse_examples(README.read_text())


def test_usage_has_examples():
    names = [e["name"] for e in EXAMPLES]
    assert len(names) == len(set(names)), f"duplicate example names: {names}"
    # every ```python block in usage.md and README.md is a marked, tested example
    blocks = USAGE.read_text().count("```python") + README.read_text().count("```python")
    assert len(EXAMPLES) == blocks, "unmarked python block"
    assert {"per_call", "per_communicator", "environment", "environment_off",
            "readme"} <= set(names)


def test_parse_examples():
    text = (
        "<!-- example: demo nprocs=3 env=MPICOMP_CODEC=zfp,MPICOMP_RATE=16 -->\n"
        "```python\nprint(1)\n```\n"
    )
    (ex,) = parse_examples(text)
    assert ex == {"name": "demo", "nprocs": 3, "code": "print(1)\n",
                  "env": {"MPICOMP_CODEC": "zfp", "MPICOMP_RATE": "16"}}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e["name"] for e in EXAMPLES])
def test_usage_example(example, tmp_path):
    mpiexec = launcher.find_mpiexec()
    if mpiexec is None:
        pytest.skip(f"no mpiexec next to {sys.executable} or on PATH")
    script = tmp_path / f"{example['name']}.py"
    script.write_text(example["code"])
    # the example's own settings only; no process-manager variables of an enclosing mpiexec
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MPICOMP_", "PMI_", "PMIX_", "HYDRA_", "OMPI_"))}
    env.update(launcher.launcher_env(str(mpiexec)))  # Open MPI's: root, more ranks than cores
    env.update(example["env"])
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # ranks share the cores (see run_tests.py)
    env["MPIEXEC_TIMEOUT"] = str(TIMEOUT_S)
    cmd = [str(mpiexec), "-n", str(example["nprocs"]), sys.executable, str(script)]
    # mpiexec stops the ranks after MPIEXEC_TIMEOUT; the backstop kills its process group
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"example {example['name']} did not finish in {TIMEOUT_S + 30} s")
    assert proc.returncode == 0, (
        f"example {example['name']} (mpiexec -n {example['nprocs']}, env {example['env']}) "
        f"exited {proc.returncode}\n--- stdout\n{stdout[-4000:]}\n"
        f"--- stderr\n{stderr[-4000:]}"
    )
    if example["env"].get("MPICOMP_DEBUG"):
        assert "[mpicomp rank 0] Allreduce: compressed" in stderr
