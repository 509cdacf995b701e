/* The plain-MPI shortcut of a communicator whose default sends small calls plain.
 *
 * A drop-in communicator must not make tiny calls slower: a 4-byte Allreduce
 * between two ranks of one node takes about 3.4 us, and the Python method of
 * a subclass alone (its call, a type test, a size test, a stats count) costs
 * 0.6 to 0.8 us of that. A PlainShortcut is a callable that a Comm places in
 * its own __dict__ under a method's name (it shadows the class's method) once
 * the default policy knows that calls below `limit` bytes go to plain MPI. A
 * call with no keyword arguments whose first argument is exactly a NumPy
 * ndarray of fewer than `limit` bytes is counted (by size, in `counts`) and
 * handed straight to mpi4py's method; every other call goes to `slow`, the
 * class's Python method bound to the communicator, which decides as before.
 * So the shortcut changes the cost of the cheapest calls and nothing else.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define MAX_ARGS 8
#define SLOTS 16

typedef struct {
    PyObject_HEAD
    PyObject *comm;        /* the communicator (first argument of `plain`) */
    PyObject *plain;       /* mpi4py's unbound method, e.g. MPI.Intracomm.Allreduce */
    PyObject *slow;        /* the Comm's own method bound to comm */
    PyTypeObject *array;   /* numpy.ndarray, matched exactly */
    /* calls taken, by size: a few sizes in a table (a call's size is most often the
     * last one's), the rest in a dict nbytes -> calls */
    Py_ssize_t sizes[SLOTS];
    unsigned long long calls[SLOTS];
    int used, last;
    PyObject *counts;
    double limit;          /* calls of fewer bytes are plain; 0 disables the shortcut */
    vectorcallfunc vectorcall;
} Shortcut;

static PyObject *nbytes_name;

/* one more call of n bytes (nb: n as an int); -1 with an exception set on failure */
static int
count(Shortcut *self, Py_ssize_t n, PyObject *nb)
{
    if (self->used > 0 && self->sizes[self->last] == n) {
        self->calls[self->last]++;
        return 0;
    }
    for (int i = 0; i < self->used; i++) {
        if (self->sizes[i] == n) {
            self->calls[i]++;
            self->last = i;
            return 0;
        }
    }
    if (self->used < SLOTS) {
        self->last = self->used++;
        self->sizes[self->last] = n;
        self->calls[self->last] = 1;
        return 0;
    }
    PyObject *old = PyDict_GetItemWithError(self->counts, nb);  /* borrowed */
    if (old == NULL && PyErr_Occurred())
        return -1;
    long long calls = old == NULL ? 0 : PyLong_AsLongLong(old);
    if (calls == -1 && PyErr_Occurred())
        return -1;
    PyObject *now = PyLong_FromLongLong(calls + 1);
    if (now == NULL)
        return -1;
    int rc = PyDict_SetItem(self->counts, nb, now);
    Py_DECREF(now);
    return rc;
}

static PyObject *
shortcut_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Shortcut *self = (Shortcut *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && nargs >= 1 && nargs < MAX_ARGS && Py_TYPE(args[0]) == self->array
            && self->limit > 0) {
        PyObject *nb = PyObject_GetAttr(args[0], nbytes_name);
        if (nb == NULL)
            return NULL;
        Py_ssize_t n = PyLong_AsSsize_t(nb);
        if (n == -1 && PyErr_Occurred()) {
            Py_DECREF(nb);
            return NULL;
        }
        if ((double)n < self->limit) {
            int rc = count(self, n, nb);
            Py_DECREF(nb);
            if (rc < 0)
                return NULL;
            PyObject *stack[MAX_ARGS + 1];
            stack[0] = self->comm;
            for (Py_ssize_t i = 0; i < nargs; i++)
                stack[i + 1] = args[i];
            return PyObject_Vectorcall(self->plain, stack, (size_t)nargs + 1, NULL);
        }
        Py_DECREF(nb);
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
shortcut_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"comm", "plain", "slow", "array", NULL};
    PyObject *comm, *plain, *slow, *array;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!:PlainShortcut", names,
                                     &comm, &plain, &slow, &PyType_Type, &array))
        return NULL;
    if (!PyCallable_Check(plain) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "PlainShortcut: plain and slow must be callable");
        return NULL;
    }
    Shortcut *self = (Shortcut *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->counts = PyDict_New();
    if (self->counts == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(comm);
    Py_INCREF(plain);
    Py_INCREF(slow);
    Py_INCREF(array);
    self->comm = comm;
    self->plain = plain;
    self->slow = slow;
    self->array = (PyTypeObject *)array;
    self->limit = 0.0;
    self->vectorcall = shortcut_vectorcall;
    return (PyObject *)self;
}

static int
shortcut_traverse(Shortcut *self, visitproc visit, void *arg)
{
    Py_VISIT(self->comm);
    Py_VISIT(self->plain);
    Py_VISIT(self->slow);
    Py_VISIT((PyObject *)self->array);
    Py_VISIT(self->counts);
    return 0;
}

static int
shortcut_clear(Shortcut *self)
{
    Py_CLEAR(self->comm);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->array);
    Py_CLEAR(self->counts);
    return 0;
}

static void
shortcut_dealloc(Shortcut *self)
{
    PyObject_GC_UnTrack(self);
    shortcut_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
shortcut_take(Shortcut *self, PyObject *Py_UNUSED(ignored))
{
    /* the counts so far (a dict nbytes -> calls); the counts start again at zero */
    PyObject *fresh = PyDict_New();
    if (fresh == NULL)
        return NULL;
    PyObject *taken = self->counts;
    for (int i = 0; i < self->used; i++) {
        PyObject *nb = PyLong_FromSsize_t(self->sizes[i]);
        PyObject *old = nb == NULL ? NULL : PyDict_GetItemWithError(taken, nb);
        long long before = old == NULL ? 0 : PyLong_AsLongLong(old);
        PyObject *now = PyLong_FromUnsignedLongLong(self->calls[i] + (unsigned long long)before);
        if (nb == NULL || PyErr_Occurred() || now == NULL || PyDict_SetItem(taken, nb, now) < 0) {
            Py_XDECREF(nb);
            Py_XDECREF(now);
            Py_DECREF(fresh);
            return NULL;  /* nothing reset: the counts are still there */
        }
        Py_DECREF(nb);
        Py_DECREF(now);
    }
    self->counts = fresh;
    self->used = 0;
    self->last = 0;
    return taken;
}

static PyObject *
shortcut_getattro(Shortcut *self, PyObject *name)
{
    /* __doc__, __name__, __wrapped__ ... of the method it stands for */
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "__doc__") == 0)
        return PyObject_GetAttr(self->slow, name);
    PyObject *found = PyObject_GenericGetAttr((PyObject *)self, name);
    if (found != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return found;
    PyErr_Clear();
    return PyObject_GetAttr(self->slow, name);
}

static PyObject *
shortcut_repr(Shortcut *self)
{
    PyObject *limit = PyFloat_FromDouble(self->limit);
    if (limit == NULL)
        return NULL;
    PyObject *text = PyUnicode_FromFormat("<plain-MPI shortcut below %R bytes for %R>",
                                          limit, self->slow);
    Py_DECREF(limit);
    return text;
}

static PyMethodDef shortcut_methods[] = {
    {"take", (PyCFunction)shortcut_take, METH_NOARGS,
     "The calls taken so far, as a dict nbytes -> calls; the counts start again at zero."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef shortcut_members[] = {
    {"limit", T_DOUBLE, offsetof(Shortcut, limit), 0,
     "Calls of fewer bytes go to plain MPI (0: every call goes to `slow`)."},
    {"slow", T_OBJECT, offsetof(Shortcut, slow), READONLY, "The method it stands for."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ShortcutType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpicomp._shortcut.PlainShortcut",
    .tp_basicsize = sizeof(Shortcut),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "PlainShortcut(comm, plain, slow, array): see the module's source.",
    .tp_new = shortcut_new,
    .tp_dealloc = (destructor)shortcut_dealloc,
    .tp_traverse = (traverseproc)shortcut_traverse,
    .tp_clear = (inquiry)shortcut_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Shortcut, vectorcall),
    .tp_getattro = (getattrofunc)shortcut_getattro,
    .tp_repr = (reprfunc)shortcut_repr,
    .tp_methods = shortcut_methods,
    .tp_members = shortcut_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mpicomp._shortcut",
    "The compiled plain-MPI shortcut for small calls (see PlainShortcut).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__shortcut(void)
{
    nbytes_name = PyUnicode_InternFromString("nbytes");
    if (nbytes_name == NULL || PyType_Ready(&ShortcutType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ShortcutType);
    if (PyModule_AddObject(m, "PlainShortcut", (PyObject *)&ShortcutType) < 0) {
        Py_DECREF(&ShortcutType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
