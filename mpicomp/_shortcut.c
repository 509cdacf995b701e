/* The plain-MPI shortcut: small calls of the default policy at about mpi4py's own cost.
 *
 * A drop-in communicator must not make tiny calls slower: a 4-byte Allreduce
 * between two ranks of one node takes about 3 us, and the Python method of a
 * subclass (its call, a type test, a size test, a stats count) cost 0.6 to
 * 0.8 us of that. So the methods that can go plain by size alone are, on the
 * class mpicomp.Comm, a PlainMethod: a method descriptor written in C (called
 * with the communicator first, like mpi4py's own methods, so Python neither
 * binds nor looks in the instance's dict). A call
 *
 *   - on a communicator whose slot `_shortcut` holds a ShortcutState (set once
 *     the default policy knows which calls go plain by size: mpicomp/shortcut.py),
 *   - without keyword arguments but mpi4py's own (op, root), whose first buffer
 *     is exactly a numpy.ndarray of fewer bytes than the state's `limit` (and whose
 *     other buffer, if it has one, is an ndarray too or None: host memory only),
 *
 * is counted by size in the state and handed to mpi4py's method (or, once bound, to MPI
 * itself: "Direct MPI" below). A call whose buffers are mpi4py buffer specs over such
 * arrays ([a, datatype], [a, count, datatype], ...: "Buffer specs" below) is counted by
 * the bytes its spec addresses and handed to mpi4py's method (a receive: those bytes
 * received as below). Every other call goes to `slow`, the Python method, which decides
 * as before.
 *
 * Four kinds of method:
 *   - COLLECTIVE (Allreduce, Bcast ...): below the state's `limit` (the bytes of the
 *     first buffer; Scatter's: of its receive buffer, the argument `sized`; Allgatherv's:
 *     of the largest count of its receive v-spec, the argument `vspec`);
 *   - SEND (Send, Isend, Irecv): below the state's `p2p_limit` (the default policy
 *     never compresses point to point under the codec auto or none);
 *   - RECEIVE (Recv): any size, once the state has a `p2p_limit`. A receive cannot
 *     know whether the sender compressed, so the message is received as bytes
 *     straight into the buffer, and a message of odd length (a compressed frame,
 *     mpicomp/p2p.py; plain float data always has an even length) is handed,
 *     with its status, to `frame`, which decodes it in place;
 *   - SENDRECV (Sendrecv, its receive buffer given by position): a send below
 *     `p2p_limit`, its receive as RECEIVE's;
 *   - REPLACE (Sendrecv_replace): SENDRECV's with one buffer, sent and received as bytes
 *     (a float array, or a spec) or as its array's datatype (other arrays: no frame can
 *     arrive in them).
 * (a collective of a v-spec, Allgatherv: below `limit` by its v-spec's largest count)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>

#define SLOTS 16    /* sizes counted in a table per method; more go to a dict */

/* -- ShortcutState: one communicator's limit and counts --------------------------- */

typedef struct {
    Py_ssize_t sizes[SLOTS];
    unsigned long long calls[SLOTS];
    int used, last;
    PyObject *more;  /* dict nbytes -> calls, once the table is full */
} Counts;

typedef struct {
    PyObject_VAR_HEAD  /* ob_size: the methods it counts for (ShortcutState(methods)) */
    double limit;      /* collectives of fewer bytes go plain; 0: none */
    double p2p_limit;  /* sends of fewer bytes go plain; 0: none (and no receive shortcut) */
    int size;          /* the communicator's ranks (an in-place call sized per rank) */
    PyObject *spare;   /* a Status the receive shortcut reuses (taken while in use) */
    Counts counts[];
} State;

/* one more call of n bytes (nb: n as an int object, or NULL to make one if needed) */
static int
count(Counts *c, Py_ssize_t n, PyObject *nb)
{
    if (c->used > 0 && c->sizes[c->last] == n) {
        c->calls[c->last]++;
        return 0;
    }
    for (int i = 0; i < c->used; i++) {
        if (c->sizes[i] == n) {
            c->calls[i]++;
            c->last = i;
            return 0;
        }
    }
    if (c->used < SLOTS) {
        c->last = c->used++;
        c->sizes[c->last] = n;
        c->calls[c->last] = 1;
        return 0;
    }
    if (c->more == NULL && (c->more = PyDict_New()) == NULL)
        return -1;
    PyObject *key = nb != NULL ? Py_NewRef(nb) : PyLong_FromSsize_t(n);
    if (key == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(c->more, key);  /* borrowed */
    long long calls = old == NULL ? 0 : PyLong_AsLongLong(old);
    PyObject *now = PyErr_Occurred() ? NULL : PyLong_FromLongLong(calls + 1);
    int rc = now == NULL ? -1 : PyDict_SetItem(c->more, key, now);
    Py_XDECREF(now);
    Py_DECREF(key);
    return rc;
}

static PyObject *
state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    int methods = 0;
    if (!PyArg_ParseTuple(args, "i:ShortcutState", &methods) || (kwds && PyDict_GET_SIZE(kwds))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "ShortcutState(methods) takes no keywords");
        return NULL;
    }
    if (methods < 1 || methods > 256) {
        PyErr_Format(PyExc_ValueError, "ShortcutState: methods from 1 to 256, got %d", methods);
        return NULL;
    }
    return type->tp_alloc(type, methods);  /* zeroed: limit 0, empty tables */
}

static int
state_traverse(State *self, visitproc visit, void *arg)
{
    for (Py_ssize_t m = 0; m < Py_SIZE(self); m++)
        Py_VISIT(self->counts[m].more);
    Py_VISIT(self->spare);
    return 0;
}

static int
state_clear(State *self)
{
    for (Py_ssize_t m = 0; m < Py_SIZE(self); m++)
        Py_CLEAR(self->counts[m].more);
    Py_CLEAR(self->spare);
    return 0;
}

static void
state_dealloc(State *self)
{
    PyObject_GC_UnTrack(self);
    state_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
state_take(State *self, PyObject *arg)
{
    /* take(i): method i's counts so far, as a dict nbytes -> calls; they start again at 0 */
    long m = PyLong_AsLong(arg);
    if (m == -1 && PyErr_Occurred())
        return NULL;
    if (m < 0 || m >= Py_SIZE(self)) {
        PyErr_Format(PyExc_ValueError, "take: a method index from 0 to %zd, got %ld",
                     Py_SIZE(self) - 1, m);
        return NULL;
    }
    Counts *c = &self->counts[m];
    PyObject *taken = c->more != NULL ? c->more : PyDict_New();
    if (taken == NULL)
        return NULL;
    for (int i = 0; i < c->used; i++) {
        PyObject *nb = PyLong_FromSsize_t(c->sizes[i]);
        PyObject *old = nb == NULL ? NULL : PyDict_GetItemWithError(taken, nb);
        long long before = old == NULL ? 0 : PyLong_AsLongLong(old);
        PyObject *now = PyErr_Occurred() ? NULL
                        : PyLong_FromUnsignedLongLong(c->calls[i] + (unsigned long long)before);
        if (nb == NULL || now == NULL || PyDict_SetItem(taken, nb, now) < 0) {
            Py_XDECREF(nb);
            Py_XDECREF(now);
            if (c->more == NULL)
                Py_DECREF(taken);
            return NULL;  /* the table is left as it was */
        }
        Py_DECREF(nb);
        Py_DECREF(now);
    }
    c->more = NULL;  /* its reference now belongs to the caller */
    c->used = 0;
    c->last = 0;
    return taken;
}

static PyMethodDef state_methods[] = {
    {"take", (PyCFunction)state_take, METH_O,
     "take(i): method i's calls so far, a dict nbytes -> calls; its counts start again."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef state_members[] = {
    {"limit", T_DOUBLE, offsetof(State, limit), 0,
     "Collectives of fewer bytes go to plain MPI (0: every call runs the Python method)."},
    {"p2p_limit", T_DOUBLE, offsetof(State, p2p_limit), 0,
     "Sends of fewer bytes go to plain MPI, and receives take the shortcut, when > 0."},
    {"size", T_INT, offsetof(State, size), 0,
     "The communicator's ranks: an in-place Allgather, Gather or Scatter is sized by one "
     "rank's part of its receive buffer (0: such calls run the Python method)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpicomp._shortcut.ShortcutState",
    .tp_basicsize = sizeof(State),
    .tp_itemsize = sizeof(Counts),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One communicator's shortcut limit and counts (see mpicomp/shortcut.py).",
    .tp_new = state_new,
    .tp_dealloc = (destructor)state_dealloc,
    .tp_traverse = (traverseproc)state_traverse,
    .tp_clear = (inquiry)state_clear,
    .tp_methods = state_methods,
    .tp_members = state_members,
};

/* -- PlainMethod: the method descriptor ------------------------------------------ */

enum { COLLECTIVE = 0, SEND = 1, RECEIVE = 2, SENDRECV = 3, REPLACE = 4 };

/* Where mpi4py's method takes its arguments (from `params`, its parameter names; the
 * communicator at 0; -1: none) */
typedef struct {
    int op, root;    /* op, root */
    int peer, tag;   /* dest or source, and tag or sendtag (sends; Sendrecv's send) */
    int counts;      /* recvcounts (Reduce_scatter) */
    int into;        /* the receiving kinds' receive buffer (then `gap` other arguments,
                        then source, tag and status) */
    int gap;         /* arguments between the receive buffer and its source (REPLACE's dest
                        and sendtag: 2; else 0) */
    int most;        /* how many arguments it takes at most */
} Positions;

typedef struct {
    PyObject_HEAD
    PyObject *plain;       /* mpi4py's unbound method, e.g. MPI.Intracomm.Allreduce */
    PyObject *slow;        /* the Python function it stands in for (self first) */
    PyObject *frame;       /* receiving kinds: frame(comm, buf, status) for an odd length
                              of at least min_frame bytes (p2p.MIN_FRAME_NBYTES) */
    long long min_frame;   /* receiving kinds: no frame is shorter (shorter: plain data) */
    PyObject *status_type; /* receiving kinds: MPI.Status */
    PyObject *byte;        /* receiving kinds: MPI.BYTE */
    PyObject *defaults;    /* receiving kinds: the arguments after the receive buffer when
                              the call leaves them out ((source, tag); REPLACE: (dest,
                              sendtag, source, tag)) */
    int kind;              /* COLLECTIVE, SEND, RECEIVE, SENDRECV or REPLACE */
    int recv_index;        /* RECEIVE, SENDRECV: where the plain receives are counted */
    int sized;             /* the argument whose bytes are the call's size (1: the first
                              buffer; Scatter: 2, its receive buffer) */
    int other;             /* the call's other buffer (0: none): an array too, or None */
    int direct;            /* the MPI function a call fitting it goes to (DIRECT_...; from
                              `mpi`, its name), or NO_DIRECT: through mpi4py */
    int vspec;             /* the argument whose v-spec's largest count is the call's size
                              (Allgatherv's receive buffer), 0: the `sized` buffer's bytes */
    Positions at;          /* where mpi4py's method takes its arguments */
    int counted;           /* the largest count index it uses (index, recv_index) */
    int per_rank;          /* in place, its size is one rank's part of the other buffer
                              (Allgather, Gather, Scatter; the state's size) */
    PyTypeObject *array;   /* numpy.ndarray, matched exactly */
    PyTypeObject *owner;   /* the class whose slot holds the state */
    Py_ssize_t offset;     /* where that slot lies in an instance */
    PyObject *keywords;    /* tuple of the keyword arguments mpi4py's method takes (op, root) */
    int index;             /* this method's counts in the state */
    vectorcallfunc vectorcall;
} Method;

/* whether every keyword of a call is one of mpi4py's method (so no mpicomp setting) */
static int
plain_keywords(Method *self, PyObject *kwnames)
{
    if (kwnames == NULL)
        return 1;
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames), m = PyTuple_GET_SIZE(self->keywords);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int known = 0;
        for (Py_ssize_t j = 0; j < m && !known; j++) {
            PyObject *k = PyTuple_GET_ITEM(self->keywords, j);
            known = name == k || PyUnicode_Compare(name, k) == 0;
        }
        if (!known)
            return 0;
    }
    return 1;
}

static PyObject *nbytes_name, *status_name, *get_count_name, *itemsize_name, *size_name;
static PyTypeObject *datatype_type;  /* mpi4py.MPI.Datatype */

static PyObject *extent_name, *lb_name;
static PyObject *typedict;  /* mpi4py.MPI._typedict: a type character -> its MPI.Datatype */
static PyObject *in_place;  /* mpi4py.MPI.IN_PLACE */

/* -- Buffer specs ------------------------------------------------------------------
 *
 * mpi4py takes a buffer as an object or as a spec: [a, datatype], [a, char], [a, count],
 * [a, (count, displ)], [a, count, datatype], [a, (count, displ), datatype] or
 * [a, count, displ, datatype] (a list or tuple; `datatype` an MPI.Datatype or a type
 * character of mpi4py's, counts and displacements in its units, else in the array's
 * items). The shortcut reads these forms over exactly a numpy.ndarray; any other form
 * goes to the Python method. */

/* a count item of a buffer spec: a non-negative int, or -1 */
static long long
spec_count(PyObject *item)
{
    if (!PyLong_CheckExact(item))
        return -1;
    long long v = PyLong_AsLongLong(item);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return v;
}

/* an object's `nbytes` as a non-negative integer, or -2 (an error set) */
static long long
nbytes_of(PyObject *obj)
{
    PyObject *nb = PyObject_GetAttr(obj, nbytes_name);
    long long v = nb == NULL ? -1 : PyLong_AsLongLong(nb);
    Py_XDECREF(nb);
    return v < 0 ? -2 : v;
}

/* an int attribute of an object (a datatype's size, extent, lb), -2 on an error (set) */
static long long
int_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    long long n = v == NULL ? -1 : PyLong_AsLongLong(v);
    Py_XDECREF(v);
    return n == -1 && PyErr_Occurred() ? -2 : n;
}

/* a spec's datatype item: the MPI.Datatype (borrowed), a type character's, or NULL */
static PyObject *
datatype_of(PyObject *item)
{
    if (PyObject_TypeCheck(item, datatype_type))
        return item;
    if (!PyUnicode_CheckExact(item) || typedict == NULL)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(typedict, item);  /* borrowed */
    if (found == NULL || !PyObject_TypeCheck(found, datatype_type)) {
        PyErr_Clear();
        return NULL;
    }
    return found;
}

typedef struct {
    PyObject *array;     /* the array (borrowed) */
    long long count;     /* in the datatype's units; -1: the whole array */
    long long displ;     /* in the datatype's extents */
    PyObject *datatype;  /* the MPI.Datatype (borrowed), NULL: the array's items */
} Spec;

/* a bare array or a buffer spec over one: 1 with *out set, 0 for any other form */
static int
read_spec(PyObject *spec, PyTypeObject *array, Spec *out)
{
    out->count = -1;
    out->displ = 0;
    out->datatype = NULL;
    if (Py_TYPE(spec) == array) {
        out->array = spec;
        return 1;
    }
    if (datatype_type == NULL || !(PyList_CheckExact(spec) || PyTuple_CheckExact(spec)))
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(spec);
    if (n < 2 || n > 4 || Py_TYPE(PySequence_Fast_GET_ITEM(spec, 0)) != array)
        return 0;
    out->array = PySequence_Fast_GET_ITEM(spec, 0);
    PyObject *second = PySequence_Fast_GET_ITEM(spec, 1);
    if (n == 2 && (out->datatype = datatype_of(second)) != NULL)
        return 1;  /* [a, datatype]: the whole array */
    if (n > 2 && (out->datatype = datatype_of(PySequence_Fast_GET_ITEM(spec, n - 1))) == NULL)
        return 0;
    if (PyTuple_CheckExact(second) && PyTuple_GET_SIZE(second) == 2 && n <= 3) {
        out->count = spec_count(PyTuple_GET_ITEM(second, 0));
        out->displ = spec_count(PyTuple_GET_ITEM(second, 1));
    } else {
        out->count = spec_count(second);
        if (n == 4)
            out->displ = spec_count(PySequence_Fast_GET_ITEM(spec, 2));
    }
    return out->count >= 0 && out->displ >= 0;
}

/* the bytes of one unit of a spec: its datatype's size (or the array's itemsize); with
 * `bytes` set, 0 unless the datatype is plain bytes (its extent its size, its lower bound
 * 0). -2 on an error (set). */
static long long
spec_unit(const Spec *s, int bytes)
{
    if (s->datatype == NULL)
        return int_attr(s->array, itemsize_name);
    long long size = int_attr(s->datatype, size_name);
    if (size <= 0 || !bytes)
        return size;
    long long extent = int_attr(s->datatype, extent_name);
    long long lb = extent < 0 ? -2 : int_attr(s->datatype, lb_name);
    return lb < 0 ? -2 : extent == size && lb == 0 ? size : 0;
}

/* the bytes a spec addresses in its array: 1 with *offset and *nbytes set; 0 when it is
 * not read here (another form, a datatype that is not plain bytes where `bytes` asks for
 * them, a count past the array's end: the Python method says so, where mpi4py would let
 * MPI read beyond the buffer). An error is cleared (the Python method meets it again). */
static int
spec_span(const Spec *s, int bytes, long long *offset, long long *nbytes)
{
    long long total = nbytes_of(s->array);
    long long unit = total < 0 ? -2 : s->count < 0 && !bytes ? 1 : spec_unit(s, bytes);
    if (unit <= 0) {
        PyErr_Clear();
        return 0;
    }
    if (s->count < 0) {  /* the whole array */
        *offset = 0;
        *nbytes = total;
        return 1;
    }
    if (s->count > LLONG_MAX / 2 / unit || s->displ > LLONG_MAX / 2 / unit
            || (s->displ + s->count) * unit > total)
        return 0;
    *offset = s->displ * unit;
    *nbytes = s->count * unit;
    return 1;
}

/* the bytes of a buffer spec (a bare array's nbytes): >= 0, or -1 when not read here */
static long long
spec_nbytes(PyObject *spec, PyTypeObject *array)
{
    Spec s;
    long long offset, nbytes;
    if (!read_spec(spec, array, &s) || !spec_span(&s, 0, &offset, &nbytes))
        return -1;
    return nbytes;
}

/* a host buffer the spec path takes: exactly an ndarray, None, or a spec over one */
static int
spec_host(PyObject *obj, PyTypeObject *array)
{
    return obj == Py_None || Py_TYPE(obj) == array
           || ((PyList_CheckExact(obj) || PyTuple_CheckExact(obj))
               && PySequence_Fast_GET_SIZE(obj) >= 2
               && Py_TYPE(PySequence_Fast_GET_ITEM(obj, 0)) == array);
}

/* the bytes of a v-spec's largest count, read without parsing it: [a, counts],
 * [a, (counts, displs)], [a, counts, datatype], [a, (counts, displs), datatype] or
 * [a, counts, displs, datatype] (counts a list of ints; a list or tuple in a pair), the
 * array exactly `array`, as mpicomp.shortcut.largest_count reads it: >= 0, -1 for any other
 * form */
static long long
largest_count(PyObject *spec, PyTypeObject *array)
{
    if (!(PyList_CheckExact(spec) || PyTuple_CheckExact(spec)))
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(spec);
    if (n < 2 || n > 4 || Py_TYPE(PySequence_Fast_GET_ITEM(spec, 0)) != array)
        return -1;
    Spec s = {PySequence_Fast_GET_ITEM(spec, 0), 0, 0, NULL};
    if (n > 2 && (s.datatype = datatype_of(PySequence_Fast_GET_ITEM(spec, n - 1))) == NULL)
        return -1;
    PyObject *counts = PySequence_Fast_GET_ITEM(spec, 1);
    if (n <= 3 && PyTuple_CheckExact(counts) && PyTuple_GET_SIZE(counts) == 2
            && (PyList_CheckExact(PyTuple_GET_ITEM(counts, 0))
                || PyTuple_CheckExact(PyTuple_GET_ITEM(counts, 0))))
        counts = PyTuple_GET_ITEM(counts, 0);  /* (counts, displs) */
    else if (!PyList_CheckExact(counts))
        return -1;  /* (a tuple of two ints reads as (count, displacement) to mpi4py) */
    Py_ssize_t m = PySequence_Fast_GET_SIZE(counts);
    long long most = -1;
    for (Py_ssize_t i = 0; i < m; i++) {
        long long v = spec_count(PySequence_Fast_GET_ITEM(counts, i));
        if (v < 0)
            return -1;
        if (v > most)
            most = v;
    }
    long long unit = most < 0 ? -1 : spec_unit(&s, 0);
    if (unit < 0 || most > LLONG_MAX / 2 / (unit > 0 ? unit : 1)) {
        PyErr_Clear();
        return -1;
    }
    return most * unit;
}

/* -- Direct MPI: calls without mpi4py's argument parsing -------------------------
 *
 * A receive must learn the message's length (to tell a frame from plain data), so
 * through mpi4py it costs a buffer spec, a Status and a Get_count call: about 0.25 us
 * over mpi4py's own Recv; and the descriptor's own test and count cost a tiny
 * collective about 0.1 us over mpi4py's. With `bind` (mpicomp/shortcut.py gives it the
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

/* a call of n bytes (n < 0: a form not read here) under `limit`: 1 (counted at `index`)
 * when it is below, 0 when not, -1 on an error */
static int
counted_below(State *state, int index, long long n, double limit)
{
    if (n < 0 || (double)n >= limit)
        return 0;
    PyObject *nb = PyLong_FromLongLong(n);
    if (nb == NULL)
        return -1;
    int rc = count(&state->counts[index], (Py_ssize_t)n, nb) < 0 ? -1 : 1;
    Py_DECREF(nb);
    return rc;
}

/* the size test of a call by its first buffer: 1 (counted at `index`) when it has fewer
 * bytes than `limit`, 0 when not, -1 on an error */
static int
below(State *state, int index, PyObject *buf, double limit)
{
    PyObject *nb = PyObject_GetAttr(buf, nbytes_name);
    if (nb == NULL)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(nb);
    int rc = (n == -1 && PyErr_Occurred()) ? -1
             : (double)n < limit ? (count(&state->counts[index], n, nb) < 0 ? -1 : 1) : 0;
    Py_DECREF(nb);
    return rc;
}

/* Buffer specs (not bare arrays) of a collective or a send under the size limit: counted
 * by the bytes the spec addresses and handed to mpi4py's method, which reads the spec.
 * Returns as below(), the result in *result. */
static int
spec_call(Method *self, State *state, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames, double limit, PyObject **result)
{
    if (self->other != 0 && !(nargs > self->other && spec_host(args[self->other], self->array)))
        return 0;
    int rc = counted_below(state, self->index, spec_nbytes(args[self->sized], self->array),
                           limit);
    if (rc != 1)
        return rc;
    *result = PyObject_Vectorcall(self->plain, args, (size_t)nargs, kwnames);
    return *result == NULL ? -1 : 1;
}

/* A call on a communicator with a state whose limit is `limit` (> 0): 1 with *result set
 * when the shortcut took it, 0 when the Python method takes it, -1 on an error */
static int
shortcut_call(Method *self, State *state, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames, double limit, PyObject **result)
{
    PyObject *sized = args[self->sized];
    if (sized == in_place && self->kind == COLLECTIVE) {
        /* in place: sized by the other buffer, a bare array (the same size on every rank,
         * as the Python methods' fast path reads it), and handed to mpi4py */
        if (self->vspec || self->other == 0 || nargs <= self->other
                || Py_TYPE(args[self->other]) != self->array
                || (self->per_rank && state->size <= 0))
            return 0;
        int rc;
        if (self->per_rank) {
            long long n = spec_nbytes(args[self->other], self->array);
            rc = counted_below(state, self->index, n < 0 ? -1 : n / state->size, limit);
        } else {
            rc = below(state, self->index, args[self->other], limit);
        }
        if (rc != 1 || ((self->direct == DIRECT_ALLREDUCE || self->direct == DIRECT_IALLREDUCE
                         || self->direct == DIRECT_ALLGATHER
                         || self->direct == DIRECT_IALLGATHER)
                        && (rc = direct_collective(self, args, nargs, kwnames, result)) != 0))
            return rc;  /* (MPI called itself: an in-place Allreduce, Allgather, ...) */
        *result = PyObject_Vectorcall(self->plain, args, (size_t)nargs, kwnames);
        return *result == NULL ? -1 : 1;
    }
    int bare = Py_TYPE(sized) == self->array
               && (self->other == 0 || (nargs > self->other
                                        && (Py_TYPE(args[self->other]) == self->array
                                            || args[self->other] == Py_None)));
    Span into;
    int rc = 0;
    switch (self->kind) {
    case RECEIVE:
        return receive_shape(self, self->at.into, args, nargs, kwnames, &into)
               ? receive(self, state, &into, self->at.into, args, nargs, kwnames, result) : 0;
    case SENDRECV:
    case REPLACE:
        /* the call must have the shape the receive takes (its buffer positional) before
         * anything is counted */
        if (!receive_shape(self, self->at.into, args, nargs, kwnames, &into))
            return 0;
        rc = bare ? below(state, self->index, sized, limit)
                  : counted_below(state, self->index, spec_nbytes(sized, self->array), limit);
        return rc == 1 ? receive(self, state, &into, self->at.into, args, nargs, kwnames,
                                 result) : rc;
    }
    if (self->vspec) {  /* sized by the receive v-spec's largest count */
        if (nargs <= self->vspec || sized == Py_None || !spec_host(sized, self->array)
                || (rc = counted_below(state, self->index,
                                       largest_count(args[self->vspec], self->array),
                                       limit)) != 1
                || (bare && (rc = direct_allgatherv(args, nargs, kwnames, result)) != 0))
            return rc;
    } else if (!bare) {
        return spec_call(self, state, args, nargs, kwnames, limit, result);
    } else if ((rc = below(state, self->index, sized, limit)) != 1
               || (rc = direct_collective(self, args, nargs, kwnames, result)) != 0) {
        return rc;
    }
    *result = PyObject_Vectorcall(self->plain, args, (size_t)nargs, kwnames);
    return *result == NULL ? -1 : 1;
}

static PyObject *
method_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Method *self = (Method *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs > self->sized && PyObject_TypeCheck(args[0], self->owner)
            && plain_keywords(self, kwnames)) {
        PyObject *state_obj = *(PyObject **)((char *)args[0] + self->offset);
        if (state_obj != NULL && Py_TYPE(state_obj) == &StateType
                && self->counted < Py_SIZE(state_obj)) {
            State *state = (State *)state_obj;
            double limit = self->kind == COLLECTIVE ? state->limit : state->p2p_limit;
            PyObject *result = NULL;
            int rc = limit > 0 ? shortcut_call(self, state, args, nargs, kwnames, limit,
                                               &result) : 0;
            if (rc != 0)
                return rc < 0 ? NULL : result;
        }
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
method_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"plain", "slow", "array", "slot", "index", "params", "keywords",
                            "kind", "mpi", "frame", "status_type", "byte", "defaults",
                            "recv_index", "sized", "other", "vspec", "per_rank", "min_frame",
                            NULL};
    PyObject *plain, *slow, *array, *slot, *params, *keywords, *mpi_name = Py_None;
    PyObject *frame = Py_None, *status_type = Py_None, *byte = Py_None, *defaults = Py_None;
    const char *kind_name = "collective";
    int index, recv_index = -1, sized = 1, other = 0, vspec = 0, per_rank = 0;
    long long min_frame = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!iO!O!|$sOOOOOiiiipL:PlainMethod", names,
                                     &plain, &slow, &PyType_Type, &array, &PyMemberDescr_Type,
                                     &slot, &index, &PyTuple_Type, &params, &PyTuple_Type,
                                     &keywords, &kind_name, &mpi_name, &frame, &status_type,
                                     &byte, &defaults, &recv_index, &sized, &other, &vspec,
                                     &per_rank, &min_frame))
        return NULL;
    static const char *KINDS[] = {"collective", "send", "receive", "sendrecv", "replace"};
    int kind = -1;
    for (int k = 0; k < 5; k++)
        if (strcmp(kind_name, KINDS[k]) == 0)
            kind = k;
    if (kind < 0) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: kind 'collective', 'send', 'receive', "
                     "'sendrecv' or 'replace', got '%s'", kind_name);
        return NULL;
    }
    int receiving = kind == RECEIVE || kind == SENDRECV || kind == REPLACE;
    /* the MPI function its calls go to: its code, and whether this kind may name it */
    int direct = NO_DIRECT;
    if (mpi_name != Py_None) {
        const char *fn = PyUnicode_Check(mpi_name) ? PyUnicode_AsUTF8(mpi_name) : NULL;
        int found = -1;
        for (int i = 0; fn != NULL && i < NFUNCTIONS && found < 0; i++)
            if (strcmp(fn, FUNCTIONS[i].name) == 0)
                found = i;
        if (found < 0 || FUNCTIONS[found].kind != kind) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "PlainMethod: mpi names an MPI function of "
                             "the module's FUNCTIONS that a '%s' method calls, got %R",
                             kind_name, mpi_name);
            return NULL;
        }
        direct = FUNCTIONS[found].direct;
    }
    /* where mpi4py's method takes each argument (the communicator first) */
    Py_ssize_t nparams = PyTuple_GET_SIZE(params);
    Positions at = {-1, -1, -1, -1, -1, -1, 0, (int)nparams + 1};
    int source_at = -1, status_at = -1;
    for (Py_ssize_t i = 0; i < nparams; i++) {
        PyObject *name = PyTuple_GET_ITEM(params, i);
        const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (n == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "PlainMethod: params must be a tuple of str");
            return NULL;
        }
        int pos = (int)i + 1;
        if (strcmp(n, "op") == 0)
            at.op = pos;
        else if (strcmp(n, "root") == 0)
            at.root = pos;
        else if (strcmp(n, "dest") == 0 || (strcmp(n, "source") == 0 && kind == SEND))
            at.peer = pos;
        else if (strcmp(n, "tag") == 0 ? kind == SEND : strcmp(n, "sendtag") == 0)
            at.tag = pos;
        else if (strcmp(n, "recvcounts") == 0)
            at.counts = pos;
        if (strcmp(n, "source") == 0)
            source_at = pos;
        else if (strcmp(n, "status") == 0)
            status_at = pos;
        else if (strcmp(n, kind == SENDRECV ? "recvbuf" : "buf") == 0)
            at.into = pos;
    }
    if (nparams < 1 || nparams > 12 || sized > nparams || other > nparams || vspec > nparams) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: params names 1 to 12 parameters and "
                     "sized, other and vspec are among them, got %zd", nparams);
        return NULL;
    }
    at.gap = kind == REPLACE ? 2 : 0;
    if (receiving && (at.into < 1 || source_at != at.into + 1 + at.gap
                      || status_at != source_at + 2
                      || (kind == REPLACE && (at.peer != at.into + 1 || at.tag != at.into + 2)))) {
        PyErr_SetString(PyExc_ValueError, "PlainMethod: a receive's params have its buffer, "
                        "then (Sendrecv_replace: dest and sendtag) source, tag and status");
        return NULL;
    }
    if ((kind == SEND || kind == SENDRECV || kind == REPLACE) && (at.peer < 0 || at.tag < 0)) {
        PyErr_SetString(PyExc_ValueError, "PlainMethod: a send's params have dest (or "
                        "source) and tag");
        return NULL;
    }
    if (direct == DIRECT_REDUCE_SCATTER ? at.counts < 0 || at.op < 0
            : (direct == DIRECT_REDUCE_SCATTER_BLOCK && at.op < 0)) {
        PyErr_SetString(PyExc_ValueError, "PlainMethod: a reduce-scatter's params have op "
                        "(and recvcounts)");
        return NULL;
    }
    if (vspec < 0 || vspec == sized || (vspec && (kind != COLLECTIVE || direct != NO_DIRECT))) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: vspec must be 0, or another argument "
                     "than sized for a collective that is not direct, got %d", vspec);
        return NULL;
    }
    if (other < 0 || other == sized) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: other must be 0 or another argument, "
                     "got %d", other);
        return NULL;
    }
    if (sized < 1 || (sized != 1 && kind != COLLECTIVE)) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: sized must be 1, or more for a "
                     "collective, got %d", sized);
        return NULL;
    }
    if (recv_index < 0)
        recv_index = index;
    if (receiving
            && (!PyCallable_Check(frame) || !PyCallable_Check(status_type) || byte == Py_None
                || !PyTuple_Check(defaults) || PyTuple_GET_SIZE(defaults) != 2 + at.gap)) {
        PyErr_SetString(PyExc_TypeError, "PlainMethod: a receive needs frame, status_type, "
                        "byte and defaults (source, tag; Sendrecv_replace: dest, sendtag, "
                        "source, tag)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keywords); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(keywords, i))) {
            PyErr_SetString(PyExc_TypeError, "PlainMethod: keywords must be a tuple of str");
            return NULL;
        }
    }
    if (!PyCallable_Check(plain) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "PlainMethod: plain and slow must be callable");
        return NULL;
    }
    if (index < 0) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: index >= 0, got %d", index);
        return NULL;
    }
    PyMemberDescrObject *member = (PyMemberDescrObject *)slot;
    if (member->d_member->type != T_OBJECT_EX && member->d_member->type != T_OBJECT) {
        PyErr_SetString(PyExc_TypeError, "PlainMethod: slot must be an object slot");
        return NULL;
    }
    Method *self = (Method *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(plain);
    Py_INCREF(slow);
    Py_INCREF(array);
    Py_INCREF(PyDescr_TYPE(member));
    Py_INCREF(keywords);
    self->keywords = keywords;
    self->plain = plain;
    self->slow = slow;
    self->array = (PyTypeObject *)array;
    self->owner = PyDescr_TYPE(member);
    self->offset = member->d_member->offset;
    self->index = index;
    self->kind = kind;
    self->recv_index = recv_index;
    self->sized = sized;
    self->other = other;
    self->direct = direct;
    self->vspec = vspec;
    self->at = at;
    self->counted = index > recv_index ? index : recv_index;
    self->per_rank = per_rank;
    self->frame = Py_NewRef(frame);
    self->min_frame = min_frame;
    self->status_type = Py_NewRef(status_type);
    self->byte = Py_NewRef(byte);
    self->defaults = Py_NewRef(defaults);
    self->vectorcall = method_vectorcall;
    return (PyObject *)self;
}

static int
method_traverse(Method *self, visitproc visit, void *arg)
{
    Py_VISIT(self->plain);
    Py_VISIT(self->slow);
    Py_VISIT((PyObject *)self->array);
    Py_VISIT((PyObject *)self->owner);
    Py_VISIT(self->keywords);
    Py_VISIT(self->frame);
    Py_VISIT(self->status_type);
    Py_VISIT(self->byte);
    Py_VISIT(self->defaults);
    return 0;
}

static int
method_clear(Method *self)
{
    Py_CLEAR(self->plain);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->array);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->keywords);
    Py_CLEAR(self->frame);
    Py_CLEAR(self->status_type);
    Py_CLEAR(self->byte);
    Py_CLEAR(self->defaults);
    return 0;
}

static void
method_dealloc(Method *self)
{
    PyObject_GC_UnTrack(self);
    method_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
method_get(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
method_getattro(Method *self, PyObject *name)
{
    /* __doc__, __name__, __qualname__, __wrapped__ ...: those of the Python method */
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__doc__") == 0)
        return PyObject_GetAttr(self->slow, name);
    PyObject *found = PyObject_GenericGetAttr((PyObject *)self, name);
    if (found != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return found;
    PyErr_Clear();
    return PyObject_GetAttr(self->slow, name);
}

static PyObject *
method_repr(Method *self)
{
    return PyUnicode_FromFormat("<plain-MPI shortcut method for %R>", self->slow);
}

static PyMemberDef method_members[] = {
    {"slow", T_OBJECT, offsetof(Method, slow), READONLY, "The Python method it stands in for."},
    {"plain", T_OBJECT, offsetof(Method, plain), READONLY, "mpi4py's method."},
    {"index", T_INT, offsetof(Method, index), READONLY, "This method's counts in a state."},
    {"kind", T_INT, offsetof(Method, kind), READONLY,
     "0 collective, 1 send, 2 receive, 3 send and receive."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpicomp._shortcut.PlainMethod",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "PlainMethod(plain, slow, array, slot, index, params, keywords, *, "
              "kind='collective', mpi=None, frame=None, status_type=None, byte=None, "
              "defaults=None, recv_index=-1, sized=1, other=0, vspec=0, per_rank=False): "
              "see mpicomp/shortcut.py (FastMethod) and the module's source.",
    .tp_new = method_new,
    .tp_dealloc = (destructor)method_dealloc,
    .tp_traverse = (traverseproc)method_traverse,
    .tp_clear = (inquiry)method_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_descr_get = method_get,
    .tp_getattro = (getattrofunc)method_getattro,
    .tp_repr = (reprfunc)method_repr,
    .tp_members = method_members,
};

static PyObject *
module_bound(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    return PyBool_FromLong(mpi.recv != NULL);
}

static PyObject *
module_direct_calls(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    return PyLong_FromUnsignedLongLong(direct_calls);
}

/* the address of MPI function `name` in the dict `addresses` (name -> int), NULL (with an
 * error set) when missing or 0 */
static void *
address_of(PyObject *addresses, const char *name)
{
    PyObject *value = PyDict_GetItemString(addresses, name);  /* borrowed */
    unsigned long long at = value != NULL && PyLong_Check(value)
                            ? PyLong_AsUnsignedLongLong(value) : 0;
    if (at == (unsigned long long)-1 && PyErr_Occurred())
        PyErr_Clear();
    if (at == 0 || at == (unsigned long long)-1) {
        PyErr_Format(PyExc_ValueError, "bind: addresses needs a nonzero int for %s", name);
        return NULL;
    }
    return (void *)(uintptr_t)at;
}

/* bind(addresses, comm_get, status_get, op_get, byte, types, ops, op_type, exception), or
 * bind(None) to go back to mpi4py's methods: see "Direct MPI" above */
static PyObject *
module_bind(PyObject *Py_UNUSED(module), PyObject *args)
{
    if (PyTuple_GET_SIZE(args) == 1 && PyTuple_GET_ITEM(args, 0) == Py_None) {
        Py_CLEAR(mpi.exception);
        Py_CLEAR(mpi.op_type);
        memset(&mpi, 0, sizeof mpi);
        Py_RETURN_FALSE;
    }
    PyObject *addresses, *comm_get, *status_get, *op_get, *types, *ops, *op_type, *exception;
    PyObject *in_place_address = Py_None;
    int byte;
    if (!PyArg_ParseTuple(args, "O!O!O!O!iO!O!O!O|O:bind", &PyDict_Type, &addresses,
                          &PyCapsule_Type, &comm_get, &PyCapsule_Type, &status_get,
                          &PyCapsule_Type, &op_get, &byte, &PyDict_Type, &types,
                          &PyTuple_Type, &ops, &PyType_Type, &op_type, &exception,
                          &in_place_address))
        return NULL;
    void *in_place_ptr = NULL;
    if (in_place_address != Py_None) {
        in_place_ptr = PyLong_AsVoidPtr(in_place_address);
        if (in_place_ptr == NULL && PyErr_Occurred())
            return NULL;
    }
    void *found[NFUNCTIONS];
    for (int i = 0; i < NFUNCTIONS; i++)
        if ((found[i] = address_of(addresses, FUNCTIONS[i].name)) == NULL)
            return NULL;
    void *comm = PyCapsule_GetPointer(comm_get, "MPI_Comm *(PyObject *)");
    void *status = comm == NULL ? NULL : PyCapsule_GetPointer(status_get, "MPI_Status *(PyObject *)");
    void *op = status == NULL ? NULL : PyCapsule_GetPointer(op_get, "MPI_Op *(PyObject *)");
    if (op == NULL)
        return NULL;
    Py_ssize_t nops = PyTuple_GET_SIZE(ops);
    if (nops < 1 || nops > PREDEFINED_OPS) {
        PyErr_Format(PyExc_ValueError, "bind: ops holds 1 to %d op handles (SUM first), got %zd",
                     PREDEFINED_OPS, nops);
        return NULL;
    }
    int op_table[PREDEFINED_OPS] = {0};
    for (Py_ssize_t i = 0; i < nops; i++) {
        long handle = PyLong_AsLong(PyTuple_GET_ITEM(ops, i));
        if (handle == -1 && PyErr_Occurred())
            return NULL;
        op_table[i] = (int)handle;
    }
    int table[256] = {0};
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(types, &pos, &key, &value)) {
        const char *letter = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        long handle = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
        if (letter == NULL || letter[0] == 0 || letter[1] != 0 || handle <= 0 || handle > INT_MAX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "bind: types maps one-letter buffer formats to "
                             "positive int handles, got %R: %R", key, value);
            return NULL;
        }
        table[(unsigned char)letter[0]] = (int)handle;
    }
    Py_CLEAR(mpi.exception);
    Py_CLEAR(mpi.op_type);
    for (int i = 0; i < NFUNCTIONS; i++)
        *FUNCTIONS[i].slot = found[i];
    mpi.request_new = NULL;  /* until bind_requests has checked the layout */
    mpi.comm = (comm_handle_t)comm;
    mpi.status = (status_handle_t)status;
    mpi.op = (op_handle_t)op;
    mpi.byte = byte;
    memcpy(mpi.types, table, sizeof table);
    memcpy(mpi.ops, op_table, sizeof op_table);
    mpi.op_type = (PyTypeObject *)Py_NewRef(op_type);
    mpi.exception = Py_NewRef(exception);
    mpi.in_place = in_place_ptr;
    Py_RETURN_TRUE;
}

/* bind_requests(request_new, request_get, request_null, request_type, probe): let the
 * nonblocking calls (Isend, Irecv, Iallreduce, Ibcast, Iallgather, Ialltoall) call MPI
 * themselves, once mpi4py's Request is checked to be laid out as RequestObject: its type's
 * size and weak-reference slot, mpi4py's PyMPIRequest_Get pointing at ob_mpi, and on
 * `probe` (a pending request mpi4py made, whose buffer it keeps) ob_buf holding something
 * before its Wait and None after, with the handle MPI_REQUEST_NULL. Returns whether they
 * now do (bind first; bind(None) undoes both). */
static PyObject *
module_bind_requests(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *new_cap, *get_cap, *type_obj, *probe;
    int null_handle;
    if (!PyArg_ParseTuple(args, "O!O!iO!O:bind_requests", &PyCapsule_Type, &new_cap,
                          &PyCapsule_Type, &get_cap, &null_handle, &PyType_Type, &type_obj,
                          &probe))
        return NULL;
    mpi.request_new = NULL;
    if (mpi.allreduce == NULL)
        Py_RETURN_FALSE;
    void *new_fn = PyCapsule_GetPointer(new_cap, "PyObject *(MPI_Request)");
    int *(*get_fn)(PyObject *) = (int *(*)(PyObject *))PyCapsule_GetPointer(
        get_cap, "MPI_Request *(PyObject *)");
    if (new_fn == NULL || get_fn == NULL)
        return NULL;
    PyTypeObject *type = (PyTypeObject *)type_obj;
    RequestObject *req = (RequestObject *)probe;
    if (type->tp_basicsize != (Py_ssize_t)sizeof(RequestObject)
            || type->tp_weaklistoffset != (Py_ssize_t)offsetof(RequestObject, weakrefs)
            || Py_TYPE(probe) != type || get_fn(probe) != &req->ob_mpi
            || req->ob_buf == NULL || req->ob_buf == Py_None)
        Py_RETURN_FALSE;
    PyObject *done = PyObject_CallMethod(probe, "Wait", NULL);
    if (done == NULL)
        return NULL;
    Py_DECREF(done);
    if (req->ob_buf != Py_None || req->ob_mpi != null_handle)
        Py_RETURN_FALSE;
    mpi.request_new = (request_new_t)new_fn;
    mpi.request_null = null_handle;
    Py_RETURN_TRUE;
}

static PyObject *
module_nonblocking_bound(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    return PyBool_FromLong(mpi.request_new != NULL);
}

/* largest_count(spec, array_type): what the compiled Allgatherv reads as its size (the
 * tests hold mpicomp.shortcut.largest_count, the Python methods' reading, to it) */
static PyObject *
module_largest_count(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *spec, *array;
    if (!PyArg_ParseTuple(args, "OO!:largest_count", &spec, &PyType_Type, &array))
        return NULL;
    Py_ssize_t n = largest_count(spec, (PyTypeObject *)array);
    if (n < 0) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    return PyLong_FromSsize_t(n);
}

static PyMethodDef module_methods[] = {
    {"bind", module_bind, METH_VARARGS,
     "bind(addresses, comm_get, status_get, op_get, byte, types, ops, op_type, exception): "
     "call MPI itself (addresses: MPI function name -> address in mpi4py's libmpi, for "
     "each of FUNCTIONS; mpi4py's PyMPIComm_Get, PyMPIStatus_Get and PyMPIOp_Get capsules; "
     "MPI_BYTE's handle; a dict one-letter format -> datatype handle; the predefined ops' "
     "handles, SUM first; MPI.Op; MPI.Exception); bind(None): through mpi4py again."},
    {"bind_requests", module_bind_requests, METH_VARARGS,
     "bind_requests(request_new, request_get, request_null, request_type, probe): the "
     "nonblocking calls call MPI themselves too, once mpi4py's Request layout checks out "
     "(mpi4py's PyMPIRequest_New and PyMPIRequest_Get capsules, MPI_REQUEST_NULL's handle, "
     "MPI.Request, a pending request of mpi4py's own); returns whether they do."},
    {"nonblocking_bound", (PyCFunction)(void (*)(void))module_nonblocking_bound, METH_NOARGS,
     "Whether the nonblocking calls call MPI themselves."},
    {"bound", (PyCFunction)(void (*)(void))module_bound, METH_NOARGS,
     "Whether the shortcut calls MPI itself."},
    {"largest_count", module_largest_count, METH_VARARGS,
     "largest_count(spec, array_type): the bytes of a v-spec's largest count as the "
     "compiled Allgatherv reads them, None for a form it does not read."},
    {"direct_calls", (PyCFunction)(void (*)(void))module_direct_calls, METH_NOARGS,
     "How many calls so far called MPI themselves."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mpicomp._shortcut",
    "The compiled plain-MPI shortcut for small calls (PlainMethod, ShortcutState).",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__shortcut(void)
{
    nbytes_name = PyUnicode_InternFromString("nbytes");
    status_name = PyUnicode_InternFromString("status");
    get_count_name = PyUnicode_InternFromString("Get_count");
    itemsize_name = PyUnicode_InternFromString("itemsize");
    size_name = PyUnicode_InternFromString("size");
    extent_name = PyUnicode_InternFromString("extent");
    lb_name = PyUnicode_InternFromString("lb");
    PyObject *mpi_module = PyImport_ImportModule("mpi4py.MPI");
    if (mpi_module == NULL)
        return NULL;
    datatype_type = (PyTypeObject *)PyObject_GetAttrString(mpi_module, "Datatype");
    typedict = PyObject_GetAttrString(mpi_module, "_typedict");  /* type characters */
    in_place = PyObject_GetAttrString(mpi_module, "IN_PLACE");
    Py_DECREF(mpi_module);
    if (typedict != NULL && !PyDict_Check(typedict))
        Py_CLEAR(typedict);
    PyErr_Clear();  /* (without it, a type character goes to the Python method) */
    if (datatype_type == NULL || !PyType_Check(datatype_type) || in_place == NULL)
        return NULL;
    if (nbytes_name == NULL || status_name == NULL || get_count_name == NULL
            || itemsize_name == NULL || size_name == NULL || extent_name == NULL
            || lb_name == NULL
            || PyType_Ready(&StateType) < 0 || PyType_Ready(&MethodType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *functions = PyTuple_New(NFUNCTIONS);
    for (int i = 0; functions != NULL && i < NFUNCTIONS; i++) {
        PyObject *name = PyUnicode_FromString(FUNCTIONS[i].name);
        if (name == NULL)
            Py_CLEAR(functions);
        else
            PyTuple_SET_ITEM(functions, i, name);
    }
    if (functions == NULL
            || PyModule_AddObjectRef(m, "ShortcutState", (PyObject *)&StateType) < 0
            || PyModule_AddObjectRef(m, "PlainMethod", (PyObject *)&MethodType) < 0
            || PyModule_AddObject(m, "FUNCTIONS", functions) < 0) {
        Py_XDECREF(functions);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
