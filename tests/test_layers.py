"""The package's layers import downwards only (issue 29): kernels, codecs, backend, the rest.

Read from the source with ``ast`` (every import, also those inside functions):

* ``codecs/`` is a leaf: it imports only :mod:`mpicomp.errors` and the kernels;
* ``backend/`` imports the kernels, the codecs (for types), the errors and
  :mod:`mpicomp.requests` (a staged plain call's request), nothing of the
  communicator, its calls, algorithms, decision or training code.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

import mpicomp

PACKAGE = pathlib.Path(mpicomp.__file__).resolve().parent

#: what each layer may import from mpicomp (module names, prefixes end with ".")
ALLOWED = {
    "codecs": ("mpicomp.codecs.", "mpicomp.errors", "mpicomp.kernels."),
    "backend": ("mpicomp.backend.", "mpicomp.codecs", "mpicomp.errors", "mpicomp.kernels.",
                "mpicomp.requests"),
}


def _imports(source: str, package: str) -> list[str]:
    """The mpicomp names a module of ``package`` imports, absolute (``from ..errors import
    E`` in ``mpicomp.codecs`` gives ``mpicomp.errors.E``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("mpicomp")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                root = ".".join(parts[: len(parts) - node.level + 1]
                                + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("mpicomp"):
                root = node.module
            else:
                continue
            found += [f"{root}.{a.name}" for a in node.names]
    return found


def _violations(names: list[str], layer: str) -> list[str]:
    return [m for m in names
            if not any(m == a.rstrip(".") or m.startswith(a) for a in ALLOWED[layer])]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below(layer):
    files = sorted((PACKAGE / layer).glob("*.py"))
    assert files
    wrong = {f.name: bad for f in files
             if (bad := _violations(_imports(f.read_text(), f"mpicomp.{layer}"), layer))}
    assert wrong == {}, wrong


def test_the_check_finds_an_import_from_above():
    source = "from .. import device\nfrom ..errors import E\n" \
             "def f():\n    from ..comm import Comm\n    import mpicomp.pipeline\n"
    names = _imports(source, "mpicomp.codecs")
    assert names == ["mpicomp.device", "mpicomp.errors.E", "mpicomp.comm.Comm",
                     "mpicomp.pipeline"]
    assert _violations(names, "codecs") == ["mpicomp.device", "mpicomp.comm.Comm",
                                            "mpicomp.pipeline"]
