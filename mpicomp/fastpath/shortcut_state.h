/* ShortcutState: one communicator's size limits and its counts of calls taken.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

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
    .tp_name = "mpicomp.fastpath._shortcut.ShortcutState",
    .tp_basicsize = sizeof(State),
    .tp_itemsize = sizeof(Counts),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One communicator's shortcut limit and counts (see mpicomp/fastpath/limits.py).",
    .tp_new = state_new,
    .tp_dealloc = (destructor)state_dealloc,
    .tp_traverse = (traverseproc)state_traverse,
    .tp_clear = (inquiry)state_clear,
    .tp_methods = state_methods,
    .tp_members = state_members,
};
