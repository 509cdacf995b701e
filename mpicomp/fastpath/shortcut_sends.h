/* calling MPI directly: the function table, arguments, requests, sends and reduce-scatters.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

/* The MPI functions the shortcut calls itself once bound, in one table: the name (the
 * module's FUNCTIONS; bind takes an address for each), where bind keeps the address, the
 * kind of method that may name it (PlainMethod's mpi=; -1: a helper no method names) and
 * the call such a method makes with it (NO_DIRECT: the receiving kinds and Allgatherv's
 * v-spec, whose calls their kind and v-spec choose). */
static const struct {
    const char *name;
    void **slot;
    int kind;
    int direct;
} FUNCTIONS[] = {
    {"MPI_Recv", (void **)&mpi.recv, RECEIVE, NO_DIRECT},
    {"MPI_Sendrecv", (void **)&mpi.sendrecv, SENDRECV, NO_DIRECT},
    {"MPI_Sendrecv_replace", (void **)&mpi.sendrecv_replace, REPLACE, NO_DIRECT},
    {"MPI_Get_count", (void **)&mpi.get_count, -1, NO_DIRECT},
    {"MPI_Comm_rank", (void **)&mpi.comm_rank, -1, NO_DIRECT},
    {"MPI_Comm_size", (void **)&mpi.comm_size, -1, NO_DIRECT},
    {"MPI_Allreduce", (void **)&mpi.allreduce, COLLECTIVE, DIRECT_ALLREDUCE},
    {"MPI_Bcast", (void **)&mpi.bcast, COLLECTIVE, DIRECT_BCAST},
    {"MPI_Reduce", (void **)&mpi.reduce, COLLECTIVE, DIRECT_REDUCE},
    {"MPI_Allgather", (void **)&mpi.allgather, COLLECTIVE, DIRECT_ALLGATHER},
    {"MPI_Alltoall", (void **)&mpi.alltoall, COLLECTIVE, DIRECT_ALLTOALL},
    {"MPI_Gather", (void **)&mpi.gather, COLLECTIVE, DIRECT_GATHER},
    {"MPI_Scatter", (void **)&mpi.scatter, COLLECTIVE, DIRECT_SCATTER},
    {"MPI_Send", (void **)&mpi.send, SEND, DIRECT_SEND},
    {"MPI_Isend", (void **)&mpi.isend, SEND, DIRECT_ISEND},
    {"MPI_Irecv", (void **)&mpi.irecv, SEND, DIRECT_IRECV},
    {"MPI_Iallreduce", (void **)&mpi.iallreduce, COLLECTIVE, DIRECT_IALLREDUCE},
    {"MPI_Ibcast", (void **)&mpi.ibcast, COLLECTIVE, DIRECT_IBCAST},
    {"MPI_Iallgather", (void **)&mpi.iallgather, COLLECTIVE, DIRECT_IALLGATHER},
    {"MPI_Ialltoall", (void **)&mpi.ialltoall, COLLECTIVE, DIRECT_IALLTOALL},
    {"MPI_Allgatherv", (void **)&mpi.allgatherv, COLLECTIVE, NO_DIRECT},
    {"MPI_Reduce_scatter_block", (void **)&mpi.reduce_scatter_block, COLLECTIVE,
     DIRECT_REDUCE_SCATTER_BLOCK},
    {"MPI_Reduce_scatter", (void **)&mpi.reduce_scatter, COLLECTIVE, DIRECT_REDUCE_SCATTER},
};
enum { NFUNCTIONS = sizeof FUNCTIONS / sizeof FUNCTIONS[0] };


/* a call's argument at position `pos` or by keyword `name`: 1 with *out set (NULL when
 * absent), 0 when given both ways (mpi4py raises that) */
static int
argument(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t pos,
         const char *name, PyObject **out)
{
    *out = pos < nargs ? args[pos] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), name) == 0) {
            if (*out != NULL)
                return 0;
            *out = args[nargs + i];
        }
    }
    return 1;
}

/* a reduction op: a predefined one (NULL: SUM, mpi4py's default): 1 with *out set, 0 when
 * not (a user-defined op, or not an MPI.Op) */
static int
op_arg(PyObject *obj, int *out)
{
    if (obj == NULL) {
        *out = mpi.ops[0];
        return 1;
    }
    if (!PyObject_TypeCheck(obj, mpi.op_type))
        return 0;
    int *handle = mpi.op(obj);
    if (handle == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (int i = 0; i < PREDEFINED_OPS; i++) {
        if (mpi.ops[i] != 0 && mpi.ops[i] == *handle) {
            *out = *handle;
            return 1;
        }
    }
    return 0;
}

/* the blocking collective of each nonblocking one (from DIRECT_IALLREDUCE on): the same
 * arguments */
static const int BLOCKING_OF[] = {DIRECT_ALLREDUCE, DIRECT_BCAST, DIRECT_ALLGATHER,
                                  DIRECT_ALLTOALL};

/* mpi4py's Request as its public header lays it out (mpi4py/MPI.h: an "api class" of
 * mpi4py 4), MPI_Request a C int (MPICH); bind_requests checks the running mpi4py's
 * type against it before anything uses it */
typedef struct {
    PyObject_HEAD
    int ob_mpi;
    unsigned int flags;
    PyObject *weakrefs;
    PyObject *ob_buf;  /* what the request keeps alive until it completes */
} RequestObject;

/* a new Request (MPI_REQUEST_NULL) for a nonblocking call to fill in, NULL on an error */
static PyObject *
new_request(void)
{
    return mpi.request_new(mpi.request_null);
}

/* the request's buffers kept alive (a new reference taken), as mpi4py's own calls keep
 * their messages' buffers until the request completes */
static void
keep(PyObject *req, PyObject *buffers)
{
    Py_SETREF(((RequestObject *)req)->ob_buf, buffers);
}

/* Send(buf, dest, tag=0), Isend(buf, dest, tag=0), Irecv(buf, source, tag) on a
 * C-contiguous array of a one-letter format (Irecv: writable; its source and tag given,
 * mpi4py's ANY defaults go through mpi4py): MPI's call, the buffer kept by the request.
 * Returns as direct_collective. */
static int
direct_p2p(Method *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
           PyObject **result)
{
    int which = self->direct;
    int receives = which == DIRECT_IRECV;
    if (which != DIRECT_SEND && mpi.request_new == NULL)
        return 0;
    PyObject *peer_obj = NULL, *tag_obj = NULL;
    int peer = 0, tag = 0, type = 0, count = 0;
    if (nargs > self->at.most
            || !argument(args, nargs, kwnames, self->at.peer, receives ? "source" : "dest",
                         &peer_obj)
            || !argument(args, nargs, kwnames, self->at.tag, "tag", &tag_obj)
            || peer_obj == NULL || !int_arg(peer_obj, &peer)
            || (tag_obj == NULL ? receives : !int_arg(tag_obj, &tag)))
        return 0;
    Py_buffer view = {0};
    if (!typed_view(args[1], receives, &view, &type, &count))
        return 0;
    int *comm = mpi.comm(args[0]);
    PyObject *req = comm == NULL || which == DIRECT_SEND ? NULL : new_request();
    if (comm == NULL || (which != DIRECT_SEND && req == NULL)) {
        PyBuffer_Release(&view);
        return -1;
    }
    int *handle = req == NULL ? NULL : &((RequestObject *)req)->ob_mpi;
    int ierr;
    Py_BEGIN_ALLOW_THREADS
    if (which == DIRECT_SEND)
        ierr = mpi.send(view.buf, count, type, peer, tag, *comm);
    else if (which == DIRECT_ISEND)
        ierr = mpi.isend(view.buf, count, type, peer, tag, *comm, handle);
    else
        ierr = mpi.irecv(view.buf, count, type, peer, tag, *comm, handle);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (ierr != 0) {
        Py_XDECREF(req);
        raise_mpi(ierr);
        return -1;
    }
    if (req != NULL)
        keep(req, Py_NewRef(args[1]));
    direct_calls++;
    *result = req != NULL ? req : Py_NewRef(Py_None);
    return 1;
}

/* an exact int from a list or tuple item: 1 with *out set, 0 when not an int in C int's range */
static int
item_int(PyObject *seq, Py_ssize_t i, int *out)
{
    return int_arg(PySequence_Fast_GET_ITEM(seq, i), out);
}

/* Reduce_scatter_block(sendbuf, recvbuf, op) and Reduce_scatter(sendbuf, recvbuf,
 * recvcounts=None, op) on contiguous arrays of one one-letter format with a predefined
 * op: MPI_Reduce_scatter_block where the send buffer holds size receive buffers;
 * MPI_Reduce_scatter where recvcounts (a list or tuple of ints, one per rank) gives this
 * rank the receive buffer's count and sums to the send buffer's. Without recvcounts
 * every rank's receive count is gathered first, as mpi4py does; from there the call is
 * MPI's, or raises mpi4py's ValueError where the counts do not sum to the send buffer's,
 * and never goes back to mpi4py, whose call would gather them again. Returns as
 * direct_collective. */
static int
direct_reduce_scatter(Method *self, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, PyObject **result)
{
    int block = self->direct == DIRECT_REDUCE_SCATTER_BLOCK;
    PyObject *op_obj = NULL, *counts_obj = NULL;
    int op = 0, size = 0, rank = 0;
    if (nargs > self->at.most || nargs < 3
            || !argument(args, nargs, kwnames, self->at.op, "op", &op_obj)
            || (!block && !argument(args, nargs, kwnames, self->at.counts, "recvcounts",
                                    &counts_obj))
            || !op_arg(op_obj, &op))
        return 0;
    if (counts_obj == Py_None)
        counts_obj = NULL;
    if (counts_obj != NULL && !PyList_CheckExact(counts_obj) && !PyTuple_CheckExact(counts_obj))
        return 0;
    int *comm = mpi.comm(args[0]);
    if (comm == NULL)
        return -1;
    if (mpi.comm_size(*comm, &size) != 0 || mpi.comm_rank(*comm, &rank) != 0 || size <= 0
            || size > 4096
            || (counts_obj != NULL && PySequence_Fast_GET_SIZE(counts_obj) != size))
        return 0;
    int gathered = !block && counts_obj == NULL;
    if (gathered && mpi.types['i'] == 0)
        return 0;
    Py_buffer send = {0}, recv = {0};
    int type = 0, count = 0, rtype = 0, rcount = 0;
    if (!typed_view(args[1], 0, &send, &type, &count))
        return 0;
    if (!typed_view(args[2], 1, &recv, &rtype, &rcount)) {
        PyBuffer_Release(&send);
        return 0;
    }
    int stack[64];
    int *cs = block || size <= 64 ? stack : PyMem_Malloc((size_t)size * sizeof(int));
    int rc = 0, ierr = 0, fits = rtype == type;
    long long total = 0;
    if (cs == NULL) {
        PyErr_NoMemory();
        rc = -1;
        fits = 0;
    }
    if (fits && block) {
        fits = count == size * (long long)rcount;
    } else if (fits && !gathered) {
        for (int i = 0; i < size && fits; i++) {
            fits = item_int(counts_obj, i, &cs[i]) && cs[i] >= 0;
            total += fits ? cs[i] : 0;
        }
        fits = fits && cs[rank] == rcount && total == count;
    } else if (fits) {
        int mine = rcount;
        Py_BEGIN_ALLOW_THREADS
        ierr = mpi.allgather(&mine, 1, mpi.types['i'], cs, 1, mpi.types['i'], *comm);
        Py_END_ALLOW_THREADS
        for (int i = 0; i < size && ierr == 0; i++)
            total += cs[i];
        if (ierr == 0 && total != count) {  /* mpi4py's check, on this rank as mpi4py's */
            PyErr_Format(PyExc_ValueError, "mismatch in send count %d and sum(counts) %lld",
                         count, total);
            rc = -1;
            fits = 0;
        }
    }
    if (fits && ierr == 0) {
        Py_BEGIN_ALLOW_THREADS
        ierr = block ? mpi.reduce_scatter_block(send.buf, recv.buf, rcount, type, op, *comm)
                     : mpi.reduce_scatter(send.buf, recv.buf, cs, type, op, *comm);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&send);
    PyBuffer_Release(&recv);
    if (cs != stack && cs != NULL)
        PyMem_Free(cs);
    if (ierr != 0) {
        raise_mpi(ierr);
        return -1;
    }
    if (rc < 0 || !fits)
        return rc;
    direct_calls++;
    *result = Py_NewRef(Py_None);
    return 1;
}
