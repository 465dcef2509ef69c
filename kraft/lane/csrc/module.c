/* kraft.lane._native: the native lane in C (docs/native-lane.md). The module's functions and
 * types, and the argument helpers the types share. The units, each with one job, are listed in
 * lane.h. */
#include "lane.h"

/* ------------------------------------------------------------------ Python types */

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

static PyMethodDef lane_functions[] = {
    {"read_fetch_answer", lane_read_fetch_answer, METH_VARARGS,
     "read_fetch_answer(frame, correlation_id) -> (leader_id, leader_epoch, high_watermark, "
     "log_start, ((base_offset, last_offset, epoch, position, size), ...)) | None: a Fetch "
     "v17/v18 response frame (no size prefix) read as the follower's lane reads it; None for "
     "anything but a plain answer of the voters' shape with whole, valid, non-control batches"},
    {"crc32c", lane_crc32c, METH_VARARGS, "crc32c(data) -> the CRC-32C the lane checks batches with"},
    {"scan_appended", lane_scan_appended, METH_VARARGS,
     "scan_appended(data, expected, last_epoch, max_batch) -> ([(position, base offset, last "
     "offset, epoch, max timestamp), ...], end offset) or None: the batches of an append at "
     "the log's end when every check passes (None: the Python scan says what fails)"},
    {"read_puts", lane_read_puts, METH_VARARGS,
     "read_puts(buffer) -> (bytes used, [(request_id, kv_record), ...]): the whole PUT frames "
     "of the binary client protocol at the head of the buffer, up to the first frame the "
     "leader's lane does not take (a key or value above its limit among them) or the first "
     "whose record would take the records past MAX_APPEND_BYTES (one at least)"},
    {"put_answer", lane_put_answer, METH_VARARGS,
     "put_answer(request_id, offset) -> bytes: a PUT's OK answer frame"},
    {"value_batch", lane_value_batch, METH_VARARGS,
     "value_batch(base_offset, epoch, values, timestamp_ms) -> bytes: the record batch "
     "kraft.records.batch.build_batch builds for plain values, built by the leader's lane"},
    {"read_fetch_request", lane_read_fetch_request, METH_VARARGS,
     "read_fetch_request(frame, cluster_id) -> (version, correlation_id, replica_id, "
     "directory_id bytes | None, current_leader_epoch, fetch_offset, last_fetched_epoch, "
     "max_wait_ms, max_bytes, high_watermark | None) | None: a voter's Fetch v17/v18 request "
     "(no size prefix) read as the leader's lane reads it"},
    {"fetch_answer", lane_fetch_answer, METH_VARARGS,
     "fetch_answer(correlation_id, leader_id, leader_epoch, high_watermark, log_start, records) "
     "-> bytes: a plain Fetch v17/v18 answer frame (no size prefix), as fetch_fast writes it"},
    {"time_follower_step", lane_time_follower_step, METH_VARARGS,
     "time_follower_step(frame, correlation_id, epoch, log_end, iterations) -> mean ns of the "
     "follower lane's decision on one answer (read, rules, next fetch), or -1 when the lease "
     "does not take it"},
    {"fetch_request", (PyCFunction)(void (*)(void))lane_fetch_request, METH_VARARGS | METH_KEYWORDS,
     "fetch_request(version, correlation_id, client_id, cluster_id, replica_id, directory_id, "
     "max_wait_ms, max_bytes, current_leader_epoch, fetch_offset, last_fetched_epoch, "
     "high_watermark) -> bytes: the Fetch v17/v18 request frame (no size prefix) the follower's "
     "lane sends, as kraft.server.fetch_fast.encode_fetch_request writes it"},
    {"io_faults", (PyCFunction)(void (*)(void))lane_io_faults, METH_VARARGS | METH_KEYWORDS,
     "io_faults(seed, fail_write=0.0, tear_write=0.0, fail_sync=0.0, delay_us=0): the loops' "
     "disk calls go through a deterministic fault layer from now on (for tests): per call, a "
     "PRNG seeded with `seed` fails a write with EIO (probability fail_write), tears it (a "
     "prefix reaches the file, then EIO or a short count: tear_write), fails an fdatasync with "
     "EIO (fail_sync), and delays the call by 0..delay_us microseconds; the counters restart. "
     "io_faults(None): the plain syscalls again"},
    {"io_fault_counts", lane_io_fault_counts, METH_NOARGS,
     "io_fault_counts() -> dict: whether the fault layer is installed, the writes and syncs it "
     "saw, the faults it injected (failed_writes, torn_writes, short_writes, failed_syncs, "
     "delays), and synced_size / synced_fd: the file's size at the last fdatasync that "
     "succeeded (-1 before any; it stays after a failed one: the kernel may have dropped those "
     "pages)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lane_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kraft.lane._native",
    .m_doc = "The native lane's rules in C (docs/native-lane.md, step 1b), and the follower's "
             "reading of the leader's answers (step 2).",
    .m_size = -1,
    .m_methods = lane_functions,
};

PyMODINIT_FUNC PyInit__native(void)
{
    PyObject *m;
    crc_init();
    if (PyType_Ready(&LeaderLaneType) < 0 || PyType_Ready(&FollowerLaneType) < 0
        || PyType_Ready(&FollowerShellType) < 0 || PyType_Ready(&LeaderShellType) < 0)
        return NULL;
    m = PyModule_Create(&lane_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAX_VOTERS", LANE_MAX_VOTERS) < 0
        || PyModule_AddIntConstant(m, "KV_MAX_KEY_BYTES", KV_MAX_KEY_BYTES) < 0
        || PyModule_AddIntConstant(m, "KV_MAX_VALUE_BYTES", KV_MAX_VALUE_BYTES) < 0
        || PyModule_AddIntConstant(m, "MAX_APPEND_BYTES", LANE_MAX_APPEND_BYTES) < 0
        || PyModule_AddIntConstant(m, "MAX_BATCH_BYTES", LANE_MAX_BATCH_BYTES) < 0
        || PyModule_AddObjectRef(m, "LeaderLane", (PyObject *)&LeaderLaneType) < 0
        || PyModule_AddObjectRef(m, "FollowerLane", (PyObject *)&FollowerLaneType) < 0
        || PyModule_AddObjectRef(m, "FollowerShell", (PyObject *)&FollowerShellType) < 0
        || PyModule_AddObjectRef(m, "LeaderShell", (PyObject *)&LeaderShellType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
