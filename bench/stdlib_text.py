"""Real text every Python install ships: the standard library's own sources, as bytes.

``corpus(train_bytes, val_bytes)`` reads the ``.py`` files of the standard
library (``sysconfig.get_paths()["stdlib"]``; its top level and packages,
without ``test``, ``idlelib``, ``site-packages`` and the like), in sorted path
order, and returns two disjoint byte arrays: training text from the files in
that order, and held-out validation text from every 10th file, which the
training text never contains. The same Python version gives the same bytes
on every machine; another version gives other text (the version is part of
every report).
"""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np

__all__ = ["corpus", "source_files"]

#: folders of the standard library left out: tests, tools, installed packages
SKIP = {"test", "tests", "idlelib", "site-packages", "dist-packages", "lib2to3", "turtledemo",
        "__pycache__", "ensurepip", "venv", "tkinter"}
#: every VAL_EVERY-th file is held out for validation
VAL_EVERY = 10


def source_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [f for f in root.rglob("*.py")
             if not SKIP.intersection(f.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda f: f.relative_to(root).as_posix())


def corpus(train_bytes: int, val_bytes: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(training bytes, validation bytes, a description) as uint8 arrays."""
    files = source_files()
    if not files:
        raise RuntimeError(f"no standard-library sources under {sysconfig.get_paths()['stdlib']}")
    train, val = bytearray(), bytearray()
    for i, f in enumerate(files):
        into, want = (val, val_bytes) if i % VAL_EVERY == VAL_EVERY - 1 else (train, train_bytes)
        if len(into) < want:
            into += f.read_bytes()
        if len(train) >= train_bytes and len(val) >= val_bytes:
            break
    if len(train) < train_bytes or len(val) < val_bytes:
        raise RuntimeError(f"the standard library has {len(train)} + {len(val)} bytes of "
                           f"sources, fewer than {train_bytes} + {val_bytes}")
    about = {"files": len(files), "root": "sysconfig stdlib", "train_bytes": train_bytes,
             "val_bytes": val_bytes}
    return (np.frombuffer(bytes(train[:train_bytes]), np.uint8),
            np.frombuffer(bytes(val[:val_bytes]), np.uint8), about)
