/* The native lane's rules in plain C, and their Python types (kraft.lane._native.LeaderLane,
 * FollowerLane): the same rules as kraft/lane/rules.py, input for input (docs/native-lane.md).
 * A leader counts its voters' plain fetches at its tail, its appends and its own syncs, and
 * moves the high watermark; a follower takes the plain answers to its fetch in flight.
 * Anything else is handed over (None), and a handed-over input changes nothing. No I/O,
 * no clock, no allocation on a decision: the decisions are plain C functions over a fixed-size
 * state (leader_fetch, leader_appended, leader_persisted, follower_answer), which the I/O loops
 * call without the GIL. The Python types around them exist so that the simulator and the tests
 * can drive and check them (kraft.sim.lane_shadow, tests/sim/test_lane_native.py). */
#include "lane.h"

/* ------------------------------------------------------------------ the rules, plain C */

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The largest offset a majority of the voters reach (-1 for none), as quorum.majority_offset. */
static int64_t majority_offset(const leader_lane *l)
{
    int64_t offs[LANE_MAX_VOTERS];
    if (l->n == 0)
        return -1;
    for (int i = 0; i < l->n; i++)
        offs[i] = l->v[i].is_leader ? l->durable : l->v[i].matched;
    qsort(offs, (size_t)l->n, sizeof offs[0], cmp_desc);
    return offs[l->n / 2];
}

/* quorum.next_high_watermark: only past the epoch's start, and only forwards. */
static void leader_advance(leader_lane *l)
{
    int64_t m = majority_offset(l);
    if (m <= l->epoch_start)
        return;
    if (l->has_hw && m <= l->hw)
        return;
    l->hw = m;
    l->has_hw = 1;
}

/* A Fetch: 1 when counted (*has_read: the answer has records to read, from fetch_offset), 0 to
 * hand over. `dir` is NULL when the fetch names no directory id. */
int leader_fetch(leader_lane *l, int32_t replica_id, const uint8_t *dir,
                 int64_t fetch_offset, int32_t last_fetched_epoch,
                 int32_t current_leader_epoch, int32_t max_wait_ms, int *has_read)
{
    lane_voter *v = NULL;
    int64_t floor = l->epoch_start > l->log_start ? l->epoch_start : l->log_start;
    if (current_leader_epoch != l->epoch || last_fetched_epoch != l->epoch)
        return 0;
    if (max_wait_ms < 0)
        return 0;
    if (!(floor < fetch_offset && fetch_offset <= l->log_end))
        return 0;
    for (int i = 0; i < l->n; i++) {
        if (!l->v[i].is_leader && l->v[i].id == replica_id) {
            v = &l->v[i];
            break;
        }
    }
    if (v == NULL || !v->has_key)
        return 0;
    if (v->key_has_dir != (dir != NULL))
        return 0;
    if (dir != NULL && memcmp(v->dir, dir, 16) != 0)
        return 0;
    if (fetch_offset < v->matched)
        return 0;
    v->matched = fetch_offset;
    leader_advance(l);
    *has_read = fetch_offset < l->log_end;
    return 1;
}

int leader_appended(leader_lane *l, int64_t base, int64_t last, int32_t epoch)
{
    if (base != l->log_end || epoch != l->epoch || last < base)
        return 0;
    l->log_end = last + 1;
    return 1;
}

void leader_persisted(leader_lane *l, int64_t end)
{
    if (end > l->log_end)
        end = l->log_end;
    if (end > l->durable) {
        l->durable = end;
        leader_advance(l);
    }
}

/* The leader's answer: 1 when taken (with n > 0, *first and *last: the records appended), 0 to
 * hand over. */
int follower_answer(follower_lane *f, int32_t correlation_id, int32_t error,
                    int32_t leader_id, int32_t leader_epoch, int64_t high_watermark,
                    int diverging, int snapshot, const lane_batch *b, Py_ssize_t n,
                    int64_t *first, int64_t *last)
{
    int64_t next = f->log_end;
    if (correlation_id != f->fetch_correlation)
        return 0;
    if (error != 0 || leader_id != f->leader_id || leader_epoch != f->epoch)
        return 0;
    if (diverging || snapshot)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (b[i].base_offset != next || b[i].last_offset < b[i].base_offset
            || b[i].epoch != f->epoch || b[i].is_control)
            return 0;
        next = b[i].last_offset + 1;
    }
    if (n > 0) {
        *first = f->log_end;
        *last = next - 1;
        f->log_end = next;
    }
    if (high_watermark >= 0) {
        int64_t hw = high_watermark < f->log_end ? high_watermark : f->log_end;
        f->leader_hw = high_watermark;
        if (!f->has_hw || hw > f->hw) {
            f->hw = hw;
            f->has_hw = 1;
        }
    }
    f->fetch_correlation = -1;
    return 1;
}

/* ---------------- LeaderLane */

static int LeaderLane_init(LeaderLaneObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"epoch", "epoch_start", "log_start", "log_end", "durable",
                         "high_watermark", "voters", NULL};
    PyObject *epoch, *epoch_start, *log_start, *log_end, *durable, *hw, *voters, *seq;
    leader_lane s;
    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO", kw, &epoch, &epoch_start,
                                     &log_start, &log_end, &durable, &hw, &voters))
        return -1;
    if (get_i32(epoch, "epoch", &s.epoch) < 0 || get_i64(epoch_start, "epoch_start", &s.epoch_start) < 0
        || get_i64(log_start, "log_start", &s.log_start) < 0 || get_i64(log_end, "log_end", &s.log_end) < 0
        || get_i64(durable, "durable", &s.durable) < 0
        || set_opt_i64(hw, "high_watermark", &s.has_hw, &s.hw) < 0)
        return -1;
    if (s.epoch < 0 || s.epoch >= LANE_EPOCH_LIMIT) {
        PyErr_Format(PyExc_ValueError, "a lease's epoch must be 0 to %d (below the epoch limit), "
                     "got %d", LANE_EPOCH_LIMIT - 1, (int)s.epoch);
        return -1;
    }
    seq = PySequence_Fast(voters, "voters must be a sequence of LeaseVoter");
    if (seq == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) > LANE_MAX_VOTERS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "a lease holds at most %d voters", LANE_MAX_VOTERS);
        return -1;
    }
    s.n = (int)PySequence_Fast_GET_SIZE(seq);
    for (int i = 0; i < s.n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i), *key, *leader;
        int64_t id;
        lane_voter *lv = &s.v[i];
        if (get_attr_i64(v, "id", &id) < 0 || get_attr_i64(v, "matched", &lv->matched) < 0)
            goto fail;
        if (id < INT32_MIN || id > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a voter id is an int32");
            goto fail;
        }
        lv->id = (int32_t)id;
        leader = PyObject_GetAttrString(v, "is_leader");
        if (leader == NULL)
            goto fail;
        lv->is_leader = PyObject_IsTrue(leader);
        Py_DECREF(leader);
        if (lv->is_leader < 0)
            goto fail;
        key = PyObject_GetAttrString(v, "key");
        if (key == NULL)
            goto fail;
        if (key != Py_None) {
            PyObject *dir = PyObject_GetAttrString(key, "directory_id");
            int64_t key_id;
            int r;
            if (dir == NULL || get_attr_i64(key, "id", &key_id) < 0) {
                Py_XDECREF(dir);
                Py_DECREF(key);
                goto fail;
            }
            r = get_dir(dir, lv->dir);
            Py_DECREF(dir);
            if (r < 0 || key_id != id) {
                if (r >= 0)
                    PyErr_SetString(PyExc_ValueError, "a voter's key names another replica id");
                Py_DECREF(key);
                goto fail;
            }
            lv->has_key = 1;
            lv->key_has_dir = r;
        }
        Py_DECREF(key);
    }
    Py_DECREF(seq);
    self->s = s;
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

static PyObject *LeaderLane_fetch(LeaderLaneObject *self, PyObject *args)
{
    PyObject *rid, *dir, *off, *lfe, *cle, *wait, *t, *out;
    int32_t replica_id, last_fetched_epoch, current_leader_epoch, max_wait_ms;
    int64_t fetch_offset;
    uint8_t raw[16];
    int has_dir, has_read = 0;
    if (!PyArg_ParseTuple(args, "OOOOOO", &rid, &dir, &off, &lfe, &cle, &wait))
        return NULL;
    if (get_i32(rid, "replica_id", &replica_id) < 0 || get_i64(off, "fetch_offset", &fetch_offset) < 0
        || get_i32(lfe, "last_fetched_epoch", &last_fetched_epoch) < 0
        || get_i32(cle, "current_leader_epoch", &current_leader_epoch) < 0
        || get_i32(wait, "max_wait_ms", &max_wait_ms) < 0)
        return NULL;
    has_dir = get_dir(dir, raw);
    if (has_dir < 0)
        return NULL;
    if (!leader_fetch(&self->s, replica_id, has_dir ? raw : NULL, fetch_offset,
                      last_fetched_epoch, current_leader_epoch, max_wait_ms, &has_read))
        Py_RETURN_NONE;
    t = lane_result("LaneFetch");
    if (t == NULL)
        return NULL;
    out = PyObject_CallFunction(t, "NN", opt_i64(self->s.has_hw, self->s.hw),
                                opt_i64(has_read, fetch_offset));
    Py_DECREF(t);
    return out;
}

static PyObject *LeaderLane_appended(LeaderLaneObject *self, PyObject *args)
{
    long long base, last;
    int epoch;
    if (!PyArg_ParseTuple(args, "LLi", &base, &last, &epoch))
        return NULL;
    return PyBool_FromLong(leader_appended(&self->s, base, last, epoch));
}

static PyObject *LeaderLane_persisted(LeaderLaneObject *self, PyObject *args)
{
    long long end;
    if (!PyArg_ParseTuple(args, "L", &end))
        return NULL;
    leader_persisted(&self->s, end);
    Py_RETURN_NONE;
}

static PyObject *LeaderLane_get_matched(LeaderLaneObject *self, void *closure)
{
    PyObject *t = PyTuple_New(self->s.n);
    (void)closure;
    if (t == NULL)
        return NULL;
    for (int i = 0; i < self->s.n; i++) {
        PyObject *x = PyLong_FromLongLong(self->s.v[i].matched);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

#define LEADER_GETTER(field)                                                                  \
    static PyObject *LeaderLane_get_##field(LeaderLaneObject *self, void *closure)            \
    {                                                                                        \
        (void)closure;                                                                       \
        return PyLong_FromLongLong((long long)self->s.field);                                \
    }
LEADER_GETTER(epoch)
LEADER_GETTER(epoch_start)
LEADER_GETTER(log_start)
LEADER_GETTER(log_end)
LEADER_GETTER(durable)

static PyObject *LeaderLane_get_hw(LeaderLaneObject *self, void *closure)
{
    (void)closure;
    return opt_i64(self->s.has_hw, self->s.hw);
}

static PyGetSetDef LeaderLane_getset[] = {
    {"epoch", (getter)LeaderLane_get_epoch, NULL, "the lease's epoch", NULL},
    {"epoch_start", (getter)LeaderLane_get_epoch_start, NULL, "the epoch's start offset", NULL},
    {"log_start", (getter)LeaderLane_get_log_start, NULL, "the log's start offset", NULL},
    {"log_end", (getter)LeaderLane_get_log_end, NULL, "the log's end offset", NULL},
    {"durable", (getter)LeaderLane_get_durable, NULL, "the leader's durable end", NULL},
    {"high_watermark", (getter)LeaderLane_get_hw, NULL, "the high watermark, or None", NULL},
    {"matched", (getter)LeaderLane_get_matched, NULL,
     "each voter's acknowledged offset, in the lease's order", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef LeaderLane_methods[] = {
    {"fetch", (PyCFunction)LeaderLane_fetch, METH_VARARGS,
     "fetch(replica_id, directory_id, fetch_offset, last_fetched_epoch, current_leader_epoch, "
     "max_wait_ms) -> LaneFetch | None"},
    {"appended", (PyCFunction)LeaderLane_appended, METH_VARARGS,
     "appended(base_offset, last_offset, epoch) -> bool"},
    {"persisted", (PyCFunction)LeaderLane_persisted, METH_VARARGS, "persisted(end_offset)"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject LeaderLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kraft.lane._native.LeaderLane",
    .tp_basicsize = sizeof(LeaderLaneObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A leader's lane: kraft.lane.rules.LeaderLane's rules in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LeaderLane_init,
    .tp_methods = LeaderLane_methods,
    .tp_getset = LeaderLane_getset,
};

/* ---------------- FollowerLane */

static int FollowerLane_init(FollowerLaneObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"epoch", "leader_id", "fetch_correlation", "log_end", "high_watermark",
                         NULL};
    PyObject *epoch, *leader, *corr, *log_end, *hw;
    follower_lane s;
    memset(&s, 0, sizeof s);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO", kw, &epoch, &leader, &corr, &log_end,
                                     &hw))
        return -1;
    if (get_i32(epoch, "epoch", &s.epoch) < 0 || get_i32(leader, "leader_id", &s.leader_id) < 0
        || get_i32(corr, "fetch_correlation", &s.fetch_correlation) < 0
        || get_i64(log_end, "log_end", &s.log_end) < 0
        || set_opt_i64(hw, "high_watermark", &s.has_hw, &s.hw) < 0)
        return -1;
    if (s.epoch < 0 || s.epoch >= LANE_EPOCH_LIMIT) {
        PyErr_Format(PyExc_ValueError, "a lease's epoch must be 0 to %d (below the epoch limit), "
                     "got %d", LANE_EPOCH_LIMIT - 1, (int)s.epoch);
        return -1;
    }
    s.leader_hw = -1;
    self->s = s;
    return 0;
}

static PyObject *FollowerLane_answer(FollowerLaneObject *self, PyObject *args)
{
    PyObject *corr, *err, *lid, *lep, *hwo, *div, *snap, *batches, *seq, *t, *out, *appended;
    int32_t correlation_id, error, leader_id, leader_epoch;
    int64_t high_watermark, first = -1, last = -1;
    int diverging, snapshot, taken;
    Py_ssize_t n;
    lane_batch *b;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &corr, &err, &lid, &lep, &hwo, &div, &snap, &batches))
        return NULL;
    if (get_i32(corr, "correlation_id", &correlation_id) < 0 || get_i32(err, "error", &error) < 0
        || get_i32(lid, "leader_id", &leader_id) < 0 || get_i32(lep, "leader_epoch", &leader_epoch) < 0
        || get_i64(hwo, "high_watermark", &high_watermark) < 0)
        return NULL;
    if ((diverging = PyObject_IsTrue(div)) < 0 || (snapshot = PyObject_IsTrue(snap)) < 0)
        return NULL;
    seq = PySequence_Fast(batches, "batches must be a sequence of FetchedBatch");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    b = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *b);
    if (b == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, i), *ctl;
        int64_t epoch;
        if (get_attr_i64(x, "base_offset", &b[i].base_offset) < 0
            || get_attr_i64(x, "last_offset", &b[i].last_offset) < 0
            || get_attr_i64(x, "epoch", &epoch) < 0)
            goto fail;
        if (epoch < INT32_MIN || epoch > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a batch's epoch is an int32");
            goto fail;
        }
        b[i].epoch = (int32_t)epoch;
        ctl = PyObject_GetAttrString(x, "is_control");
        if (ctl == NULL)
            goto fail;
        b[i].is_control = PyObject_IsTrue(ctl);
        Py_DECREF(ctl);
        if (b[i].is_control < 0)
            goto fail;
    }
    taken = follower_answer(&self->s, correlation_id, error, leader_id, leader_epoch,
                            high_watermark, diverging, snapshot, b, n, &first, &last);
    PyMem_Free(b);
    Py_DECREF(seq);
    if (!taken)
        Py_RETURN_NONE;
    if (n > 0)
        appended = Py_BuildValue("(LL)", (long long)first, (long long)last);
    else
        appended = Py_NewRef(Py_None);
    if (appended == NULL)
        return NULL;
    t = lane_result("LaneAnswer");
    if (t == NULL) {
        Py_DECREF(appended);
        return NULL;
    }
    out = PyObject_CallFunction(t, "NN", appended, opt_i64(self->s.has_hw, self->s.hw));
    Py_DECREF(t);
    return out;
fail:
    PyMem_Free(b);
    Py_DECREF(seq);
    return NULL;
}

#define FOLLOWER_GETTER(field)                                                                \
    static PyObject *FollowerLane_get_##field(FollowerLaneObject *self, void *closure)        \
    {                                                                                        \
        (void)closure;                                                                       \
        return PyLong_FromLongLong((long long)self->s.field);                                \
    }
FOLLOWER_GETTER(epoch)
FOLLOWER_GETTER(leader_id)
FOLLOWER_GETTER(log_end)
FOLLOWER_GETTER(fetch_correlation)

static int FollowerLane_set_fetch_correlation(FollowerLaneObject *self, PyObject *v, void *closure)
{
    (void)closure;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "fetch_correlation cannot be deleted");
        return -1;
    }
    return get_i32(v, "fetch_correlation", &self->s.fetch_correlation);
}

static PyObject *FollowerLane_get_hw(FollowerLaneObject *self, void *closure)
{
    (void)closure;
    return opt_i64(self->s.has_hw, self->s.hw);
}

static PyObject *FollowerLane_get_leader_hw(FollowerLaneObject *self, void *closure)
{
    (void)closure;
    return opt_i64(self->s.leader_hw >= 0, self->s.leader_hw);
}

static PyGetSetDef FollowerLane_getset[] = {
    {"epoch", (getter)FollowerLane_get_epoch, NULL, "the lease's epoch", NULL},
    {"leader_id", (getter)FollowerLane_get_leader_id, NULL, "the lease's leader", NULL},
    {"log_end", (getter)FollowerLane_get_log_end, NULL, "the log's end offset", NULL},
    {"fetch_correlation", (getter)FollowerLane_get_fetch_correlation,
     (setter)FollowerLane_set_fetch_correlation, "the correlation id of the fetch in flight", NULL},
    {"high_watermark", (getter)FollowerLane_get_hw, NULL, "the high watermark, or None", NULL},
    {"leader_high_watermark", (getter)FollowerLane_get_leader_hw, NULL,
     "the leader's high watermark as its last taken answer sent it, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef FollowerLane_methods[] = {
    {"answer", (PyCFunction)FollowerLane_answer, METH_VARARGS,
     "answer(correlation_id, error, leader_id, leader_epoch, high_watermark, diverging, "
     "snapshot, batches) -> LaneAnswer | None"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject FollowerLaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kraft.lane._native.FollowerLane",
    .tp_basicsize = sizeof(FollowerLaneObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A follower's lane: kraft.lane.rules.FollowerLane's rules in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FollowerLane_init,
    .tp_methods = FollowerLane_methods,
    .tp_getset = FollowerLane_getset,
};
