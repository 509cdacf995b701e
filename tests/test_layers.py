"""The package's layers import downwards only (issue 29): kernels, codecs, backend, the rest.

Read from the source with ``ast`` (every import, also those inside functions):

* ``codecs/`` is a leaf: it imports only :mod:`mpicomp.errors`, the kernels and
  :mod:`mpicomp.cuda_runtime` (how kernels see CUDA memory and streams);
* ``backend/`` imports the kernels, the codecs (for types), the errors and
  :mod:`mpicomp.requests` (a staged plain call's request), nothing of the
  communicator, its calls, algorithms, decision or training code.
"""
from __future__ import annotations

import ast
import re
import pathlib

import pytest

import mpicomp

PACKAGE = pathlib.Path(mpicomp.__file__).resolve().parent

#: what each layer may import from mpicomp (module names, prefixes end with ".")
ALLOWED = {
    "codecs": ("mpicomp.codecs.", "mpicomp.errors", "mpicomp.kernels.", "mpicomp.cuda_runtime"),
    "backend": ("mpicomp.backend.", "mpicomp.codecs", "mpicomp.errors", "mpicomp.kernels.",
                "mpicomp.cuda_runtime", "mpicomp.requests"),
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


#: the layers a call passes, top to bottom (issue 55): a module imports only from its own
#: layer and those below it. Module names, or prefixes ending in "."; the modules not named
#: here (stats, buffers, topology, frame_format, fastpath, ...) are shared helpers, and the import
#: graph as a whole has no circle (test_no_module_imports_itself_back)
LAYERS = (
    ("comm", ("mpicomp.comm",)),
    ("calls", ("mpicomp.calls.",)),
    ("pipeline", ("mpicomp.pipeline", "mpicomp.mailbox")),
    ("decision", ("mpicomp.decision.", "mpicomp.settings", "mpicomp.calibration",
                  "mpicomp.calibration_file", "mpicomp.calibration_data", "mpicomp.model")),
    ("algorithms", ("mpicomp.call_bodies", "mpicomp.algorithms.", "mpicomp.collectives")),
    ("backend", ("mpicomp.backend.",)),
    ("codecs", ("mpicomp.codecs.", "mpicomp.kernels.", "mpicomp.cuda_runtime")),
)


def _module_name(path: pathlib.Path) -> tuple[str, str]:
    """A file's module name and the package its relative imports start from."""
    parts = ("mpicomp", *path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), ".".join(parts[:-1])
    return ".".join(parts), ".".join(parts[:-1])


def _graph() -> dict[str, set[str]]:
    """Every module of mpicomp/ and the modules of mpicomp/ it imports (a name imported
    from a module counts as that module; the kernels, installed from kernels/, are left
    out: they import nothing of mpicomp/)."""
    files = {_module_name(f): f for f in PACKAGE.rglob("*.py")
             if f.relative_to(PACKAGE).parts[0] != "kernels"}
    modules = {name for name, _ in files}
    graph = {}
    for (name, package), f in files.items():
        found = set()
        for m in _imports(f.read_text(), package):
            if m.startswith("mpicomp.kernels"):
                continue
            while m and m not in modules:
                m = m.rpartition(".")[0]
            if m and m != name:
                found.add(m)
        graph[name] = found
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str) -> int | None:
    for depth, (_, members) in enumerate(LAYERS):
        if any(module == m.rstrip(".") or module.startswith(m) for m in members
               if m.endswith(".") or module == m):
            return depth
    return None


def test_no_module_imports_itself_back():
    assert _circles(_graph()) == []


def test_the_check_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_each_layer_imports_only_its_own_and_those_below():
    upward = []
    for module, imported in _graph().items():
        mine = _layer(module)
        if mine is None:
            continue
        upward += [f"{module} -> {m}" for m in sorted(imported)
                   if (theirs := _layer(m)) is not None and theirs < mine]
    assert upward == []


def test_the_layers_are_found():
    assert _layer("mpicomp.comm") == 0
    assert _layer("mpicomp.calls.allreduce") == 1
    assert _layer("mpicomp.decision.screen") == 3
    assert _layer("mpicomp.codecs.zfp") == 6
    assert _layer("mpicomp.calls") == 1 and _layer("mpicomp.stats") is None


def test_the_architecture_picture_names_files_that_exist():
    """docs/architecture.md opens with a picture of the layers: every file and folder it
    names is there (``calibration*.py``: a pattern), so the picture stays true."""
    root = PACKAGE.parent
    text = (root / "docs" / "architecture.md").read_text()
    picture = text.split("```")[1]
    names = set(re.findall(r"[\w*]+\.py|\b\w+/", picture))
    assert {"comm.py", "calls/", "decision/", "fastpath/", "codecs/"} <= names, names
    missing = [n for n in sorted(names)
               if not list(PACKAGE.rglob(n.rstrip("/"))) and not (root / n).exists()]
    assert missing == []
