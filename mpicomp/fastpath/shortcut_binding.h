/* binding to the MPI library mpi4py loaded: its functions, mpi4py's C API, its Request layout.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

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
