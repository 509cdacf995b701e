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
                              of at least min_frame bytes (frame_format.MIN_FRAME_NBYTES) */
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
    PyObject *params;      /* mpi4py's parameter names after the communicator */
    PyObject *param_defaults; /* their defaults (`required`: none), to put a keyword call's
                              arguments in their places (None: keyword calls not taken) */
    PyObject *required;    /* the marker of a parameter without a default */
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

/* a keyword call's arguments all by position in `full` (the communicator, then every
 * parameter: the positional ones, the keywords in their places, the defaults in the gaps;
 * *n set): 1, or 0 when a keyword is not one of mpi4py's parameters, names a positional
 * argument again, or a parameter without a default is missing (the Python method then
 * takes the call, and raises where mpi4py would) */
static int
all_positional(Method *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               PyObject **full, Py_ssize_t *n)
{
    if (self->param_defaults == Py_None)
        return 0;
    Py_ssize_t nparams = PyTuple_GET_SIZE(self->params);
    if (nargs < 1 || nargs > nparams + 1)
        return 0;
    for (Py_ssize_t i = 0; i <= nparams; i++)
        full[i] = i < nargs ? args[i] : NULL;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t found = -1;
        for (Py_ssize_t j = 0; j < nparams && found < 0; j++) {
            PyObject *param = PyTuple_GET_ITEM(self->params, j);
            if (name == param || PyUnicode_Compare(name, param) == 0)
                found = j + 1;
        }
        if (found < nargs || full[found] != NULL)
            return 0;
        full[found] = args[nargs + k];
    }
    for (Py_ssize_t i = nargs; i <= nparams; i++) {
        if (full[i] == NULL) {
            full[i] = PyTuple_GET_ITEM(self->param_defaults, i - 1);
            if (full[i] == self->required)
                return 0;
        }
    }
    *n = nparams + 1;
    return 1;
}

static PyObject *nbytes_name, *status_name, *get_count_name, *itemsize_name, *size_name;
static PyTypeObject *datatype_type;  /* mpi4py.MPI.Datatype */

static PyObject *extent_name, *lb_name, *is_predefined_name, *combiner_name, *contents_name;
static long long combiner_contiguous = -1, combiner_dup = -1;  /* MPI.COMBINER_* */
static PyObject *typedict;  /* mpi4py.MPI._typedict: a type character -> its MPI.Datatype */
static PyObject *in_place;  /* mpi4py.MPI.IN_PLACE */
