/* The argument helpers the native lane's Python types and functions share: Python values read
 * into C (ints, a directory id, text) and C values as Python ones (an optional int, the
 * result types of kraft.lane.rules). */
#include "lane.h"

PyObject *lane_result(const char *name)
{
    /* kraft.lane.rules's LaneFetch / LaneAnswer, so both implementations answer alike */
    PyObject *mod = PyImport_ImportModule("kraft.lane.rules");
    PyObject *t;
    if (mod == NULL)
        return NULL;
    t = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return t;
}

int get_i64(PyObject *o, const char *what, int64_t *out)
{
    long long x;
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    x = PyLong_AsLongLong(o);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)x;
    return 0;
}

int get_i32(PyObject *o, const char *what, int32_t *out)
{
    int64_t x;
    if (get_i64(o, what, &x) < 0)
        return -1;
    if (x < INT32_MIN || x > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s out of the int32 range", what);
        return -1;
    }
    *out = (int32_t)x;
    return 0;
}

int get_attr_i64(PyObject *o, const char *name, int64_t *out)
{
    PyObject *a = PyObject_GetAttrString(o, name);
    int r;
    if (a == NULL)
        return -1;
    r = get_i64(a, name, out);
    Py_DECREF(a);
    return r;
}

/* A directory id (a Uuid, or None): 1 with its 16 bytes in `out`, 0 for None, -1 on error. */
int get_dir(PyObject *o, uint8_t out[16])
{
    PyObject *raw;
    if (o == Py_None)
        return 0;
    raw = PyObject_GetAttrString(o, "bytes");
    if (raw == NULL)
        return -1;
    if (!PyBytes_Check(raw) || PyBytes_GET_SIZE(raw) != 16) {
        Py_DECREF(raw);
        PyErr_SetString(PyExc_ValueError, "a directory id is 16 bytes");
        return -1;
    }
    memcpy(out, PyBytes_AS_STRING(raw), 16);
    Py_DECREF(raw);
    return 1;
}

PyObject *opt_i64(int has, int64_t x)
{
    if (!has)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)x);
}

int set_opt_i64(PyObject *o, const char *what, int *has, int64_t *x)
{
    if (o == Py_None) {
        *has = 0;
        *x = 0;
        return 0;
    }
    if (get_i64(o, what, x) < 0)
        return -1;
    *has = 1;
    return 0;
}

int get_text(PyObject *o, const char *what, char *out, size_t *len, int *present)
{
    Py_ssize_t n;
    const char *utf8;
    if (o == Py_None && present != NULL) {
        *present = 0;
        *len = 0;
        return 0;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    utf8 = PyUnicode_AsUTF8AndSize(o, &n);
    if (utf8 == NULL)
        return -1;
    if ((size_t)n >= FETCH_TEMPLATE_TEXT) {
        PyErr_Format(PyExc_ValueError, "%s is longer than %d bytes", what, FETCH_TEMPLATE_TEXT - 1);
        return -1;
    }
    memcpy(out, utf8, (size_t)n);
    *len = (size_t)n;
    if (present != NULL)
        *present = 1;
    return 0;
}
