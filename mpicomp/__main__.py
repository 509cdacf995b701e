"""``python -m mpicomp``: see :mod:`mpicomp.runner` (and ``python -m mpicomp warmup``)."""
from .runner import main

main()
