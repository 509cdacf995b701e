"""mpicomp: compression-assisted MPI collectives for mpi4py.

``mpicomp.COMM_WORLD`` is a drop-in for ``MPI.COMM_WORLD`` whose buffer
methods compress; ``mpicomp.Comm(comm, codec=..., rate=...)`` wraps any
intracommunicator. The codecs live in :mod:`mpicomp.codecs`.
"""
from . import codecs, failfast
from .codecs import get_codec
from .comm import Comm, world
from .errors import MpicompError, RankDisagreement, UncompressibleError, UnknownCodecError
from .policy import DEFAULT, Policy
from .requests import Request

__version__ = "0.1.0"

#: ``MPI.COMM_WORLD``, compressing by the environment's (or the default) policy
COMM_WORLD = world()

failfast.install()  # an uncaught exception on one rank aborts the job (opt out: MPICOMP_ABORT_ON_ERROR=0)

__all__ = [
    "COMM_WORLD",
    "DEFAULT",
    "Comm",
    "MpicompError",
    "Policy",
    "RankDisagreement",
    "Request",
    "UncompressibleError",
    "UnknownCodecError",
    "codecs",
    "get_codec",
]
