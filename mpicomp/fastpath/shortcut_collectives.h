/* calling MPI directly: the blocking and nonblocking collectives, Allgatherv.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

/* MPI's collective for a call that fits: contiguous arrays of the same one-letter format
 * whose counts match as MPI needs (the receive buffer writable; a buffer only significant
 * at the root taken only there; Bcast's buffer writable on every rank), a predefined op,
 * an int root. Returns 1 with *result set, 0 when the call does not fit (mpi4py takes
 * it), -1 on an error. */
static int
direct_collective(Method *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  PyObject **result)
{
    int which = self->direct;
    if (mpi.allreduce == NULL || which == NO_DIRECT)
        return 0;
    if (which >= DIRECT_SEND && which <= DIRECT_IRECV)
        return direct_p2p(self, args, nargs, kwnames, result);
    if (which >= DIRECT_REDUCE_SCATTER_BLOCK)
        return direct_reduce_scatter(self, args, nargs, kwnames, result);
    int nonblocking = which >= DIRECT_IALLREDUCE;
    if (nonblocking) {
        if (mpi.request_new == NULL)
            return 0;
        which = BLOCKING_OF[which - DIRECT_IALLREDUCE];
    }
    PyObject *op_obj = NULL, *root_obj = NULL;
    int op = 0, root = 0, rank = 0, size = 1;
    if (nargs > self->at.most
            || (self->at.op > 0 && !argument(args, nargs, kwnames, self->at.op, "op", &op_obj))
            || (self->at.root > 0
                && !argument(args, nargs, kwnames, self->at.root, "root", &root_obj))
            || (self->at.op > 0 && !op_arg(op_obj, &op))
            || (root_obj != NULL && !int_arg(root_obj, &root)))
        return 0;
    int *comm = mpi.comm(args[0]);
    if (comm == NULL)
        return -1;
    if ((self->at.root > 0 && which != DIRECT_BCAST && mpi.comm_rank(*comm, &rank) != 0)
            || (which >= DIRECT_ALLGATHER && mpi.comm_size(*comm, &size) != 0))
        return 0;  /* (mpi4py's call reports it) */
    /* which buffers count here: the send buffer (args[1]) and the receive buffer (args[2]);
     * an in-place Allreduce or Allgather (Iallreduce, Iallgather) sends from its receive
     * buffer (Allgather: this rank's part of it, which MPI finds by the rank) */
    int in_place_call = args[1] == in_place;
    if (in_place_call && ((which != DIRECT_ALLREDUCE && which != DIRECT_ALLGATHER)
                          || mpi.in_place == NULL))
        return 0;
    int at_root = rank == root;
    int sends = !in_place_call && (which != DIRECT_SCATTER || at_root);
    int receives = which == DIRECT_ALLREDUCE || which == DIRECT_ALLGATHER
                   || which == DIRECT_ALLTOALL || which == DIRECT_SCATTER
                   || ((which == DIRECT_REDUCE || which == DIRECT_GATHER) && at_root);
    Py_buffer send = {0}, recv = {0};
    int type = 0, count = 0, rtype = 0, rcount = 0, fits = 1;
    if (sends && !typed_view(args[1], which == DIRECT_BCAST, &send, &type, &count))
        return 0;
    if (receives && (nargs < 3 || !typed_view(args[2], 1, &recv, &rtype, &rcount))) {
        if (sends)
            PyBuffer_Release(&send);
        return 0;
    }
    /* the counts MPI is called with: each rank's part (Allgather, Gather, Scatter: the send
     * or receive buffer holds size parts at the root's end; Alltoall: size blocks each) */
    if (in_place_call) {
        type = rtype;
        count = which == DIRECT_ALLGATHER ? (rcount % size == 0 ? rcount / size : -1) : rcount;
        send.buf = mpi.in_place;
        fits = count >= 0;
    }
    int part = count;
    switch (which) {
    case DIRECT_ALLREDUCE:
        fits = rtype == type && rcount == count;
        break;
    case DIRECT_REDUCE:
    case DIRECT_GATHER:
        fits = !receives || (rtype == type && rcount == (which == DIRECT_REDUCE ? 1 : size)
                                                       * (long long)count);
        break;
    case DIRECT_ALLGATHER:
        fits = fits && rtype == type && rcount == size * (long long)count;
        break;
    case DIRECT_ALLTOALL:
        fits = rtype == type && rcount == count && count % size == 0;
        part = count / size;
        break;
    case DIRECT_SCATTER:
        part = rcount;
        fits = !sends || (rtype == type && count == size * (long long)rcount);
        break;
    }
    int ierr = 0;
    PyObject *req = NULL, *kept = NULL;  /* nonblocking: the request, the buffers it keeps */
    if (fits && nonblocking) {
        kept = which == DIRECT_BCAST ? Py_NewRef(args[1]) : PyTuple_Pack(2, args[1], args[2]);
        req = kept == NULL ? NULL : new_request();
        if (req == NULL) {
            Py_XDECREF(kept);
            PyBuffer_Release(&send);  /* (a no-op on a view never taken) */
            PyBuffer_Release(&recv);
            return -1;
        }
    }
    int *handle = req == NULL ? NULL : &((RequestObject *)req)->ob_mpi;
    if (fits && nonblocking) {
        Py_BEGIN_ALLOW_THREADS
        switch (which) {
        case DIRECT_ALLREDUCE:
            ierr = mpi.iallreduce(send.buf, recv.buf, count, type, op, *comm, handle);
            break;
        case DIRECT_BCAST:
            ierr = mpi.ibcast(send.buf, count, type, root, *comm, handle);
            break;
        case DIRECT_ALLGATHER:
            ierr = mpi.iallgather(send.buf, count, type, recv.buf, count, type, *comm, handle);
            break;
        case DIRECT_ALLTOALL:
            ierr = mpi.ialltoall(send.buf, part, type, recv.buf, part, type, *comm, handle);
            break;
        }
        Py_END_ALLOW_THREADS
    } else if (fits) {
        int stype = sends ? type : rtype;
        Py_BEGIN_ALLOW_THREADS
        switch (which) {
        case DIRECT_ALLREDUCE:
            ierr = mpi.allreduce(send.buf, recv.buf, count, type, op, *comm);
            break;
        case DIRECT_BCAST:
            ierr = mpi.bcast(send.buf, count, type, root, *comm);
            break;
        case DIRECT_REDUCE:
            ierr = mpi.reduce(send.buf, receives ? recv.buf : NULL, count, type, op, root,
                              *comm);
            break;
        case DIRECT_ALLGATHER:
            ierr = mpi.allgather(send.buf, count, type, recv.buf, count, type, *comm);
            break;
        case DIRECT_ALLTOALL:
            ierr = mpi.alltoall(send.buf, part, type, recv.buf, part, type, *comm);
            break;
        case DIRECT_GATHER:
            ierr = mpi.gather(send.buf, count, type, receives ? recv.buf : NULL, count, type,
                              root, *comm);
            break;
        case DIRECT_SCATTER:
            ierr = mpi.scatter(sends ? send.buf : NULL, part, stype, recv.buf, part, rtype, root,
                               *comm);
            break;
        }
        Py_END_ALLOW_THREADS
    }
    if (sends)
        PyBuffer_Release(&send);
    if (receives)
        PyBuffer_Release(&recv);
    if (!fits)
        return 0;
    if (ierr != 0) {
        Py_XDECREF(kept);
        Py_XDECREF(req);
        raise_mpi(ierr);
        return -1;
    }
    if (req != NULL)
        keep(req, kept);
    direct_calls++;
    *result = req != NULL ? req : Py_NewRef(Py_None);
    return 1;
}

/* MPI_Allgatherv for a call that fits (once bound): Allgatherv(sendbuf, [recvbuf, counts])
 * or [recvbuf, (counts, displs)] with one entry per rank, contiguous arrays of one
 * one-letter format, every part inside the receive buffer (displacements from the
 * counts when not given, as mpi4py makes them). Returns as direct_collective. */
static int
direct_allgatherv(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  PyObject **result)
{
    /* (read by largest_count already: [array, counts-or-pair] is the form of length 2) */
    PyObject *spec = args[2];
    if (mpi.allgatherv == NULL || nargs != 3 || kwnames != NULL
            || PySequence_Fast_GET_SIZE(spec) != 2)
        return 0;
    PyObject *recvbuf = PySequence_Fast_GET_ITEM(spec, 0);
    PyObject *counts = PySequence_Fast_GET_ITEM(spec, 1), *displs = NULL;
    if (PyTuple_CheckExact(counts)) {  /* (counts, displs) */
        displs = PyTuple_GET_ITEM(counts, 1);
        counts = PyTuple_GET_ITEM(counts, 0);
        if (!(PyList_CheckExact(displs) || PyTuple_CheckExact(displs)))
            return 0;
    }
    int *comm = mpi.comm(args[0]);
    int size = 0;
    if (comm == NULL)
        return -1;
    if (mpi.comm_size(*comm, &size) != 0 || size <= 0 || size > 4096
            || PySequence_Fast_GET_SIZE(counts) != size
            || (displs != NULL && PySequence_Fast_GET_SIZE(displs) != size))
        return 0;
    int stack[2 * 64];
    int *cs = size <= 64 ? stack : PyMem_Malloc(2 * (size_t)size * sizeof(int));
    if (cs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int *ds = cs + size;
    Py_buffer send = {0}, recv = {0};
    int type = 0, count = 0, rtype = 0, rcount = 0, rc = 0, ierr = 0;
    long long at = 0;
    int fits = 1;
    for (int i = 0; i < size && fits; i++) {
        fits = item_int(counts, i, &cs[i]) && cs[i] >= 0;
        if (!fits)
            break;
        if (displs != NULL)
            fits = item_int(displs, i, &ds[i]) && ds[i] >= 0;
        else
            ds[i] = (int)at;  /* (at <= INT_MAX here) */
        at += cs[i];
        fits = fits && at <= INT_MAX;
    }
    if (fits && typed_view(args[1], 0, &send, &type, &count)) {
        if (typed_view(recvbuf, 1, &recv, &rtype, &rcount)) {
            for (int i = 0; i < size && fits; i++)
                fits = (long long)ds[i] + cs[i] <= rcount;
            if (fits && rtype == type) {
                Py_BEGIN_ALLOW_THREADS
                ierr = mpi.allgatherv(send.buf, count, type, recv.buf, cs, ds, type, *comm);
                Py_END_ALLOW_THREADS
                rc = 1;
            }
            PyBuffer_Release(&recv);
        }
        PyBuffer_Release(&send);
    }
    if (cs != stack)
        PyMem_Free(cs);
    if (rc == 1 && ierr != 0) {
        raise_mpi(ierr);
        return -1;
    }
    if (rc == 1) {
        direct_calls++;
        *result = Py_NewRef(Py_None);
    }
    return rc;
}
