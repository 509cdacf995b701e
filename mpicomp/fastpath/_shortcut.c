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
 *     the default policy knows which calls go plain by size: mpicomp/fastpath/limits.py),
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
 *     mpicomp/frame_format.py; plain float data always has an even length) is handed,
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
#define MAX_PARAMS 12  /* the most parameters an mpi4py method of the table takes */

/* the parts, in the order their definitions need (one translation unit) */
#include "shortcut_state.h"
#include "shortcut_method_args.h"
#include "shortcut_specs.h"
#include "shortcut_receive.h"
#include "shortcut_sends.h"
#include "shortcut_collectives.h"
#include "shortcut_method.h"
#include "shortcut_binding.h"

/* largest_count(spec, array_type): what the compiled Allgatherv reads as its size (the
 * tests hold it to their own reading) */
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
    PyModuleDef_HEAD_INIT, "mpicomp.fastpath._shortcut",
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
    is_predefined_name = PyUnicode_InternFromString("is_predefined");
    combiner_name = PyUnicode_InternFromString("combiner");
    contents_name = PyUnicode_InternFromString("contents");
    PyObject *mpi_module = PyImport_ImportModule("mpi4py.MPI");
    if (mpi_module == NULL)
        return NULL;
    datatype_type = (PyTypeObject *)PyObject_GetAttrString(mpi_module, "Datatype");
    typedict = PyObject_GetAttrString(mpi_module, "_typedict");  /* type characters */
    in_place = PyObject_GetAttrString(mpi_module, "IN_PLACE");
    PyObject *contiguous = PyObject_GetAttrString(mpi_module, "COMBINER_CONTIGUOUS");
    PyObject *dup = PyObject_GetAttrString(mpi_module, "COMBINER_DUP");
    if (contiguous != NULL && dup != NULL) {
        combiner_contiguous = PyLong_AsLongLong(contiguous);
        combiner_dup = PyLong_AsLongLong(dup);
    }
    Py_XDECREF(contiguous);
    Py_XDECREF(dup);
    Py_DECREF(mpi_module);
    if (typedict != NULL && !PyDict_Check(typedict))
        Py_CLEAR(typedict);
    PyErr_Clear();  /* (without it, a type character goes to the Python method) */
    if (datatype_type == NULL || !PyType_Check(datatype_type) || in_place == NULL)
        return NULL;
    if (nbytes_name == NULL || status_name == NULL || get_count_name == NULL
            || itemsize_name == NULL || size_name == NULL || extent_name == NULL
            || lb_name == NULL || is_predefined_name == NULL || combiner_name == NULL
            || contents_name == NULL
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
