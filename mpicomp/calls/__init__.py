"""One module per compressed method of :class:`mpicomp.Comm` (as mpi4jax keeps one
collective per file): each parses mpi4py's arguments, checks them, and describes
the call as a :class:`mpicomp.pipeline.Call` (what the agreement scans, what
every rank must pass alike, the compressed algorithm to run), which
:class:`mpicomp.pipeline.Pipeline` runs.

* :mod:`.allreduce` (Allreduce, Iallreduce), :mod:`.reduce`, :mod:`.reduce_scatter`
  (Reduce_scatter_block, Reduce_scatter);
* :mod:`.allgather_sum` (Allgather, Iallgather), :mod:`.allgatherv`, :mod:`.alltoall`
  (Alltoall, Ialltoall), :mod:`.bcast` (Bcast, Ibcast), :mod:`.gather`, :mod:`.scatter`;
* :mod:`.point_to_point` (Send, Isend, Recv, Irecv, Sendrecv: self-describing frames).
"""
