/* PlainMethod: the size test (the one size rule), the call, the descriptor type.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

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
    /* a call with keywords (mpi4py's own only) is taken as the same call by position */
    PyObject *full[MAX_PARAMS + 1];
    PyObject *const *pos = args;
    Py_ssize_t npos = nargs;
    int fits = 1;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        fits = plain_keywords(self, kwnames)
               && all_positional(self, args, nargs, kwnames, full, &npos);
        pos = full;
    }
    if (fits && npos > self->sized && PyObject_TypeCheck(pos[0], self->owner)) {
        PyObject *state_obj = *(PyObject **)((char *)pos[0] + self->offset);
        if (state_obj != NULL && Py_TYPE(state_obj) == &StateType
                && self->counted < Py_SIZE(state_obj)) {
            State *state = (State *)state_obj;
            double limit = self->kind == COLLECTIVE ? state->limit : state->p2p_limit;
            PyObject *result = NULL;
            int rc = limit > 0 ? shortcut_call(self, state, pos, npos, NULL, limit,
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
                            "param_defaults", "required", NULL};
    PyObject *plain, *slow, *array, *slot, *params, *keywords, *mpi_name = Py_None;
    PyObject *frame = Py_None, *status_type = Py_None, *byte = Py_None, *defaults = Py_None;
    PyObject *param_defaults = Py_None, *required = Py_None;
    const char *kind_name = "collective";
    int index, recv_index = -1, sized = 1, other = 0, vspec = 0, per_rank = 0;
    long long min_frame = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!iO!O!|$sOOOOOiiiipLOO:PlainMethod", names,
                                     &plain, &slow, &PyType_Type, &array, &PyMemberDescr_Type,
                                     &slot, &index, &PyTuple_Type, &params, &PyTuple_Type,
                                     &keywords, &kind_name, &mpi_name, &frame, &status_type,
                                     &byte, &defaults, &recv_index, &sized, &other, &vspec,
                                     &per_rank, &min_frame, &param_defaults, &required))
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
    if (nparams < 1 || nparams > MAX_PARAMS || sized > nparams || other > nparams
            || vspec > nparams) {
        PyErr_Format(PyExc_ValueError, "PlainMethod: params names 1 to %d parameters and "
                     "sized, other and vspec are among them, got %zd", MAX_PARAMS, nparams);
        return NULL;
    }
    if (param_defaults != Py_None
            && (!PyTuple_Check(param_defaults) || PyTuple_GET_SIZE(param_defaults) != nparams)) {
        PyErr_SetString(PyExc_TypeError, "PlainMethod: param_defaults must be None or a "
                        "tuple of one default per parameter");
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
    self->params = Py_NewRef(params);
    self->param_defaults = Py_NewRef(param_defaults);
    self->required = Py_NewRef(required);
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
    Py_VISIT(self->params);
    Py_VISIT(self->param_defaults);
    Py_VISIT(self->required);
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
    Py_CLEAR(self->params);
    Py_CLEAR(self->param_defaults);
    Py_CLEAR(self->required);
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
    .tp_name = "mpicomp.fastpath._shortcut.PlainMethod",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "PlainMethod(plain, slow, array, slot, index, params, keywords, *, "
              "kind='collective', mpi=None, frame=None, status_type=None, byte=None, "
              "defaults=None, recv_index=-1, sized=1, other=0, vspec=0, per_rank=False): "
              "see mpicomp/fastpath/methods.py (FastMethod) and the module's source.",
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
