/* PlainMethod's structure: where mpi4py's method takes each argument, and its keywords.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

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
                              of at least min_frame bytes (frame.MIN_FRAME_NBYTES) */
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
