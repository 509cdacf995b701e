"""mpicomp: compression-assisted MPI collectives for mpi4py.

The codecs live in :mod:`mpicomp.codecs`; the drop-in communicator comes next.
"""
from . import codecs
from .codecs import get_codec
from .errors import MpicompError, UncompressibleError, UnknownCodecError

__version__ = "0.1.0"

__all__ = ["MpicompError", "UncompressibleError", "UnknownCodecError", "codecs", "get_codec"]
