/* calling MPI directly: the bound functions, buffers as MPI takes them, the receiving kinds.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

/* -- Direct MPI: calls without mpi4py's argument parsing -------------------------
 *
 * A receive must learn the message's length (to tell a frame from plain data), so
 * through mpi4py it costs a buffer spec, a Status and a Get_count call: about 0.25 us
 * over mpi4py's own Recv; and the descriptor's own test and count cost a tiny
 * collective about 0.1 us over mpi4py's. With `bind` (mpicomp/fastpath/install.py gives it the
 * addresses of MPI's functions in the libmpi that mpi4py loaded, and mpi4py's C API for
 * the handles), a receive on contiguous NumPy arrays (positional), and an Allreduce,
 * Bcast, Reduce, Allgather, Alltoall, Gather, Scatter, Reduce_scatter_block or
 * Reduce_scatter on contiguous NumPy arrays of one dtype (with a predefined op), call MPI
 * themselves, with the GIL released as mpi4py
 * does; so do Send, and, once bind_requests has checked mpi4py's Request layout, Isend,
 * Irecv, Iallreduce, Ibcast, Iallgather and Ialltoall, whose MPI.Request (made by mpi4py's
 * PyMPIRequest_New) keeps their buffers until it completes, as mpi4py's own do. Only
 * for an MPI whose handles are C ints (MPICH's ABI; the Python side checks); an error
 * code raises MPI.Exception, and a call that does not fit goes to mpi4py's method. */

typedef int (*mpi_recv_t)(void *, int, int, int, int, int, void *);
typedef int (*mpi_sendrecv_t)(const void *, int, int, int, int, void *, int, int, int, int,
                              int, void *);
typedef int (*mpi_sendrecv_replace_t)(void *, int, int, int, int, int, int, int, void *);
typedef int (*mpi_get_count_t)(const void *, int, int *);
typedef int (*mpi_allreduce_t)(const void *, void *, int, int, int, int);
typedef int (*mpi_bcast_t)(void *, int, int, int, int);
typedef int (*mpi_reduce_t)(const void *, void *, int, int, int, int, int);
typedef int (*mpi_comm_rank_t)(int, int *);
typedef int (*mpi_gather_t)(const void *, int, int, void *, int, int, int, int);
typedef int (*mpi_allgather_t)(const void *, int, int, void *, int, int, int);
typedef int (*mpi_send_t)(const void *, int, int, int, int, int);
typedef int (*mpi_isend_t)(const void *, int, int, int, int, int, int *);
typedef int (*mpi_iallreduce_t)(const void *, void *, int, int, int, int, int *);
typedef int (*mpi_ibcast_t)(void *, int, int, int, int, int *);
typedef int (*mpi_iallgather_t)(const void *, int, int, void *, int, int, int, int *);
typedef int (*mpi_allgatherv_t)(const void *, int, int, void *, const int *, const int *, int,
                                int);
typedef int (*mpi_reduce_scatter_block_t)(const void *, void *, int, int, int, int);
typedef int (*mpi_reduce_scatter_t)(const void *, void *, const int *, int, int, int);
typedef PyObject *(*request_new_t)(int);
typedef int *(*comm_handle_t)(PyObject *);
typedef void *(*status_handle_t)(PyObject *);
typedef int *(*op_handle_t)(PyObject *);

#define PREDEFINED_OPS 16

static unsigned long long direct_calls;  /* calls that called MPI themselves (for the tests) */

static struct {
    mpi_recv_t recv;
    mpi_sendrecv_t sendrecv;
    mpi_sendrecv_replace_t sendrecv_replace;
    mpi_get_count_t get_count;
    mpi_allreduce_t allreduce;
    mpi_bcast_t bcast;
    mpi_reduce_t reduce;
    mpi_comm_rank_t comm_rank;
    mpi_comm_rank_t comm_size;  /* (the same signature) */
    mpi_allgather_t allgather;
    mpi_allgather_t alltoall;   /* (the same signature) */
    mpi_gather_t gather;
    mpi_gather_t scatter;       /* (the same signature) */
    mpi_send_t send;
    mpi_isend_t isend;
    mpi_isend_t irecv;          /* (the same signature, the buffer written) */
    mpi_iallreduce_t iallreduce;
    mpi_ibcast_t ibcast;
    mpi_iallgather_t iallgather;
    mpi_iallgather_t ialltoall; /* (the same signature) */
    mpi_allgatherv_t allgatherv;
    mpi_reduce_scatter_block_t reduce_scatter_block;
    mpi_reduce_scatter_t reduce_scatter;
    request_new_t request_new;  /* mpi4py's PyMPIRequest_New, once bind_requests checked
                                   mpi4py's Request layout (NULL: nonblocking calls go
                                   through mpi4py) */
    int request_null;           /* MPI_REQUEST_NULL's handle */
    comm_handle_t comm;       /* mpi4py's PyMPIComm_Get */
    status_handle_t status;   /* mpi4py's PyMPIStatus_Get */
    op_handle_t op;           /* mpi4py's PyMPIOp_Get */
    int byte;                 /* MPI_BYTE's handle */
    int types[256];           /* a one-letter buffer format -> its datatype's handle (0: none) */
    int ops[PREDEFINED_OPS];  /* the predefined reduction ops' handles (0: unused) */
    PyTypeObject *op_type;    /* MPI.Op */
    PyObject *exception;      /* MPI.Exception */
    void *in_place;           /* MPI_IN_PLACE as the library defines it (NULL: not given;
                                 in-place calls then go through mpi4py) */
} mpi;

/* a call's int argument (a source, tag or destination): 1 with *out set, 0 when it is not
 * an exact int in C int's range */
static int
int_arg(PyObject *obj, int *out)
{
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow = 0;
    long v = PyLong_AsLongAndOverflow(obj, &overflow);
    if (overflow || v < INT_MIN || v > INT_MAX)
        return 0;
    *out = (int)v;
    return 1;
}

/* MPI's error code as mpi4py raises it: MPI.Exception(ierr) */
static void
raise_mpi(int ierr)
{
    PyObject *exc = PyObject_CallFunction(mpi.exception, "i", ierr);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
}

/* a C-contiguous buffer of a one-letter (or complex) format that has a datatype (writable
 * if asked):
 * 1 with *view, *type and *count set (the caller releases the view), 0 when not */
static int
typed_view(PyObject *obj, int writable, Py_buffer *view, int *type, int *count)
{
    int flags = PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view->format;
    /* a complex format is two letters (NumPy's "Zf", "Zd", "Zg"): mpi4py's type character
     * of it is the capital (F, D, G) */
    unsigned char letter = f == NULL ? 0
                           : f[0] == 'Z' && f[1] != 0 && f[2] == 0 ? (unsigned char)(f[1] - 32)
                           : f[0] != 0 && f[1] == 0 ? (unsigned char)f[0] : 0;
    if (letter == 0 || (*type = mpi.types[letter]) == 0
            || view->itemsize <= 0 || view->len / view->itemsize > INT_MAX) {
        PyBuffer_Release(view);
        return 0;
    }
    *count = (int)(view->len / view->itemsize);
    return 1;
}

/* A receive buffer as the bytes it spans: a bare array's, or those a spec over one
 * addresses (its datatype plain bytes) */
typedef struct {
    PyObject *array;   /* the array (borrowed) */
    long long offset;  /* where the bytes start in it */
    long long nbytes;  /* how many */
    int bare;          /* whether the call passed the array itself */
} Span;

/* a send buffer for MPI's own call: a bare array of a one-letter format by its datatype,
 * a spec over one (its datatype plain bytes) as the bytes it addresses. 1 with *view (the
 * caller releases it), *at, *type and *count set; 0 when not */
static int
send_view(PyObject *obj, PyTypeObject *array, Py_buffer *view, char **at, int *type,
          int *count)
{
    if (Py_TYPE(obj) == array) {
        if (!typed_view(obj, 0, view, type, count))
            return 0;
        *at = view->buf;
        return 1;
    }
    Spec s;
    long long offset = 0, nbytes = 0;
    if (!read_spec(obj, array, &s) || !spec_span(&s, 1, &offset, &nbytes) || nbytes > INT_MAX)
        return 0;
    if (PyObject_GetBuffer(s.array, view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (offset + nbytes > view->len) {
        PyBuffer_Release(view);
        return 0;
    }
    *at = (char *)view->buf + offset;
    *type = mpi.byte;
    *count = (int)nbytes;
    return 1;
}

/* MPI's call for a receiving kind, if the call fits: `into` the receive buffer's bytes (a
 * C-contiguous writable array), then source and tag, all positional (Sendrecv: its send
 * buffer as send_view takes it, its dest and sendtag before), ints. Returns 1 with
 * *received (the message's bytes) set, 0 when the call does not fit (mpi4py takes it),
 * -1 on an error. */
static int
direct(Method *self, const Span *into, Py_ssize_t first, PyObject *const *args,
       Py_ssize_t nargs, PyObject *status, long long *received)
{
    if (mpi.recv == NULL || into->nbytes > INT_MAX)
        return 0;
    if (self->kind == REPLACE && mpi.sendrecv_replace == NULL)
        return 0;
    int from[2];  /* source, tag */
    for (int i = 0; i < 2; i++) {
        Py_ssize_t at = first + 1 + self->at.gap + i;
        if (!int_arg(at < nargs ? args[at]
                     : PyTuple_GET_ITEM(self->defaults, self->at.gap + i), &from[i]))
            return 0;
    }
    int dest = 0, sendtag = 0, sendtype = 0, sendcount = 0;
    char *sendat = NULL;
    Py_buffer sent = {0}, view = {0};
    if (self->kind == SENDRECV) {
        if (!int_arg(args[self->at.peer], &dest) || !int_arg(args[self->at.tag], &sendtag))
            return 0;
        if (!send_view(args[1], self->array, &sent, &sendat, &sendtype, &sendcount))
            return 0;
    }
    /* REPLACE: a bare array of another type than float32/64 keeps its datatype */
    int type = mpi.byte, typed = 0;
    if (self->kind == REPLACE) {
        if (!int_arg(args[self->at.peer], &dest)
                || !int_arg(self->at.tag < nargs ? args[self->at.tag]
                            : PyTuple_GET_ITEM(self->defaults, self->at.tag - first - 1),
                            &sendtag))
            return 0;
        if (into->bare) {
            if (!typed_view(into->array, 1, &view, &type, &typed))
                return 0;
            PyBuffer_Release(&view);
            if (type == mpi.types['f'] || type == mpi.types['d']) {
                type = mpi.byte;
                typed = 0;
            }
        }
    }
    if (PyObject_GetBuffer(into->array, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        if (self->kind == SENDRECV)
            PyBuffer_Release(&sent);
        return 0;
    }
    int rc = 0;
    if (into->offset + into->nbytes <= view.len) {
        char *at = (char *)view.buf + into->offset;
        int n = (int)into->nbytes;
        int *comm = mpi.comm(args[0]);
        void *st = comm == NULL ? NULL : mpi.status(status);
        int ierr = 0, got = 0;
        if (st == NULL) {
            rc = -1;
        } else {
            Py_BEGIN_ALLOW_THREADS
            ierr = self->kind == SENDRECV
                   ? mpi.sendrecv(sendat, sendcount, sendtype, dest, sendtag, at, n, mpi.byte,
                                  from[0], from[1], *comm, st)
                   : self->kind == REPLACE
                   ? mpi.sendrecv_replace(at, typed ? typed : n, type, dest, sendtag, from[0],
                                          from[1], *comm, st)
                   : mpi.recv(at, n, mpi.byte, from[0], from[1], *comm, st);
            if (ierr == 0)
                ierr = mpi.get_count(st, mpi.byte, &got);
            Py_END_ALLOW_THREADS
            if (ierr != 0) {
                raise_mpi(ierr);
                rc = -1;
            } else {
                *received = got;
                direct_calls++;
                rc = 1;
            }
        }
    }
    PyBuffer_Release(&view);
    if (self->kind == SENDRECV)
        PyBuffer_Release(&sent);
    return rc;
}

/* mpi4py's method for a receiving kind's call: the receive buffer args[first] as the
 * bytes `into` spans, the status (ours, or the call's at `at`, -1: none given) in its
 * place; *received as direct's. 0 on success, -1 on an error. */
static int
through_mpi4py(Method *self, const Span *into, Py_ssize_t first, PyObject *const *args,
               Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t at, PyObject *status,
               long long *received)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t status_pos = first + self->at.gap + 3;
    PyObject *spec;
    if (into->bare) {
        spec = PyTuple_Pack(2, into->array, self->byte);
    } else {  /* [array, (count, displacement), MPI.BYTE] */
        PyObject *where = Py_BuildValue("(LL)", into->nbytes, into->offset);
        spec = where == NULL ? NULL : PyTuple_Pack(3, into->array, where, self->byte);
        Py_XDECREF(where);
    }
    if (spec == NULL)
        return -1;
    /* the arguments again: the buffer as bytes, the status in its place (or a keyword) */
    PyObject *stack[16];
    Py_ssize_t total = nargs + nkw, positional = nargs;
    PyObject *names = NULL;
    for (Py_ssize_t i = 0; i < total; i++)
        stack[i] = args[i];
    stack[first] = spec;
    if (at >= 0) {
        stack[at] = status;
        names = Py_XNewRef(kwnames);
    } else if (kwnames == NULL) {  /* all positional: the defaults, then the status */
        for (Py_ssize_t i = nargs; i < status_pos; i++)
            stack[i] = PyTuple_GET_ITEM(self->defaults, i - first - 1);
        stack[status_pos] = status;
        positional = status_pos + 1;
    } else {
        stack[total] = status;
        names = PyTuple_New(nkw + 1);
        if (names == NULL) {
            Py_DECREF(spec);
            return -1;
        }
        for (Py_ssize_t i = 0; i < nkw; i++)
            PyTuple_SET_ITEM(names, i, Py_NewRef(PyTuple_GET_ITEM(kwnames, i)));
        PyTuple_SET_ITEM(names, nkw, Py_NewRef(status_name));
    }
    PyObject *done = PyObject_Vectorcall(self->plain, stack, (size_t)positional, names);
    Py_XDECREF(names);
    Py_DECREF(spec);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    PyObject *got = PyObject_CallMethodNoArgs(status, get_count_name);
    if (got == NULL)
        return -1;
    *received = PyLong_AsLongLong(got);
    Py_DECREF(got);
    return *received == -1 && PyErr_Occurred() ? -1 : 0;
}

/* whether a receiving kind's call has the shape `receive` takes: the receive buffer
 * args[first] an array or a spec over one whose bytes it spans (*into set), then at most
 * source, tag and status (positional or keywords) */
static int
receive_shape(Method *self, Py_ssize_t first, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames, Span *into)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t status_pos = first + self->at.gap + 3;
    Spec s;
    if (!(nargs > first + (self->kind == REPLACE) && nargs <= status_pos + 1
          && nargs + nkw <= status_pos + 3)
            || !read_spec(args[first], self->array, &s)
            || !spec_span(&s, 1, &into->offset, &into->nbytes))
        return 0;
    into->array = s.array;
    into->bare = s.array == args[first];
    return 1;
}

/* The receiving kinds: the receive buffer args[first] (Recv: 1, Sendrecv: 4; its bytes
 * `into`, from receive_shape) received as bytes, its source and tag after it (`defaults`
 * where a positional call leaves them out), then the status (made when the call passes
 * none); frame(comm, buf, status) for an odd byte count, else the receive counted (at
 * `recv_index`). Returns 1 with *result set (-1 on an error). */
static int
receive(Method *self, State *state, const Span *into, Py_ssize_t first, PyObject *const *args,
        Py_ssize_t nargs, PyObject *kwnames, PyObject **result)
{
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    Py_ssize_t status_pos = first + self->at.gap + 3;
    /* where the status is: positional, a keyword, or nowhere */
    Py_ssize_t at = nargs > status_pos ? status_pos : -1;
    for (Py_ssize_t i = 0; i < nkw && at < 0; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (name == status_name || PyUnicode_Compare(name, status_name) == 0)
            at = nargs + i;
    }
    PyObject *given = at >= 0 ? args[at] : NULL;
    PyObject *status;
    int own = given == NULL || given == Py_None;  /* a status of ours, kept for the next call */
    if (!own) {
        status = Py_NewRef(given);
    } else if (state->spare != NULL) {  /* taken: a call on another thread makes its own */
        status = state->spare;
        state->spare = NULL;
    } else if ((status = PyObject_CallNoArgs(self->status_type)) == NULL) {
        return -1;
    }
    long long received = 0;
    int rc = kwnames == NULL ? direct(self, into, first, args, nargs, status, &received) : 0;
    if (rc < 0)
        goto fail;
    if (rc == 0 && through_mpi4py(self, into, first, args, nargs, kwnames, at, status,
                                  &received) < 0)
        goto fail;
    if (received % 2 == 1 && received >= self->min_frame) {
        /* a frame: decoded (and counted) by the Python side */
        *result = PyObject_CallFunctionObjArgs(self->frame, args[0], args[first], status, NULL);
    } else {
        if (count(&state->counts[self->recv_index], (Py_ssize_t)into->nbytes, NULL) < 0)
            goto fail;
        *result = Py_NewRef(Py_None);
    }
    if (own && state->spare == NULL)
        state->spare = status;
    else
        Py_DECREF(status);
    return *result == NULL ? -1 : 1;
fail:
    Py_DECREF(status);
    return -1;
}

enum { NO_DIRECT = 0, DIRECT_ALLREDUCE = 1, DIRECT_BCAST = 2, DIRECT_REDUCE = 3,
       DIRECT_ALLGATHER = 4, DIRECT_ALLTOALL = 5, DIRECT_GATHER = 6, DIRECT_SCATTER = 7,
       DIRECT_SEND = 8, DIRECT_ISEND = 9, DIRECT_IRECV = 10, DIRECT_IALLREDUCE = 11,
       DIRECT_IBCAST = 12, DIRECT_IALLGATHER = 13, DIRECT_IALLTOALL = 14,
       DIRECT_REDUCE_SCATTER_BLOCK = 15, DIRECT_REDUCE_SCATTER = 16 };
