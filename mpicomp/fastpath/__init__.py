"""The plain fast path: small calls of the default policy at about mpi4py's own cost.

One home for everything that sends a call to plain MPI without looking at it:

* :mod:`~mpicomp.fastpath.methods`: the table of the methods it serves
  (kind, sizing argument, MPI function), the limits' form and their rule;
* :mod:`~mpicomp.fastpath.limits`: a communicator's limits, as it learns them;
* :mod:`~mpicomp.fastpath.install`: the compiled methods put on the class, a
  communicator's compiled state, and the binding to the MPI library;
* ``_shortcut.c``: the compiled methods, which size each call and take it
  (the one size rule) or hand it to the Python method.

Without the extension (no C compiler at install time) every call runs its
Python method, which screens it and sends it plain for the same reasons.
"""
