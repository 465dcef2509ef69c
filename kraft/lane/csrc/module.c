/* kraft.lane._native: the native lane in C (docs/native-lane.md). The module: its functions,
 * the Python faces of the plain C units (the formats of codec.c, the KV PUT of kv_put.c, the
 * follower's decision timed), and its types. The units, each with one job, are listed in
 * lane.h. */
#include "lane.h"

/* ------------------------------------------------------------------ the formats (codec.c) */

static PyObject *lane_read_fetch_answer(PyObject *module, PyObject *args)
{
    Py_buffer view;
    int correlation_id;
    fetch_answer a;
    frame_batch *b;
    size_t n = 0, max;
    PyObject *out = NULL, *list;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*i", &view, &correlation_id))
        return NULL;
    max = (size_t)view.len / BATCH_HEADER + 1;
    b = PyMem_Malloc(max * sizeof *b);
    if (b == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    if (!read_fetch_answer(view.buf, (size_t)view.len, correlation_id, &a, b, max, &n)) {
        PyMem_Free(b);
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    list = PyTuple_New((Py_ssize_t)n);
    if (list != NULL) {
        for (size_t i = 0; i < n; i++) {
            PyObject *x = Py_BuildValue("(LLinn)", (long long)b[i].base_offset,
                                        (long long)b[i].last_offset, b[i].epoch,
                                        (Py_ssize_t)b[i].pos, (Py_ssize_t)b[i].size);
            if (x == NULL) {
                Py_CLEAR(list);
                break;
            }
            PyTuple_SET_ITEM(list, (Py_ssize_t)i, x);
        }
    }
    if (list != NULL)
        out = Py_BuildValue("(iiLLN)", a.leader_id, a.leader_epoch, (long long)a.high_watermark,
                            (long long)a.log_start, list);
    PyMem_Free(b);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *lane_crc32c(PyObject *module, PyObject *args)
{
    Py_buffer view;
    uint32_t crc;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    crc = crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* The batches of an append at the log's end, as `SegmentedLog._scan_appended` takes them (its
 * fast path: the owner thread scans every append, and every batch a lane wrote and the log
 * adopts).
 * The same checks, in the same order: each batch whole with a possible header
 * (batch._check_header_fields), its CRC-32C good, its base offset continuing the log, at most
 * `max_batch` bytes, and an epoch not below the one before. Returns ([(position, base offset,
 * last offset, epoch, max timestamp), ...], the end offset after them), or None at the first
 * batch that fails a check: the Python scan then names what is wrong. */
static PyObject *lane_scan_appended(PyObject *module, PyObject *args)
{
    Py_buffer view;
    long long expected, last_epoch;
    Py_ssize_t max_batch;
    PyObject *metas = NULL, *out = NULL;
    const uint8_t *b;
    size_t len, pos = 0;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*LLn", &view, &expected, &last_epoch, &max_batch))
        return NULL;
    b = view.buf;
    len = (size_t)view.len;
    metas = PyList_New(0);
    if (metas == NULL)
        goto done;
    while (pos < len) {
        frame_batch fb;
        int64_t max_ts;
        PyObject *meta;
        if (!appended_batch(b, pos, len, &fb, &max_ts))
            goto fallback;
        if (fb.base_offset != expected || fb.size > (size_t)max_batch || fb.epoch < last_epoch)
            goto fallback;
        meta = Py_BuildValue("(nLLiL)", (Py_ssize_t)pos, (long long)fb.base_offset,
                             (long long)fb.last_offset, (int)fb.epoch, (long long)max_ts);
        if (meta == NULL || PyList_Append(metas, meta) < 0) {
            Py_XDECREF(meta);
            goto done;
        }
        Py_DECREF(meta);
        last_epoch = fb.epoch;
        expected = fb.last_offset + 1;
        pos += fb.size;
    }
    out = Py_BuildValue("(OL)", metas, expected);
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    Py_XDECREF(metas);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *lane_fetch_request(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"version", "correlation_id", "client_id", "cluster_id", "replica_id",
                         "directory_id", "max_wait_ms", "max_bytes", "current_leader_epoch",
                         "fetch_offset", "last_fetched_epoch", "high_watermark", NULL};
    PyObject *version, *corr, *client, *cluster, *replica, *dir, *wait, *maxb, *cle, *off, *lfe,
        *hwo;
    fetch_template t;
    int32_t c, mw, mb, e, l, v32;
    int64_t fo, hw = FETCH_HW_NOT_PROVIDED;
    uint8_t buf[2048];
    size_t n;
    (void)module;
    memset(&t, 0, sizeof t);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOOO", kw, &version, &corr, &client,
                                     &cluster, &replica, &dir, &wait, &maxb, &cle, &off, &lfe,
                                     &hwo))
        return NULL;
    if (get_i32(version, "version", &v32) < 0 || get_i32(corr, "correlation_id", &c) < 0
        || get_text(client, "client_id", t.client_id, &t.client_id_len, &t.has_client_id) < 0
        || get_text(cluster, "cluster_id", t.cluster_id, &t.cluster_id_len, NULL) < 0
        || get_i32(replica, "replica_id", &t.replica_id) < 0
        || get_i32(wait, "max_wait_ms", &mw) < 0 || get_i32(maxb, "max_bytes", &mb) < 0
        || get_i32(cle, "current_leader_epoch", &e) < 0 || get_i64(off, "fetch_offset", &fo) < 0
        || get_i32(lfe, "last_fetched_epoch", &l) < 0)
        return NULL;
    if (hwo != Py_None && get_i64(hwo, "high_watermark", &hw) < 0)
        return NULL;
    t.version = (int16_t)v32;
    if (v32 != 17 && v32 != 18) {
        PyErr_Format(PyExc_ValueError, "version must be 17 or 18, not %d", (int)v32);
        return NULL;
    }
    t.has_dir = get_dir(dir, t.dir);
    if (t.has_dir < 0)
        return NULL;
    if (t.has_dir) { /* the zero Uuid means none, as the Python encoder has it */
        static const uint8_t zero[16];
        t.has_dir = memcmp(t.dir, zero, 16) != 0;
    }
    n = write_fetch_request(buf, sizeof buf, &t, c, mw, mb, e, fo, l, hw);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "the request does not fit the lane's buffer");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)n);
}

static PyObject *lane_read_fetch_request(PyObject *module, PyObject *args)
{
    Py_buffer view, cluster;
    fetch_request r;
    int ok;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*s*", &view, &cluster))
        return NULL;
    memset(&r, 0, sizeof r);
    ok = read_fetch_request(view.buf, (size_t)view.len, cluster.buf, (size_t)cluster.len, &r);
    PyBuffer_Release(&view);
    PyBuffer_Release(&cluster);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(iiiNiLiiiN)", (int)r.version, r.correlation_id, r.replica_id,
                         r.has_dir ? PyBytes_FromStringAndSize((const char *)r.dir, 16)
                                   : Py_NewRef(Py_None),
                         r.current_leader_epoch, (long long)r.fetch_offset,
                         r.last_fetched_epoch, r.max_wait_ms, r.max_bytes,
                         opt_i64(r.high_watermark != FETCH_HW_NOT_PROVIDED, r.high_watermark));
}

static PyObject *lane_fetch_answer(PyObject *module, PyObject *args)
{
    int corr, leader_id, leader_epoch;
    long long hw, log_start;
    Py_buffer records;
    PyObject *out;
    size_t n, cap;
    uint8_t *buf;
    (void)module;
    if (!PyArg_ParseTuple(args, "iiiLLy*", &corr, &leader_id, &leader_epoch, &hw, &log_start,
                          &records))
        return NULL;
    cap = (size_t)records.len + 128;
    buf = PyMem_Malloc(cap);
    if (buf == NULL) {
        PyBuffer_Release(&records);
        return PyErr_NoMemory();
    }
    n = write_fetch_answer(buf, cap, corr, leader_id, leader_epoch, hw, log_start, records.buf,
                           (size_t)records.len);
    PyBuffer_Release(&records);
    out = n ? PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)n)
            : (PyErr_SetString(PyExc_ValueError, "the answer does not fit"), NULL);
    PyMem_Free(buf);
    return out;
}

static PyObject *lane_value_batch(PyObject *module, PyObject *args)
{
    long long base, ts;
    int epoch;
    PyObject *values, *seq, *out = NULL;
    Py_ssize_t count;
    const uint8_t **ptrs;
    size_t *lens, size;
    (void)module;
    if (!PyArg_ParseTuple(args, "LiOL", &base, &epoch, &values, &ts))
        return NULL;
    if (base < 0) {
        PyErr_Format(PyExc_ValueError, "base offset %lld is outside 0..2**63-1", base);
        return NULL;
    }
    seq = PySequence_Fast(values, "values must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    count = PySequence_Fast_GET_SIZE(seq);
    ptrs = PyMem_Calloc(count > 0 ? (size_t)count : 1, sizeof *ptrs);
    lens = PyMem_Calloc(count > 0 ? (size_t)count : 1, sizeof *lens);
    if (ptrs == NULL || lens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(v)) {
            PyErr_Format(PyExc_TypeError, "value %zd is %.100s, not bytes", i, Py_TYPE(v)->tp_name);
            goto done;
        }
        ptrs[i] = (const uint8_t *)PyBytes_AS_STRING(v);
        lens[i] = (size_t)PyBytes_GET_SIZE(v);
    }
    size = value_batch_size(lens, (size_t)count);
    if (size == 0) {
        PyErr_SetString(PyExc_ValueError, count == 0 ? "a record batch needs at least one record"
                                                     : "the batch is too large");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (out != NULL)
        write_value_batch((uint8_t *)PyBytes_AS_STRING(out), size, base, epoch, ts, ptrs, lens,
                          (size_t)count);
done:
    PyMem_Free(ptrs);
    PyMem_Free(lens);
    Py_DECREF(seq);
    return out;
}

/* ------------------------------------------------------------------ the KV PUT (kv_put.c) */

static PyObject *lane_read_puts(PyObject *module, PyObject *args)
{
    Py_buffer view;
    client_put *puts;
    size_t max, n, used = 0;
    PyObject *list = NULL, *out = NULL;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    max = (size_t)view.len / (4 + CLIENT_REQUEST_HEAD) + 1;
    puts = PyMem_Malloc(max * sizeof *puts);
    if (puts == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    n = read_puts(view.buf, (size_t)view.len, puts, max, LANE_MAX_APPEND_BYTES, &used);
    list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        const uint8_t *b = view.buf;
        size_t size = KV_PUT_OVERHEAD + puts[i].key_len + puts[i].value_len;
        PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size), *item;
        if (record == NULL) {
            Py_CLEAR(list);
            break;
        }
        write_kv_put((uint8_t *)PyBytes_AS_STRING(record), b + puts[i].key_at, puts[i].key_len,
                     b + puts[i].value_at, puts[i].value_len);
        item = Py_BuildValue("(kN)", (unsigned long)puts[i].request_id, record);
        if (item == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    if (list != NULL)
        out = Py_BuildValue("(nN)", (Py_ssize_t)used, list);
    PyMem_Free(puts);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *lane_put_answer(PyObject *module, PyObject *args)
{
    unsigned long rid;
    long long offset;
    uint8_t out[PUT_ANSWER_SIZE];
    (void)module;
    if (!PyArg_ParseTuple(args, "kL", &rid, &offset))
        return NULL;
    if (rid > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "a request id is a u32");
        return NULL;
    }
    write_put_answer(out, (uint32_t)rid, offset);
    return PyBytes_FromStringAndSize((const char *)out, PUT_ANSWER_SIZE);
}

/* ------------------------------------------------------ the follower's decision, timed */

/* The follower lane's whole decision on one answer, timed in C (bench/measure/bench_lane.py): read the
 * frame, apply the follower's rules to what it holds, and write the next fetch, `iterations`
 * times over, each from the same lease. Returns the mean nanoseconds per step, or -1 when the
 * frame is not a plain answer the lease takes. */
static PyObject *lane_time_follower_step(PyObject *module, PyObject *args)
{
    Py_buffer view;
    int corr;
    long long iterations;
    fetch_answer a;
    frame_batch batches[64];
    lane_batch lb[64];
    follower_lane lease, f;
    fetch_template t;
    uint8_t out[512];
    struct timespec t0, t1;
    size_t n = 0;
    int64_t first = -1, last = -1;
    double ns;
    (void)module;
    memset(&t, 0, sizeof t);
    memset(&lease, 0, sizeof lease);
    int epoch;
    long long log_end;
    if (!PyArg_ParseTuple(args, "y*iiLL", &view, &corr, &epoch, &log_end, &iterations))
        return NULL;
    lease.epoch = epoch;
    lease.log_end = log_end;
    lease.leader_id = -2; /* taken from the first reading below */
    lease.fetch_correlation = corr;
    t.version = 18;
    t.replica_id = 2;
    t.cluster_id_len = 22;
    memset(t.cluster_id, 'c', 22);
    if (iterations < 1 || !read_fetch_answer(view.buf, (size_t)view.len, corr, &a, batches, 64, &n)) {
        PyBuffer_Release(&view);
        return PyFloat_FromDouble(-1.0);
    }
    lease.leader_id = a.leader_id;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long long i = 0; i < iterations; i++) {
        f = lease;
        if (!read_fetch_answer(view.buf, (size_t)view.len, corr, &a, batches, 64, &n))
            break;
        for (size_t k = 0; k < n; k++) {
            lb[k].base_offset = batches[k].base_offset;
            lb[k].last_offset = batches[k].last_offset;
            lb[k].epoch = batches[k].epoch;
            lb[k].is_control = 0;
        }
        if (!follower_answer(&f, corr, 0, a.leader_id, a.leader_epoch, a.high_watermark, 0, 0, lb,
                             (Py_ssize_t)n, &first, &last)) {
            iterations = -1;
            break;
        }
        if (write_fetch_request(out, sizeof out, &t, corr + 1, 500, 1 << 20, f.epoch, f.log_end,
                                f.epoch, f.has_hw ? f.hw : -1) == 0) {
            iterations = -1;
            break;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    PyBuffer_Release(&view);
    if (iterations < 0)
        return PyFloat_FromDouble(-1.0);
    ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)iterations;
    return PyFloat_FromDouble(ns);
}

/* ------------------------------------------------------------------ the module */

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
    .m_doc = "The native lane in C (docs/native-lane.md): its rules, the formats it reads and "
             "writes, and the follower's and the leader's I/O loops.",
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
