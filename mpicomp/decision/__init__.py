"""The decision of every call: compressed or plain MPI, and why, the same on every rank.

Three steps, in the order a call meets them, each returning None (go on
compressed) or the plain-MPI reason that ``comm.stats()`` and
``MPICOMP_DEBUG`` report:

1. the screen (:mod:`~mpicomp.decision.screen`), before anything is sent:
   the reasons every rank sees alike, and under ``auto`` the performance
   model's verdict (:mod:`~mpicomp.decision.predictor`);
2. the agreement step (:mod:`~mpicomp.decision.agreement`): one MAX
   allreduce finds NaN/Inf or values that could overflow on any rank, and
   settings that differ between ranks;
3. the verdict after a speculative call whose encoders screened the data
   themselves (:mod:`~mpicomp.decision.agreement` too).

The communicator-level settings, and their check across ranks, are
:mod:`mpicomp.settings`'.
"""
