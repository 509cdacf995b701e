/* buffer specs read without mpi4py's parsing: counts, datatypes, bytes, a v-spec's largest count.
 *
 * Part of _shortcut.c, which includes it: one translation unit, not a header. */

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

/* whether a datatype is predefined: 1, 0, or -1 on an error (set) */
static int
predefined(PyObject *datatype)
{
    PyObject *v = PyObject_GetAttr(datatype, is_predefined_name);
    int yes = v == NULL ? -1 : PyObject_IsTrue(v);
    Py_XDECREF(v);
    return yes;
}

/* whether a datatype's elements come in order: a predefined one, or a contiguous run or a
 * dup of one in order (read by MPI's contents, whose derived handles are freed after). An
 * indexed datatype without gaps has a dense one's size, extent and lower bound but may put
 * its blocks in another order: it goes to the Python method. 1, 0, or -1 on an error
 * (set). */
static int
in_order(PyObject *datatype)
{
    int yes = predefined(datatype);
    if (yes != 0)
        return yes;
    long long combiner = int_attr(datatype, combiner_name);
    if (combiner == -2)
        return -1;
    if (combiner != combiner_contiguous && combiner != combiner_dup)
        return 0;
    PyObject *contents = PyObject_GetAttr(datatype, contents_name);
    if (contents == NULL)
        return -1;
    PyObject *types = PyTuple_Check(contents) && PyTuple_GET_SIZE(contents) > 0
                      ? PyTuple_GET_ITEM(contents, PyTuple_GET_SIZE(contents) - 1) : NULL;
    yes = 0;
    if (types != NULL && PyList_Check(types) && PyList_GET_SIZE(types) == 1) {
        PyObject *inner = PyList_GET_ITEM(types, 0);
        int own = predefined(inner) == 0;  /* a new handle of MPI's: ours to free */
        yes = in_order(inner);
        if (own) {
            PyObject *r = PyObject_CallMethod(inner, "Free", NULL);
            if (r == NULL && yes >= 0)
                yes = -1;
            Py_XDECREF(r);
        }
    }
    Py_DECREF(contents);
    return yes;
}

/* the bytes of one unit of a spec: its datatype's size (or the array's itemsize); with
 * `bytes` set, 0 unless the datatype is plain bytes (its elements in order (in_order),
 * its extent its size, its lower bound 0). -2 on an error (set). */
static long long
spec_unit(const Spec *s, int bytes)
{
    if (s->datatype == NULL)
        return int_attr(s->array, itemsize_name);
    long long size = int_attr(s->datatype, size_name);
    if (size <= 0 || !bytes)
        return size;
    int yes = in_order(s->datatype);
    if (yes <= 0)
        return yes < 0 ? -2 : 0;
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
 * array exactly `array`, the one reading of it: >= 0, -1 for any other
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
