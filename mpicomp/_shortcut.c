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
 *     is exactly a numpy.ndarray of fewer bytes than the state's `limit`,
 *
 * is counted by size in the state and handed to mpi4py's method. Every other
 * call goes to `slow`, the Python method, which decides as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define SLOTS 16    /* sizes counted in a table per method; more go to a dict */
#define METHODS 8   /* methods a state counts for */

/* -- ShortcutState: one communicator's limit and counts --------------------------- */

typedef struct {
    Py_ssize_t sizes[SLOTS];
    unsigned long long calls[SLOTS];
    int used, last;
    PyObject *more;  /* dict nbytes -> calls, once the table is full */
} Counts;

typedef struct {
    PyObject_HEAD
    double limit;  /* calls of fewer bytes go plain; 0: none */
    Counts counts[METHODS];
} State;

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
    PyObject *old = PyDict_GetItemWithError(c->more, nb);  /* borrowed */
    if (old == NULL && PyErr_Occurred())
        return -1;
    long long calls = old == NULL ? 0 : PyLong_AsLongLong(old);
    if (calls == -1 && PyErr_Occurred())
        return -1;
    PyObject *now = PyLong_FromLongLong(calls + 1);
    if (now == NULL)
        return -1;
    int rc = PyDict_SetItem(c->more, nb, now);
    Py_DECREF(now);
    return rc;
}

static PyObject *
state_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (!PyArg_ParseTuple(args, ":ShortcutState") || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "ShortcutState() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0);  /* zeroed: limit 0, empty tables */
}

static int
state_traverse(State *self, visitproc visit, void *arg)
{
    for (int m = 0; m < METHODS; m++)
        Py_VISIT(self->counts[m].more);
    return 0;
}

static int
state_clear(State *self)
{
    for (int m = 0; m < METHODS; m++)
        Py_CLEAR(self->counts[m].more);
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
    if (m < 0 || m >= METHODS) {
        PyErr_Format(PyExc_ValueError, "take: a method index from 0 to %d, got %ld",
                     METHODS - 1, m);
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
     "Calls of fewer bytes go to plain MPI (0: every call runs the Python method)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpicomp._shortcut.ShortcutState",
    .tp_basicsize = sizeof(State),
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

typedef struct {
    PyObject_HEAD
    PyObject *plain;       /* mpi4py's unbound method, e.g. MPI.Intracomm.Allreduce */
    PyObject *slow;        /* the Python function it stands in for (self first) */
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

static PyObject *nbytes_name;

static PyObject *
method_vectorcall(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Method *self = (Method *)self_obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs >= 2 && Py_TYPE(args[1]) == self->array && PyObject_TypeCheck(args[0], self->owner)
            && plain_keywords(self, kwnames)) {
        PyObject *state = *(PyObject **)((char *)args[0] + self->offset);
        if (state != NULL && Py_TYPE(state) == &StateType && ((State *)state)->limit > 0) {
            PyObject *nb = PyObject_GetAttr(args[1], nbytes_name);
            if (nb == NULL)
                return NULL;
            Py_ssize_t n = PyLong_AsSsize_t(nb);
            if (n == -1 && PyErr_Occurred()) {
                Py_DECREF(nb);
                return NULL;
            }
            if ((double)n < ((State *)state)->limit) {
                int rc = count(&((State *)state)->counts[self->index], n, nb);
                Py_DECREF(nb);
                if (rc < 0)
                    return NULL;
                return PyObject_Vectorcall(self->plain, args, (size_t)nargs, kwnames);
            }
            Py_DECREF(nb);
        }
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
method_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"plain", "slow", "array", "slot", "index", "keywords", NULL};
    PyObject *plain, *slow, *array, *slot, *keywords;
    int index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!iO!:PlainMethod", names, &plain, &slow,
                                     &PyType_Type, &array, &PyMemberDescr_Type, &slot, &index,
                                     &PyTuple_Type, &keywords))
        return NULL;
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
    if (index < 0 || index >= METHODS) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: index from 0 to %d, got %d",
                     METHODS - 1, index);
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
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpicomp._shortcut.PlainMethod",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "PlainMethod(plain, slow, array, slot, index, keywords): see the module's source.",
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

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mpicomp._shortcut",
    "The compiled plain-MPI shortcut for small calls (PlainMethod, ShortcutState).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__shortcut(void)
{
    nbytes_name = PyUnicode_InternFromString("nbytes");
    if (nbytes_name == NULL || PyType_Ready(&StateType) < 0 || PyType_Ready(&MethodType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "ShortcutState", (PyObject *)&StateType) < 0
            || PyModule_AddObjectRef(m, "PlainMethod", (PyObject *)&MethodType) < 0
            || PyModule_AddIntConstant(m, "METHODS", METHODS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
