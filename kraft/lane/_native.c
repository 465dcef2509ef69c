/* kraft.lane._native: the native lane's rules in C (docs/native-lane.md, step 1b), and the
 * follower's reading of the leader's answers (step 2's first piece).
 *
 * The same rules as kraft/lane/rules.py, input for input: a leader counts its voters' plain
 * fetches at its tail, its appends and its own syncs, and moves the high watermark; a follower
 * takes the plain answers to its fetch in flight. Anything else is handed over (None), and a
 * handed-over input changes nothing. No I/O, no clock, no allocation on a decision: the
 * decisions are plain C functions over a fixed-size state (leader_fetch, leader_appended,
 * leader_persisted, follower_answer), which the lane's I/O shell is to call without the GIL.
 * The Python types around them exist so that the simulator and the tests can drive and check
 * them (kraft.sim.lane_shadow, tests/sim/test_lane_native.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LANE_MAX_VOTERS 64 /* a lease refuses larger sets: KRaft voter sets are a handful */

/* ------------------------------------------------------------------ the rules, plain C */

typedef struct {
    int32_t id;
    int has_key;       /* a replica whose fetches count for this voter */
    int key_has_dir;   /* that replica's directory id is known (else it fetches without one) */
    uint8_t dir[16];
    int is_leader;     /* the leader itself: its durable end counts */
    int64_t matched;   /* the offset the voter last acknowledged, -1 before any */
} lane_voter;

typedef struct {
    int32_t epoch;
    int64_t epoch_start, log_start, log_end, durable;
    int has_hw;
    int64_t hw;
    int n;
    lane_voter v[LANE_MAX_VOTERS];
} leader_lane;

typedef struct {
    int32_t epoch, leader_id, fetch_correlation;
    int64_t log_end;
    int has_hw;
    int64_t hw;        /* this follower's: the leader's, capped at the log's end */
    int64_t leader_hw; /* the leader's, as its last taken answer sent it; -1 before any */
} follower_lane;

typedef struct {
    int64_t base_offset, last_offset;
    int32_t epoch;
    int is_control;
} lane_batch;

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
static int leader_fetch(leader_lane *l, int32_t replica_id, const uint8_t *dir,
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

static int leader_appended(leader_lane *l, int64_t base, int64_t last, int32_t epoch)
{
    if (base != l->log_end || epoch != l->epoch || last < base)
        return 0;
    l->log_end = last + 1;
    return 1;
}

static void leader_persisted(leader_lane *l, int64_t end)
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
static int follower_answer(follower_lane *f, int32_t correlation_id, int32_t error,
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

/* ------------------------------------------------------------------ Python types */

static PyObject *lane_result(const char *name)
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

static int get_i64(PyObject *o, const char *what, int64_t *out)
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

static int get_i32(PyObject *o, const char *what, int32_t *out)
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

static int get_attr_i64(PyObject *o, const char *name, int64_t *out)
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
static int get_dir(PyObject *o, uint8_t out[16])
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

static PyObject *opt_i64(int has, int64_t x)
{
    if (!has)
        Py_RETURN_NONE;
    return PyLong_FromLongLong((long long)x);
}

static int set_opt_i64(PyObject *o, const char *what, int *has, int64_t *x)
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

/* ---------------- LeaderLane */

typedef struct {
    PyObject_HEAD
    leader_lane s;
} LeaderLaneObject;

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
    seq = PySequence_Fast(voters, "voters must be a sequence of LaneVoter");
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

static PyTypeObject LeaderLaneType = {
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

typedef struct {
    PyObject_HEAD
    follower_lane s;
} FollowerLaneObject;

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

static PyTypeObject FollowerLaneType = {
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


/* ------------------------------------------------------------------ a leader's answer, as bytes */

/* The follower's lane reads the leader's answers itself (step 2). This is its reading of a
 * Fetch v17/v18 response frame (header v1 and body, no size prefix): the plain answer of the
 * voters' shape (kraft.server.fetch_fast's), and nothing else. It accepts a frame only when:
 *   - it answers `correlation_id`, with no header tags and no top-level error;
 *   - one topic (the metadata topic id), one partition (0), with no error;
 *   - no aborted transactions, no divergence and no snapshot id named, no unknown tag, no
 *     leader endpoints;
 *   - every record batch is whole, of magic 2, with a possible header, not a control batch, and
 *     its CRC-32C checks out.
 * Anything else is handed over (0): the general path decodes it, and reports what is wrong. */

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[i] = c;
    }
}

static uint32_t crc32c_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    while (n--)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p,
                                                             size_t n)
{
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--)
        crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
static int crc_hw;
#endif

/* CRC-32C (Castagnoli) of `n` bytes, as record batch v2 stores it. */
static uint32_t crc32c(const uint8_t *p, size_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw)
        return ~crc32c_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc32c_soft(0xFFFFFFFFu, p, n);
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

/* An unsigned varint of at most 5 bytes that fits 32 bits (primitives.decode_uvarint). */
static int read_uvarint(const uint8_t *f, size_t len, size_t *pos, uint32_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        uint8_t b;
        if (*pos >= len)
            return 0;
        b = f[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (v > 0xFFFFFFFFu)
                return 0;
            *out = (uint32_t)v;
            return 1;
        }
    }
    return 0;
}

typedef struct {
    int32_t leader_id, leader_epoch;
    int64_t high_watermark, log_start;
} fetch_answer;

typedef struct {
    int64_t base_offset, last_offset;
    int32_t epoch;
    size_t pos, size;
} frame_batch;

static const uint8_t METADATA_TOPIC_ID[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

#define BATCH_HEADER 61
#define LOG_OVERHEAD 12

/* The batch at `pos` of `f` (which ends at `end`): 1 when it is whole, its header possible
 * (batch._check_header_fields) and its CRC-32C good, with its fields in `b` and its attributes
 * and max timestamp in the optional outputs; 0 otherwise. */
static int whole_batch(const uint8_t *f, size_t pos, size_t end, frame_batch *b,
                       uint16_t *attributes_out, int64_t *max_ts_out)
{
    const uint8_t *h = f + pos;
    int64_t base, last_delta;
    int32_t length, count;
    uint16_t attributes;
    if (end - pos < BATCH_HEADER)
        return 0;
    base = (int64_t)be64(h);
    length = (int32_t)be32(h + 8);
    attributes = be16(h + 21);
    last_delta = (int32_t)be32(h + 23);
    count = (int32_t)be32(h + 57);
    if (length < BATCH_HEADER - LOG_OVERHEAD || h[16] != 2 || count < 0 || base < 0)
        return 0;
    if ((attributes & 0x07) == 0
        && (int64_t)count * 7 > (int64_t)length + LOG_OVERHEAD - BATCH_HEADER)
        return 0;
    if (last_delta < 0 || (count > 0 && last_delta < (int64_t)count - 1))
        return 0;
    if ((size_t)length + LOG_OVERHEAD > end - pos)
        return 0;
    if (crc32c(h + 21, (size_t)length + LOG_OVERHEAD - 21) != be32(h + 17))
        return 0;
    b->base_offset = base;
    b->last_offset = base + last_delta;
    b->epoch = (int32_t)be32(h + 12);
    b->pos = pos;
    b->size = (size_t)length + LOG_OVERHEAD;
    if (attributes_out != NULL)
        *attributes_out = attributes;
    if (max_ts_out != NULL)
        *max_ts_out = (int64_t)be64(h + 35);
    return 1;
}

/* One batch of a leader's answer at `pos` of `f` (which ends at `end`): 1 when whole and
 * valid and not a control batch (those are the core's), 0 otherwise. */
static int read_batch(const uint8_t *f, size_t pos, size_t end, frame_batch *b)
{
    uint16_t attributes;
    return whole_batch(f, pos, end, b, &attributes, NULL) && !(attributes & 0x20);
}

/* The plain answer in `f`: 1 with its fields and batches (at most `max` of them; *n set), 0 to
 * hand over. */
static int read_fetch_answer(const uint8_t *f, size_t len, int32_t correlation_id,
                             fetch_answer *a, frame_batch *batches, size_t max, size_t *n)
{
    size_t pos, rend;
    uint32_t rlen;
    int last_tag = -1;
    uint8_t count;
    *n = 0;
    if (len < 68)
        return 0;
    /* header: correlation id, no tags; ThrottleTimeMs, ErrorCode, SessionId; one topic */
    if ((int32_t)be32(f) != correlation_id || f[4] != 0 || be16(f + 9) != 0 || f[15] != 2
        || memcmp(f + 16, METADATA_TOPIC_ID, 16) != 0)
        return 0;
    /* one partition: index 0, no error; HighWatermark, LastStableOffset, LogStartOffset */
    if (f[32] != 2 || be32(f + 33) != 0 || be16(f + 37) != 0)
        return 0;
    a->high_watermark = (int64_t)be64(f + 39);
    a->log_start = (int64_t)be64(f + 55);
    if (f[63] > 1) /* aborted transactions: null or none */
        return 0;
    pos = 68; /* and the preferred read replica */
    if (!read_uvarint(f, len, &pos, &rlen))
        return 0;
    rend = pos;
    if (rlen > 0) {
        if ((size_t)rlen - 1 > len - pos)
            return 0;
        rend = pos + rlen - 1;
    }
    while (pos < rend) {
        if (*n == max || !read_batch(f, pos, rend, &batches[*n]))
            return 0;
        pos += batches[*n].size;
        (*n)++;
    }
    a->leader_id = a->leader_epoch = -1;
    if (pos >= len)
        return 0;
    count = f[pos++];
    for (int i = 0; i < count; i++) {
        uint8_t tag, size;
        if (len - pos < 2)
            return 0;
        tag = f[pos];
        size = f[pos + 1];
        pos += 2;
        if ((int)tag <= last_tag || len - pos < size)
            return 0;
        last_tag = tag;
        if (tag == 0 && size == 13) { /* DivergingEpoch: Epoch, EndOffset */
            if (f[pos + 12] != 0)
                return 0;
            if ((int32_t)be32(f + pos) >= 0 && (int64_t)be64(f + pos + 4) >= 0)
                return 0;
        } else if (tag == 1 && size == 9) { /* CurrentLeader: LeaderId, LeaderEpoch */
            if (f[pos + 8] != 0)
                return 0;
            a->leader_id = (int32_t)be32(f + pos);
            a->leader_epoch = (int32_t)be32(f + pos + 4);
        } else if (tag == 2 && size == 13) { /* SnapshotId: EndOffset, Epoch */
            if (f[pos + 12] != 0)
                return 0;
            if ((int64_t)be64(f + pos) >= 0 && (int32_t)be32(f + pos + 8) >= 0)
                return 0;
        } else {
            return 0;
        }
        pos += size;
    }
    /* no topic tags, and no top-level tags (NodeEndpoints is the general path's) */
    if (len - pos != 2 || f[pos] != 0 || f[pos + 1] != 0)
        return 0;
    return 1;
}

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
        if (!whole_batch(b, pos, len, &fb, NULL, &max_ts))
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


/* ------------------------------------------------------------------ the follower's next fetch */

/* The follower's lane acknowledges by sending its next Fetch itself (step 2). This writes that
 * request frame (header v2 and body, no size prefix), byte for byte what
 * kraft.server.fetch_fast.encode_fetch_request writes for the voters' shape. What stays the
 * same from one fetch to the next (version, client id, cluster id, replica id and directory
 * id) is the template; the rest is each fetch's own. */

#define FETCH_HW_NOT_PROVIDED INT64_MAX
#define FETCH_TEMPLATE_TEXT 512

typedef struct {
    int16_t version;
    int has_client_id;
    size_t client_id_len;
    char client_id[FETCH_TEMPLATE_TEXT];
    size_t cluster_id_len;
    char cluster_id[FETCH_TEMPLATE_TEXT];
    int32_t replica_id;
    int has_dir;
    uint8_t dir[16];
} fetch_template;

typedef struct {
    uint8_t *p, *end;
} writer;

static void put(writer *w, const void *src, size_t n)
{
    if (w->p != NULL && (size_t)(w->end - w->p) >= n) {
        memcpy(w->p, src, n);
        w->p += n;
    } else {
        w->p = NULL; /* too small: the caller sees 0 */
    }
}

static void put8(writer *w, uint8_t x) { put(w, &x, 1); }
static void put16(writer *w, int16_t x)
{
    uint8_t b[2] = {(uint8_t)((uint16_t)x >> 8), (uint8_t)x};
    put(w, b, 2);
}
static void put32(writer *w, int32_t x)
{
    uint32_t u = (uint32_t)x;
    uint8_t b[4] = {(uint8_t)(u >> 24), (uint8_t)(u >> 16), (uint8_t)(u >> 8), (uint8_t)u};
    put(w, b, 4);
}
static void put64(writer *w, int64_t x)
{
    put32(w, (int32_t)((uint64_t)x >> 32));
    put32(w, (int32_t)(uint32_t)(uint64_t)x);
}
static void put_uvarint(writer *w, uint32_t v)
{
    while (v >= 0x80) {
        put8(w, (uint8_t)((v & 0x7f) | 0x80));
        v >>= 7;
    }
    put8(w, (uint8_t)v);
}
static size_t uvarint_size(uint32_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The frame into out[0..cap): its length, or 0 when it does not fit or the version is not
 * 17 or 18. */
static size_t write_fetch_request(uint8_t *out, size_t cap, const fetch_template *t,
                                  int32_t correlation_id, int32_t max_wait_ms, int32_t max_bytes,
                                  int32_t current_leader_epoch, int64_t fetch_offset,
                                  int32_t last_fetched_epoch, int64_t high_watermark)
{
    writer w = {out, out + cap};
    int64_t hw = t->version >= 18 ? high_watermark : FETCH_HW_NOT_PROVIDED;
    uint32_t cid_field = (uint32_t)t->cluster_id_len + 1;
    if (t->version != 17 && t->version != 18)
        return 0;
    put16(&w, 1); /* Fetch */
    put16(&w, t->version);
    put32(&w, correlation_id);
    if (t->has_client_id) {
        put16(&w, (int16_t)t->client_id_len);
        put(&w, t->client_id, t->client_id_len);
    } else {
        put16(&w, -1);
    }
    put8(&w, 0); /* header tagged fields */
    put32(&w, max_wait_ms);
    put32(&w, 0); /* MinBytes */
    put32(&w, max_bytes);
    put8(&w, 0);   /* IsolationLevel */
    put32(&w, 0);  /* SessionId */
    put32(&w, -1); /* SessionEpoch */
    put8(&w, 2);   /* one topic */
    put(&w, METADATA_TOPIC_ID, 16);
    put8(&w, 2); /* one partition */
    put32(&w, 0);
    put32(&w, current_leader_epoch);
    put64(&w, fetch_offset);
    put32(&w, last_fetched_epoch);
    put64(&w, -1); /* LogStartOffset */
    put32(&w, 0);  /* PartitionMaxBytes */
    put8(&w, (uint8_t)(t->has_dir + (hw != FETCH_HW_NOT_PROVIDED)));
    if (t->has_dir) {
        put8(&w, 0);
        put8(&w, 16);
        put(&w, t->dir, 16);
    }
    if (hw != FETCH_HW_NOT_PROVIDED) {
        put8(&w, 1);
        put8(&w, 8);
        put64(&w, hw);
    }
    put8(&w, 0); /* topic tagged fields */
    put8(&w, 1); /* no forgotten topics */
    put8(&w, 1); /* empty rack id */
    put8(&w, t->replica_id == -1 ? 1 : 2);
    put8(&w, 0); /* ClusterId */
    put_uvarint(&w, (uint32_t)(uvarint_size(cid_field) + t->cluster_id_len));
    put_uvarint(&w, cid_field);
    put(&w, t->cluster_id, t->cluster_id_len);
    if (t->replica_id != -1) {
        put8(&w, 1); /* ReplicaState: ReplicaId, ReplicaEpoch, no tags */
        put8(&w, 13);
        put32(&w, t->replica_id);
        put64(&w, -1);
        put8(&w, 0);
    }
    return w.p == NULL ? 0 : (size_t)(w.p - out);
}

static int get_text(PyObject *o, const char *what, char *out, size_t *len, int *present)
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


/* The follower lane's whole decision on one answer, timed in C (bench/bench_lane.py): read the
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


/* ------------------------------------------------------------------ the follower's I/O loop */

/* FollowerShell: the follower lane's loop on its own thread (step 2), over a connected socket
 * to the leader and the active segment's descriptor, with no Python and no GIL:
 *   read a size-prefixed frame -> read_fetch_answer -> follower_answer -> pwrite the batches at
 *   the write position and fdatasync them -> write_fetch_request -> send it.
 * The next fetch (the acknowledgement) leaves only once the batches are durable (rule 5). The
 * loop stops at the first frame it does not take (handover), when asked to (stop), when the
 * leader closes the connection, or on an I/O error; what it read and did not take is kept for
 * the caller. Its end is signalled on a pipe the caller can watch, and progress() reads what
 * it has made durable while it runs. The node runs it (kraft/lane/follower.py). The
 * socket and the log descriptor stay the caller's: the loop never closes them. */

enum { SHELL_IDLE, SHELL_RUNNING, SHELL_HANDOVER, SHELL_STOPPED, SHELL_CLOSED, SHELL_ERROR };
static const char *const shell_reasons[] = {"idle", "running", "handover", "stopped", "closed",
                                            "error"};

#define SHELL_MAX_FRAME (16 * 1024 * 1024)

/* What both loops share: their thread, the pipe that stops it, the pipe that says it ended, and
 * how it ended. */
typedef struct {
    int stop_pipe[2], done_pipe[2];
    int pipes_open;
    pthread_t thread;
    int started, joined;
    int state, error;
    const char *error_at;
} shell_thread;

static int thread_fail(shell_thread *t, const char *at)
{
    t->error = errno;
    t->error_at = at;
    t->state = SHELL_ERROR;
    return 0;
}

/* The two pipes, once (-1 with the Python error set). */
static int thread_open(shell_thread *t)
{
    if (t->pipes_open)
        return 0;
    if (pipe(t->stop_pipe) != 0)
        return PyErr_SetFromErrno(PyExc_OSError), -1;
    if (pipe(t->done_pipe) != 0) {
        close(t->stop_pipe[0]);
        close(t->stop_pipe[1]);
        return PyErr_SetFromErrno(PyExc_OSError), -1;
    }
    t->pipes_open = 1;
    t->state = SHELL_IDLE;
    return 0;
}

static PyObject *thread_start(shell_thread *t, void *(*run)(void *), void *arg, const char *what)
{
    int err;
    if (!t->pipes_open) {
        PyErr_Format(PyExc_RuntimeError, "the %s was not set up", what);
        return NULL;
    }
    if (t->started) {
        PyErr_Format(PyExc_RuntimeError, "a %s runs once", what);
        return NULL;
    }
    t->state = SHELL_RUNNING;
    err = pthread_create(&t->thread, NULL, run, arg);
    if (err != 0) {
        t->state = SHELL_IDLE;
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    t->started = 1;
    Py_RETURN_NONE;
}

/* Called by the loop as it ends. */
static void thread_done(shell_thread *t)
{
    uint8_t one = 1;
    ssize_t ignored = write(t->done_pipe[1], &one, 1);
    (void)ignored;
}

/* Ask the loop to end if it runs, and wait for its thread (without the GIL). */
static void thread_join(shell_thread *t)
{
    if (t->started && !t->joined) {
        uint8_t one = 1;
        ssize_t ignored = write(t->stop_pipe[1], &one, 1);
        (void)ignored;
        Py_BEGIN_ALLOW_THREADS
        pthread_join(t->thread, NULL);
        Py_END_ALLOW_THREADS
        t->joined = 1;
    }
}

static void thread_close(shell_thread *t)
{
    thread_join(t);
    if (t->pipes_open) {
        for (int i = 0; i < 2; i++) {
            close(t->stop_pipe[i]);
            close(t->done_pipe[i]);
        }
        t->pipes_open = 0;
    }
}

typedef struct {
    PyObject_HEAD
    int sock, log_fd;
    int64_t write_pos, write_limit;
    int32_t last_epoch, next_correlation, max_wait_ms, max_bytes;
    follower_lane lane;
    fetch_template tmpl;
    uint8_t *in;
    size_t in_len, in_cap;
    shell_thread t;
    int64_t answers, records;
    /* What the loop has made durable, and the fetch that acknowledges it, for progress()
     * while it runs: the loop updates it under the lock just before that fetch leaves. */
    pthread_mutex_t lock;
    int lock_ready;
    int64_t p_answers, p_log_end, p_write_pos;
    int32_t p_last_epoch, p_fetch_correlation;
    int p_has_hw;
    int64_t p_hw, p_leader_hw;
    /* a byte here when an answer with no records moved the high watermark (KIP-1166's
     * answer), or when the loop wrote records while the node's core loop slept (`waiting`):
     * the node takes the progress at once, not at its next tick */
    int news_pipe[2];
    int news_open;
    /* set by the node (waiting()) while its core loop sleeps, taken by the loop's next write
     * of records: the node adopts them while the acknowledgement is on its way, so the
     * answer that commits them finds its core ready (and its caches warm) */
    int node_waiting;
} FollowerShellObject;

/* The progress fields from the loop's own (under the lock). */
static void shell_publish(FollowerShellObject *sh)
{
    pthread_mutex_lock(&sh->lock);
    sh->p_answers = sh->answers;
    sh->p_log_end = sh->lane.log_end;
    sh->p_write_pos = sh->write_pos;
    sh->p_last_epoch = sh->last_epoch;
    sh->p_fetch_correlation = sh->lane.fetch_correlation;
    sh->p_has_hw = sh->lane.has_hw;
    sh->p_hw = sh->lane.hw;
    sh->p_leader_hw = sh->lane.leader_hw;
    pthread_mutex_unlock(&sh->lock);
}

/* Send all of p[0..n) on a non-blocking socket, waiting while it is full; -1 on an error, or
 * (with stop_fd >= 0) when stop_fd becomes readable meanwhile (errno ECANCELED): a peer that
 * does not read its answers does not keep the loop from stopping. */
static int send_all_or_stop(int sock, const uint8_t *p, size_t n, int stop_fd)
{
    while (n > 0) {
        ssize_t w = send(sock, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pf[2] = {{sock, POLLOUT, 0}, {stop_fd, POLLIN, 0}};
                if (poll(pf, stop_fd >= 0 ? 2 : 1, 1000) > 0 && stop_fd >= 0 && pf[1].revents) {
                    errno = ECANCELED;
                    return -1;
                }
                continue;
            }
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int shell_send_all(int sock, const uint8_t *p, size_t n)
{
    return send_all_or_stop(sock, p, n, -1);
}

/* Take every whole frame at the head of the input: 1 to go on reading, 0 when the loop ends
 * (state set). */
static int shell_take_frames(FollowerShellObject *sh)
{
    frame_batch batches[256];
    lane_batch lb[256];
    uint8_t out[2048];
    while (sh->in_len >= 4) {
        uint32_t size = be32(sh->in);
        const uint8_t *frame = sh->in + 4;
        fetch_answer a;
        size_t n = 0, len;
        int64_t first = -1, last = -1;
        if (size > SHELL_MAX_FRAME) {
            sh->t.state = SHELL_HANDOVER; /* the general path names the bad size */
            return 0;
        }
        if (sh->in_len - 4 < size)
            return 1; /* the rest of the frame is still on its way */
        if (!read_fetch_answer(frame, size, sh->lane.fetch_correlation, &a, batches, 256, &n)) {
            sh->t.state = SHELL_HANDOVER;
            return 0;
        }
        for (size_t k = 0; k < n; k++) {
            lb[k].base_offset = batches[k].base_offset;
            lb[k].last_offset = batches[k].last_offset;
            lb[k].epoch = batches[k].epoch;
            lb[k].is_control = 0;
        }
        int hw_moved;
        {
            follower_lane trial = sh->lane;
            if (!follower_answer(&trial, sh->lane.fetch_correlation, 0, a.leader_id,
                                 a.leader_epoch, a.high_watermark, 0, 0, lb, (Py_ssize_t)n,
                                 &first, &last)) {
                sh->t.state = SHELL_HANDOVER;
                return 0;
            }
            if (n > 0) {
                size_t from = batches[0].pos, bytes = batches[n - 1].pos + batches[n - 1].size - from;
                size_t done = 0;
                if (sh->write_pos + (int64_t)bytes > sh->write_limit) {
                    sh->t.state = SHELL_HANDOVER; /* no room: the segment rolls in Python */
                    return 0;
                }
                while (done < bytes) {
                    ssize_t w = pwrite(sh->log_fd, frame + from + done, bytes - done,
                                       (off_t)(sh->write_pos + (int64_t)done));
                    if (w < 0 && errno == EINTR)
                        continue;
                    if (w <= 0) {
                        sh->t.error = w < 0 ? errno : EIO;
                        sh->t.error_at = "write";
                        sh->t.state = SHELL_ERROR;
                        return 0;
                    }
                    done += (size_t)w;
                }
                if (fdatasync(sh->log_fd) != 0) {
                    sh->t.error = errno;
                    sh->t.error_at = "fdatasync";
                    sh->t.state = SHELL_ERROR;
                    return 0;
                }
                sh->write_pos += (int64_t)bytes;
                sh->last_epoch = batches[n - 1].epoch;
                sh->records += last - first + 1;
            }
            hw_moved = n == 0 && trial.has_hw
                       && (!sh->lane.has_hw || trial.hw != sh->lane.hw);
            sh->lane = trial;
        }
        len = write_fetch_request(out, sizeof out - 4, &sh->tmpl, sh->next_correlation,
                                  sh->max_wait_ms, sh->max_bytes, sh->lane.epoch,
                                  sh->lane.log_end, sh->last_epoch,
                                  sh->lane.has_hw ? sh->lane.hw : -1);
        if (len == 0) {
            sh->t.error = EMSGSIZE;
            sh->t.error_at = "fetch";
            sh->t.state = SHELL_ERROR;
            return 0;
        }
        memmove(out + 4, out, len);
        out[0] = (uint8_t)(len >> 24);
        out[1] = (uint8_t)(len >> 16);
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        sh->lane.fetch_correlation = sh->next_correlation++;
        memmove(sh->in, sh->in + 4 + size, sh->in_len - 4 - size);
        sh->in_len -= 4 + (size_t)size;
        sh->answers++;
        shell_publish(sh);
        if (shell_send_all(sh->sock, out, len + 4) != 0) {
            sh->t.error = errno;
            sh->t.error_at = "send";
            sh->t.state = SHELL_ERROR;
            return 0;
        }
        /* the news after the fetch: the node's thread that the byte wakes may take this CPU,
         * and the acknowledgement must not wait for it */
        if ((hw_moved || (n > 0 && __atomic_exchange_n(&sh->node_waiting, 0, __ATOMIC_SEQ_CST)))
            && sh->news_open) {
            uint8_t one = 1;
            ssize_t ignored = write(sh->news_pipe[1], &one, 1); /* full: news already there */
            (void)ignored;
        }
    }
    return 1;
}

static void *shell_run(void *arg)
{
    FollowerShellObject *sh = arg;
    struct pollfd pf[2];
    for (;;) {
        pf[0].fd = sh->sock;
        pf[0].events = POLLIN;
        pf[1].fd = sh->t.stop_pipe[0];
        pf[1].events = POLLIN;
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            sh->t.error = errno;
            sh->t.error_at = "poll";
            sh->t.state = SHELL_ERROR;
            break;
        }
        if (pf[1].revents) {
            sh->t.state = SHELL_STOPPED;
            break;
        }
        if (pf[0].revents) {
            ssize_t r;
            if (sh->in_cap - sh->in_len < 65536) {
                size_t cap = sh->in_cap * 2;
                uint8_t *bigger;
                if (cap > 2 * (size_t)SHELL_MAX_FRAME + 65536) {
                    sh->t.state = SHELL_HANDOVER;
                    break;
                }
                bigger = realloc(sh->in, cap);
                if (bigger == NULL) {
                    sh->t.error = ENOMEM;
                    sh->t.error_at = "buffer";
                    sh->t.state = SHELL_ERROR;
                    break;
                }
                sh->in = bigger;
                sh->in_cap = cap;
            }
            r = recv(sh->sock, sh->in + sh->in_len, sh->in_cap - sh->in_len, 0);
            if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
                continue;
            if (r < 0 && errno == ECONNRESET) { /* the leader went away with bytes unread */
                sh->t.state = SHELL_CLOSED;
                break;
            }
            if (r < 0) {
                sh->t.error = errno;
                sh->t.error_at = "recv";
                sh->t.state = SHELL_ERROR;
                break;
            }
            if (r == 0) {
                sh->t.state = SHELL_CLOSED;
                break;
            }
            sh->in_len += (size_t)r;
            if (!shell_take_frames(sh))
                break;
        }
    }
    thread_done(&sh->t);
    return NULL;
}

static void FollowerShell_dealloc(FollowerShellObject *self)
{
    thread_close(&self->t);
    if (self->news_open) {
        close(self->news_pipe[0]);
        close(self->news_pipe[1]);
        self->news_open = 0;
    }
    if (self->lock_ready)
        pthread_mutex_destroy(&self->lock);
    free(self->in);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int FollowerShell_init(FollowerShellObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"sock", "log_fd", "write_pos", "lane", "last_epoch",
                         "next_correlation", "version", "client_id", "cluster_id", "replica_id",
                         "directory_id", "max_wait_ms", "max_bytes", "write_limit", NULL};
    PyObject *lane, *client, *cluster, *dir;
    int sock, log_fd, last_epoch, next_corr, version, replica, max_wait, max_bytes;
    long long write_pos, write_limit = INT64_MAX;
    if (self->t.started) {
        PyErr_SetString(PyExc_RuntimeError, "a FollowerShell is set up once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiLOiiiOOiOii|L", kw, &sock, &log_fd,
                                     &write_pos, &lane, &last_epoch, &next_corr, &version,
                                     &client, &cluster, &replica, &dir, &max_wait, &max_bytes,
                                     &write_limit))
        return -1;
    if (write_limit < write_pos) {
        PyErr_SetString(PyExc_ValueError, "write_limit must not be below write_pos");
        return -1;
    }
    if (!PyObject_TypeCheck(lane, &FollowerLaneType)) {
        PyErr_SetString(PyExc_TypeError, "lane must be a kraft.lane._native.FollowerLane");
        return -1;
    }
    if (sock < 0 || log_fd < 0 || write_pos < 0) {
        PyErr_SetString(PyExc_ValueError, "sock, log_fd and write_pos must not be negative");
        return -1;
    }
    if (version != 17 && version != 18) {
        PyErr_Format(PyExc_ValueError, "version must be 17 or 18, not %d", version);
        return -1;
    }
    memset(&self->tmpl, 0, sizeof self->tmpl);
    if (get_text(client, "client_id", self->tmpl.client_id, &self->tmpl.client_id_len,
                 &self->tmpl.has_client_id) < 0
        || get_text(cluster, "cluster_id", self->tmpl.cluster_id, &self->tmpl.cluster_id_len,
                    NULL) < 0)
        return -1;
    self->tmpl.has_dir = get_dir(dir, self->tmpl.dir);
    if (self->tmpl.has_dir < 0)
        return -1;
    if (self->tmpl.has_dir) {
        static const uint8_t zero[16];
        self->tmpl.has_dir = memcmp(self->tmpl.dir, zero, 16) != 0;
    }
    self->tmpl.version = (int16_t)version;
    self->tmpl.replica_id = replica;
    self->sock = sock;
    self->log_fd = log_fd;
    self->write_pos = write_pos;
    self->write_limit = write_limit;
    self->lane = ((FollowerLaneObject *)lane)->s;
    self->last_epoch = last_epoch;
    self->next_correlation = next_corr;
    self->max_wait_ms = max_wait;
    self->max_bytes = max_bytes;
    self->node_waiting = 0;
    if (self->in == NULL) {
        self->in_cap = 1 << 17;
        self->in = malloc(self->in_cap);
        if (self->in == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    if (!self->lock_ready) {
        if (pthread_mutex_init(&self->lock, NULL) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_mutex_init failed");
            return -1;
        }
        self->lock_ready = 1;
    }
    shell_publish(self);
    if (!self->news_open) {
        if (pipe(self->news_pipe) != 0)
            return PyErr_SetFromErrno(PyExc_OSError), -1;
        for (int i = 0; i < 2; i++) {
            fcntl(self->news_pipe[i], F_SETFL, O_NONBLOCK);
            fcntl(self->news_pipe[i], F_SETFD, FD_CLOEXEC);
        }
        self->news_open = 1;
    }
    return thread_open(&self->t);
}

static PyObject *FollowerShell_start(FollowerShellObject *self, PyObject *unused)
{
    (void)unused;
    return thread_start(&self->t, shell_run, self, "FollowerShell");
}

static PyObject *FollowerShell_report(FollowerShellObject *self)
{
    return Py_BuildValue(
        "{s:s,s:L,s:L,s:L,s:L,s:N,s:N,s:i,s:i,s:i,s:y#,s:i,s:s}",
        "reason", shell_reasons[self->t.state], "answers", (long long)self->answers,
        "records", (long long)self->records, "log_end", (long long)self->lane.log_end,
        "write_pos", (long long)self->write_pos, "high_watermark",
        opt_i64(self->lane.has_hw, self->lane.hw), "leader_high_watermark",
        opt_i64(self->lane.leader_hw >= 0, self->lane.leader_hw), "last_epoch", (int)self->last_epoch,
        "fetch_correlation", (int)self->lane.fetch_correlation, "next_correlation",
        (int)self->next_correlation, "unread", self->in ? (const char *)self->in : "",
        (Py_ssize_t)self->in_len, "error", self->t.error, "error_at", self->t.error_at ? self->t.error_at : "");
}

static PyObject *FollowerShell_progress(FollowerShellObject *self, PyObject *unused)
{
    int64_t answers, log_end, write_pos, hw, leader_hw;
    int32_t last_epoch, corr;
    int has_hw;
    (void)unused;
    if (!self->lock_ready) {
        PyErr_SetString(PyExc_RuntimeError, "the FollowerShell was not set up");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    answers = self->p_answers;
    log_end = self->p_log_end;
    write_pos = self->p_write_pos;
    last_epoch = self->p_last_epoch;
    corr = self->p_fetch_correlation;
    has_hw = self->p_has_hw;
    hw = self->p_hw;
    leader_hw = self->p_leader_hw;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(LLLNiiN)", (long long)answers, (long long)log_end,
                         (long long)write_pos, opt_i64(has_hw, hw), (int)last_epoch, (int)corr,
                         opt_i64(leader_hw >= 0, leader_hw));
}

static PyObject *FollowerShell_stop(FollowerShellObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->t.started) {
        PyErr_SetString(PyExc_RuntimeError, "the FollowerShell was not started");
        return NULL;
    }
    thread_join(&self->t);
    return FollowerShell_report(self);
}

static PyObject *FollowerShell_get_done_fd(FollowerShellObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->t.pipes_open ? self->t.done_pipe[0] : -1);
}

static PyObject *FollowerShell_get_news_fd(FollowerShellObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->news_open ? self->news_pipe[0] : -1);
}

static PyGetSetDef FollowerShell_getset[] = {
    {"done_fd", (getter)FollowerShell_get_done_fd, NULL,
     "a descriptor that becomes readable when the loop has ended", NULL},
    {"news_fd", (getter)FollowerShell_get_news_fd, NULL,
     "a descriptor that becomes readable when an answer with no records moved the high "
     "watermark (read it empty, then take progress())", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *FollowerShell_waiting(FollowerShellObject *self, PyObject *arg)
{
    int flag = PyObject_IsTrue(arg);
    if (flag < 0)
        return NULL;
    __atomic_store_n(&self->node_waiting, flag, __ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

static PyMethodDef FollowerShell_methods[] = {
    {"start", (PyCFunction)FollowerShell_start, METH_NOARGS, "start the loop on its thread"},
    {"waiting", (PyCFunction)FollowerShell_waiting, METH_O,
     "waiting(flag): the node's core loop sleeps (True) or runs (False); while it sleeps, the "
     "loop's next write of records also puts a byte on news_fd (once)"},
    {"stop", (PyCFunction)FollowerShell_stop, METH_NOARGS,
     "end the loop (if it runs), wait for its thread, and return its report"},
    {"progress", (PyCFunction)FollowerShell_progress, METH_NOARGS,
     "what the loop has made durable and acknowledged so far, while it runs: (answers, "
     "log_end, write_pos, high_watermark, last_epoch, fetch_correlation, "
     "leader_high_watermark): high_watermark is this follower's (capped at its log's end), "
     "leader_high_watermark the leader's as its last taken answer sent it"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FollowerShellType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kraft.lane._native.FollowerShell",
    .tp_basicsize = sizeof(FollowerShellObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The follower lane's I/O loop on its own thread (docs/native-lane.md, step 2).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FollowerShell_init,
    .tp_dealloc = (destructor)FollowerShell_dealloc,
    .tp_methods = FollowerShell_methods,
    .tp_getset = FollowerShell_getset,
};


/* ------------------------------------------------------------------ the leader's wire (step 3) */

/* The leader's lane reads its voters' fetches and writes their answers itself (step 3). These
 * are its reading of a Fetch v17/v18 request frame (header v2 and body, no size prefix) and its
 * writing of a plain answer, each the same as kraft.server.fetch_fast's for the voters' shape.
 * The reading is stricter than the Python decoder: the client id must be ASCII (or null), the
 * rack id empty, and a replica state present; anything else is handed over (0). */

typedef struct {
    int16_t version;
    int32_t correlation_id, replica_id, current_leader_epoch, last_fetched_epoch;
    int32_t max_wait_ms, max_bytes;
    int64_t fetch_offset, high_watermark; /* FETCH_HW_NOT_PROVIDED when not sent */
    int has_dir;
    uint8_t dir[16];
} fetch_request;

static int read_fetch_request(const uint8_t *f, size_t len, const char *cluster_id,
                              size_t cluster_id_len, fetch_request *r)
{
    size_t pos;
    int16_t n;
    uint32_t rack, u;
    int last_tag = -1, count, seen_replica = 0;
    static const uint8_t zero[16];
    if (len < 10 || be16(f) != 1)
        return 0;
    r->version = (int16_t)be16(f + 2);
    if (r->version != 17 && r->version != 18)
        return 0;
    r->correlation_id = (int32_t)be32(f + 4);
    n = (int16_t)be16(f + 8);
    if (n < -1)
        return 0;
    pos = 10 + (n > 0 ? (size_t)n : 0);
    if (pos >= len)
        return 0;
    for (size_t i = 10; i < pos; i++)
        if (f[i] >= 0x80)
            return 0; /* a client id the lane takes as ASCII only */
    if (f[pos] != 0 || len - pos < 1 + 21 + 18 + 32 + 1)
        return 0;
    r->max_wait_ms = (int32_t)be32(f + pos + 1);
    r->max_bytes = (int32_t)be32(f + pos + 9);
    pos += 22;
    if (f[pos] != 2 || memcmp(f + pos + 1, METADATA_TOPIC_ID, 16) != 0 || f[pos + 17] != 2)
        return 0;
    if (be32(f + pos + 18) != 0)
        return 0; /* partition 0 */
    r->current_leader_epoch = (int32_t)be32(f + pos + 22);
    r->fetch_offset = (int64_t)be64(f + pos + 26);
    r->last_fetched_epoch = (int32_t)be32(f + pos + 34);
    pos += 50;
    r->has_dir = 0;
    r->high_watermark = FETCH_HW_NOT_PROVIDED;
    count = f[pos++];
    if (count > 2)
        return 0;
    for (int i = 0; i < count; i++) {
        uint8_t tag, size;
        if (len - pos < 2)
            return 0;
        tag = f[pos];
        size = f[pos + 1];
        pos += 2;
        if ((int)tag <= last_tag || len - pos < size)
            return 0;
        last_tag = tag;
        if (tag == 0 && size == 16) {
            memcpy(r->dir, f + pos, 16);
            r->has_dir = memcmp(r->dir, zero, 16) != 0;
        } else if (tag == 1 && size == 8 && r->version >= 18) {
            r->high_watermark = (int64_t)be64(f + pos);
        } else {
            return 0;
        }
        pos += size;
    }
    /* topic tags, no forgotten topics, an empty rack id */
    if (len - pos < 4 || f[pos] != 0 || f[pos + 1] != 1)
        return 0;
    pos += 2;
    if (!read_uvarint(f, len, &pos, &rack) || rack != 1)
        return 0;
    if (pos >= len)
        return 0;
    count = f[pos++];
    last_tag = -1;
    for (int i = 0; i < count; i++) {
        uint8_t tag;
        uint32_t size;
        size_t inner;
        if (pos >= len)
            return 0;
        tag = f[pos++];
        if (!read_uvarint(f, len, &pos, &size) || (int)tag <= last_tag || size > len - pos)
            return 0;
        last_tag = tag;
        if (tag == 0) { /* ClusterId: a compact string filling the field */
            inner = pos;
            if (!read_uvarint(f, len, &inner, &u) || u == 0 || inner + u - 1 != pos + size)
                return 0;
            if (u - 1 != cluster_id_len || memcmp(f + inner, cluster_id, cluster_id_len) != 0)
                return 0;
        } else if (tag == 1 && size == 13) { /* ReplicaState: ReplicaId, ReplicaEpoch, no tags */
            if (f[pos + 12] != 0)
                return 0;
            r->replica_id = (int32_t)be32(f + pos);
            seen_replica = 1;
        } else {
            return 0;
        }
        pos += size;
    }
    if (pos != len || !seen_replica)
        return 0;
    if (r->version < 18)
        r->high_watermark = FETCH_HW_NOT_PROVIDED;
    return 1;
}

/* A plain answer into out[0..cap) (header v1 and body, no size prefix): error 0, the leader's id
 * and epoch, the high watermark, the log start, and `records` (NULL and 0 for none). Its
 * length, or 0 when it does not fit. */
static size_t write_fetch_answer(uint8_t *out, size_t cap, int32_t correlation_id,
                                 int32_t leader_id, int32_t leader_epoch, int64_t high_watermark,
                                 int64_t log_start, const uint8_t *records, size_t records_len)
{
    writer w = {out, out + cap};
    int leader = leader_id != -1 || leader_epoch != -1;
    if (records_len > 0xFFFFFFFEu)
        return 0;
    put32(&w, correlation_id);
    put8(&w, 0);  /* header tags */
    put32(&w, 0); /* ThrottleTimeMs */
    put16(&w, 0); /* ErrorCode */
    put32(&w, 0); /* SessionId */
    put8(&w, 2);  /* one topic */
    put(&w, METADATA_TOPIC_ID, 16);
    put8(&w, 2); /* one partition */
    put32(&w, 0);
    put16(&w, 0);
    put64(&w, high_watermark);
    put64(&w, -1); /* LastStableOffset */
    put64(&w, log_start);
    put8(&w, 1);   /* no aborted transactions */
    put32(&w, -1); /* no preferred read replica */
    put_uvarint(&w, (uint32_t)records_len + 1);
    if (records_len)
        put(&w, records, records_len);
    put8(&w, (uint8_t)leader);
    if (leader) {
        put8(&w, 1); /* CurrentLeader */
        put8(&w, 9);
        put32(&w, leader_id);
        put32(&w, leader_epoch);
        put8(&w, 0);
    }
    put8(&w, 0); /* topic tags */
    put8(&w, 0); /* no top-level tags */
    return w.p == NULL ? 0 : (size_t)(w.p - out);
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


/* ------------------------------------------------------------------ a batch of client PUTs */

/* The leader's lane builds one record batch of the values its loop turn collected: what
 * kraft.records.batch.build_batch builds for plain values (magic 2, no compression, CreateTime,
 * producer id, epoch and sequence -1; each record with attributes 0, timestamp delta 0, its
 * offset delta, a null key, the value and no headers), byte for byte. */

static size_t zigzag_size(int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    size_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static void put_zigzag(writer *w, int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (u >= 0x80) {
        put8(w, (uint8_t)((u & 0x7f) | 0x80));
        u >>= 7;
    }
    put8(w, (uint8_t)u);
}

/* The size of one record's body (after its length) for a value of `n` bytes at offset delta i. */
static size_t record_body(size_t i, size_t n)
{
    return 4 + zigzag_size((int64_t)i) + zigzag_size((int64_t)n) + n;
}

/* The batch's size, or 0 when it cannot be built (no value, or past Kafka's int32 limits). */
static size_t value_batch_size(const size_t *lens, size_t count)
{
    size_t total = BATCH_HEADER;
    if (count == 0 || count > INT32_MAX)
        return 0;
    for (size_t i = 0; i < count; i++) {
        size_t body;
        if (lens[i] > INT32_MAX / 2)
            return 0;
        body = record_body(i, lens[i]);
        total += zigzag_size((int64_t)body) + body;
        if (total - LOG_OVERHEAD > INT32_MAX)
            return 0;
    }
    return total;
}

static void write_value_batch(uint8_t *out, size_t size, int64_t base, int32_t epoch, int64_t ts,
                              const uint8_t *const *values, const size_t *lens, size_t count)
{
    writer w = {out, out + size};
    put64(&w, base);
    put32(&w, (int32_t)(size - LOG_OVERHEAD));
    put32(&w, epoch);
    put8(&w, 2);  /* magic */
    put32(&w, 0); /* the CRC, below */
    put16(&w, 0); /* attributes */
    put32(&w, (int32_t)(count - 1));
    put64(&w, ts);
    put64(&w, ts);
    put64(&w, -1); /* producer id */
    put16(&w, -1); /* producer epoch */
    put32(&w, -1); /* base sequence */
    put32(&w, (int32_t)count);
    for (size_t i = 0; i < count; i++) {
        put_zigzag(&w, (int64_t)record_body(i, lens[i]));
        put8(&w, 0); /* attributes */
        put8(&w, 0); /* timestamp delta */
        put_zigzag(&w, (int64_t)i);
        put8(&w, 1); /* a null key */
        put_zigzag(&w, (int64_t)lens[i]);
        put(&w, values[i], lens[i]);
        put8(&w, 0); /* no headers */
    }
    {
        uint32_t crc = crc32c(out + 21, size - 21);
        out[17] = (uint8_t)(crc >> 24);
        out[18] = (uint8_t)(crc >> 16);
        out[19] = (uint8_t)(crc >> 8);
        out[20] = (uint8_t)crc;
    }
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


/* ------------------------------------------------------------------ the client's PUTs */

/* The leader's lane reads the binary client protocol's PUT frames itself (step 3):
 *   request: u32 length | u32 id | u8 op | u16 key length | key | value
 *   answer:  u32 length | u32 id | u8 status | i64 offset | i32 leader id
 * (kraft.server.client_protocol). read_puts takes the whole PUT frames at the head of a buffer
 * and gives each one's id and the KV record its value becomes in the log
 * (kraft.statemachine.kv.encode_put: format version 1, op PUT, u32 key length, key, u32 value
 * length, value). It stops at the first frame that is not whole, not a PUT, or not one the lane
 * takes (a key that is not ASCII, a key that overruns its frame, a bad length): those are the
 * Python protocol's, which answers or refuses them. */

#define CLIENT_OP_PUT 1
#define CLIENT_MAX_FRAME (16 * 1024 * 1024)
#define CLIENT_REQUEST_HEAD 7 /* id, op, key length */

typedef struct {
    uint32_t request_id;
    size_t key_at, key_len, value_at, value_len;
} client_put;

/* The PUTs at the head of buf[0..len): how many (at most max) into puts, and the bytes they
 * take in *used. */
static size_t read_puts(const uint8_t *buf, size_t len, client_put *puts, size_t max,
                        size_t *used)
{
    size_t pos = 0, n = 0;
    while (n < max && len - pos >= 4 + CLIENT_REQUEST_HEAD) {
        uint32_t length = be32(buf + pos);
        size_t end, kstart, klen;
        if (length < CLIENT_REQUEST_HEAD || length > CLIENT_MAX_FRAME)
            break;
        end = pos + 4 + (size_t)length;
        if (end > len || buf[pos + 8] != CLIENT_OP_PUT)
            break;
        kstart = pos + 4 + CLIENT_REQUEST_HEAD;
        klen = be16(buf + pos + 9);
        if (kstart + klen > end)
            break;
        for (size_t i = 0; i < klen; i++)
            if (buf[kstart + i] >= 0x80)
                goto stop; /* a key the lane takes as ASCII only */
        puts[n].request_id = be32(buf + pos + 4);
        puts[n].key_at = kstart;
        puts[n].key_len = klen;
        puts[n].value_at = kstart + klen;
        puts[n].value_len = end - (kstart + klen);
        n++;
        pos = end;
    }
stop:
    *used = pos;
    return n;
}

#define KV_PUT_OVERHEAD 10 /* format version, op, key length, value length */

/* The KV record of PUT key=value (kv.encode_put) into r[0..KV_PUT_OVERHEAD + klen + vlen). */
static void write_kv_put(uint8_t *r, const uint8_t *key, size_t klen, const uint8_t *value,
                         size_t vlen)
{
    writer w = {r, r + KV_PUT_OVERHEAD + klen + vlen};
    put8(&w, 1); /* kv.FORMAT_VERSION */
    put8(&w, 1); /* kv.OP_PUT */
    put32(&w, (int32_t)(uint32_t)klen);
    put(&w, key, klen);
    put32(&w, (int32_t)(uint32_t)vlen);
    put(&w, value, vlen);
}

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
    n = read_puts(view.buf, (size_t)view.len, puts, max, &used);
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

/* A PUT's answer: OK with its offset (client_protocol.encode_response(id, OK, offset)). */
#define PUT_ANSWER_SIZE 21

static void write_put_answer(uint8_t out[PUT_ANSWER_SIZE], uint32_t request_id, int64_t offset)
{
    writer w = {out, out + PUT_ANSWER_SIZE};
    put32(&w, PUT_ANSWER_SIZE - 4);
    put32(&w, (int32_t)request_id);
    put8(&w, 0); /* OK */
    put64(&w, offset);
    put32(&w, -1); /* leader id: none to name */
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


/* ------------------------------------------------------------------ the leader's I/O loop */

/* LeaderShell: the leader lane's loop on its own thread (step 3), over one client connection,
 * its voters' fetch connections and the active segment's descriptor, with no Python and no
 * GIL. Each loop turn:
 *   - the client's whole PUT frames become one batch at the log's end (value_batch), written
 *     with pwrite, sent to every parked fetch with the high watermark, then fdatasync'ed; the
 *     leader's durable end then counts (leader_persisted);
 *   - a voter's fetch (read_fetch_request) is counted (leader_fetch); one that has nothing to
 *     read is parked until the next batch; one that asks for the last batch gets it again;
 *   - PUTs are answered (put_answer) once the high watermark passes their offset.
 * It stops at the first frame it does not take (handover), when asked to, when a peer closes,
 * or on an I/O error. Parked fetches wait for the next batch with no deadline of their own
 * (the core's MaxWaitMs answers are step 3's rest), so this is the path's prototype: what the
 * steady state costs in C, end to end, with the node's formats and wire. */

#define LEADER_MAX_VOTERS 8
#define LEADER_MAX_PENDING 4096
#define LEADER_TAIL 64 /* the recent batches kept for a voter a few writes behind */

typedef struct {
    int sock;
    int32_t replica_id;
    uint8_t *in;
    size_t in_len, in_cap;
    /* the voter's fetch held back: until records come, the high watermark moves (when it
     * asked for it: has_hw) or its deadline (MaxWaitMs, or the linger) passes; its frame is
     * kept to hand it back */
    int parked, parked_has_hw;
    int32_t parked_corr;
    int64_t parked_deadline;
    uint8_t *parked_frame;
    size_t parked_frame_len, parked_frame_cap;
    /* its progress row (kraft.raft.leader.ReplicaProgress.record_fetch), and whether it
     * fetched since the last progress() */
    int64_t end_offset, last_fetch_ms, last_caught_up_ms, prev_fetch_ms, prev_fetch_leader_end;
    int fetched;
    /* the row as last published for progress() */
    int64_t p_end_offset, p_last_fetch_ms, p_last_caught_up_ms, p_prev_fetch_leader_end;
    int p_fetched;
} shell_voter;

typedef struct {
    PyObject_HEAD
    int client, log_fd;
    int64_t write_pos, write_limit, timestamp_ms, log_start;
    leader_lane lane;
    int32_t leader_id;
    char cluster_id[FETCH_TEMPLATE_TEXT];
    size_t cluster_id_len;
    int nvoters;
    shell_voter voters[LEADER_MAX_VOTERS];
    uint8_t *cin;
    size_t cin_len, cin_cap;
    uint8_t *last_batch; /* the batch being built; then copied into the tail */
    size_t last_batch_len, last_batch_cap;
    int64_t last_batch_base;
    uint8_t *tail[LEADER_TAIL]; /* the recent batches, oldest first from tail_first */
    size_t tail_len[LEADER_TAIL];
    int64_t tail_base[LEADER_TAIL];
    int tail_first, tail_count;
    uint8_t *answer_buf;
    size_t answer_cap;
    uint8_t *records_buf; /* a loop turn's KV records, one after the other */
    size_t records_cap;
    uint32_t pending_id[LEADER_MAX_PENDING];
    int64_t pending_offset[LEADER_MAX_PENDING];
    size_t npending;
    shell_thread t;
    int64_t batches, answered;
    /* KIP-1166's linger (hw_linger_ms): when the high watermark last moved, and whether the
     * last batch came within the linger of it (LeaderState's fields of those names) */
    int64_t linger_ms, hw_advanced_ms;
    int writes_streaming;
    int64_t appended_bytes;
    int64_t *appended; /* (base, last) of each batch written since the last publish */
    size_t nappended, appended_cap;
    /* What the loop has done, for progress() while it runs: published under the lock before
     * anything that shows it leaves (an answer to a voter or to the client). */
    pthread_mutex_t lock;
    int lock_ready;
    int64_t p_log_end, p_durable, p_write_pos, p_hw, p_hw_advanced_ms, p_answered, p_version;
    int p_has_hw, p_streaming;
    int64_t *p_appended, p_appended_bytes;
    size_t p_nappended, p_appended_cap;
} LeaderShellObject;

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
    size_t cap2 = *cap ? *cap : 65536;
    uint8_t *p;
    while (cap2 < need)
        cap2 *= 2;
    if (cap2 == *cap)
        return 1;
    p = realloc(*buf, cap2);
    if (p == NULL)
        return 0;
    *buf = p;
    *cap = cap2;
    return 1;
}

static int leader_fail(LeaderShellObject *sh, const char *at)
{
    return thread_fail(&sh->t, at);
}

/* The loop's progress into the published fields (under the lock): 1, or 0 when out of memory. */
static int leader_publish(LeaderShellObject *sh)
{
    int ok = 1;
    pthread_mutex_lock(&sh->lock);
    if (sh->nappended) {
        size_t need = (sh->p_nappended + sh->nappended) * 2 * sizeof(int64_t);
        if (need > sh->p_appended_cap) {
            size_t cap = need * 2;
            int64_t *p = realloc(sh->p_appended, cap);
            if (p == NULL) {
                ok = 0;
            } else {
                sh->p_appended = p;
                sh->p_appended_cap = cap;
            }
        }
        if (ok) {
            memcpy(sh->p_appended + sh->p_nappended * 2, sh->appended,
                   sh->nappended * 2 * sizeof(int64_t));
            sh->p_nappended += sh->nappended;
            sh->nappended = 0;
            sh->p_appended_bytes += sh->appended_bytes;
            sh->appended_bytes = 0;
        }
    }
    sh->p_log_end = sh->lane.log_end;
    sh->p_durable = sh->lane.durable;
    sh->p_write_pos = sh->write_pos;
    sh->p_has_hw = sh->lane.has_hw;
    sh->p_hw = sh->lane.hw;
    sh->p_hw_advanced_ms = sh->hw_advanced_ms;
    sh->p_streaming = sh->writes_streaming;
    sh->p_answered = sh->answered;
    sh->p_version++;
    for (int i = 0; i < sh->nvoters; i++) {
        shell_voter *v = &sh->voters[i];
        if (!v->fetched)
            continue;
        v->p_end_offset = v->end_offset;
        v->p_last_fetch_ms = v->last_fetch_ms;
        v->p_last_caught_up_ms = v->last_caught_up_ms;
        v->p_prev_fetch_leader_end = v->prev_fetch_leader_end;
        v->p_fetched = 1;
        v->fetched = 0;
    }
    pthread_mutex_unlock(&sh->lock);
    return ok ? 1 : leader_fail(sh, "buffer");
}

/* Answer the PUTs the high watermark now covers (published first: what an answer tells the
 * client, the node's progress() already holds). */
static int leader_answer_puts(LeaderShellObject *sh)
{
    uint8_t out[PUT_ANSWER_SIZE * 64];
    size_t i = 0, k = 0, count = 0;
    if (!sh->lane.has_hw)
        return 1;
    while (count < sh->npending && sh->pending_offset[count] < sh->lane.hw)
        count++;
    if (count == 0)
        return 1;
    sh->answered += (int64_t)count;
    if (!leader_publish(sh))
        return 0;
    for (i = 0; i < count; i++) {
        write_put_answer(out + k * PUT_ANSWER_SIZE, sh->pending_id[i], sh->pending_offset[i]);
        if (++k == 64) {
            if (send_all_or_stop(sh->client, out, k * PUT_ANSWER_SIZE, sh->t.stop_pipe[0]) != 0)
                return leader_fail(sh, "send");
            k = 0;
        }
    }
    if (k && send_all_or_stop(sh->client, out, k * PUT_ANSWER_SIZE, sh->t.stop_pipe[0]) != 0)
        return leader_fail(sh, "send");
    memmove(sh->pending_id, sh->pending_id + count,
            (sh->npending - count) * sizeof sh->pending_id[0]);
    memmove(sh->pending_offset, sh->pending_offset + count,
            (sh->npending - count) * sizeof sh->pending_offset[0]);
    sh->npending -= count;
    return 1;
}

/* Send `records` (the last batch, or none) to voter v as the answer to `corr`. */
static int leader_send_answer(LeaderShellObject *sh, shell_voter *v, int32_t corr,
                              const uint8_t *records, size_t len)
{
    size_t cap = len + 128, n;
    uint8_t stackbuf[1024], *buf;
    int rc;
    if (!leader_publish(sh))
        return 0;
    buf = cap <= sizeof stackbuf ? stackbuf : malloc(cap);
    if (buf == NULL)
        return leader_fail(sh, "buffer");
    n = write_fetch_answer(buf + 4, cap - 4, corr, sh->leader_id, sh->lane.epoch,
                           sh->lane.has_hw ? sh->lane.hw : -1, sh->log_start, records, len);
    buf[0] = (uint8_t)(n >> 24);
    buf[1] = (uint8_t)(n >> 16);
    buf[2] = (uint8_t)(n >> 8);
    buf[3] = (uint8_t)n;
    rc = n ? send_all_or_stop(v->sock, buf, n + 4, sh->t.stop_pipe[0]) : -1;
    if (buf != stackbuf)
        free(buf);
    return rc == 0 ? 1 : leader_fail(sh, "send");
}

/* The high watermark moved at `now` (kraft.raft.replication.maybe_advance_hw): while writes stream in, the
 * parked fetches that asked for it wait at most the linger more for the next batch, which
 * carries it; otherwise they get it now. */
static int leader_hw_moved(LeaderShellObject *sh, int64_t now)
{
    sh->hw_advanced_ms = now;
    for (int i = 0; i < sh->nvoters; i++) {
        shell_voter *v = &sh->voters[i];
        if (!v->parked || !v->parked_has_hw)
            continue;
        if (sh->writes_streaming) {
            if (v->parked_deadline > now + sh->linger_ms)
                v->parked_deadline = now + sh->linger_ms;
        } else {
            v->parked = 0;
            if (!leader_send_answer(sh, v, v->parked_corr, NULL, 0))
                return 0;
        }
    }
    return 1;
}

/* The high watermark moved at `now`: the parked fetches, then the client's PUTs it commits. */
static int leader_tell_move(LeaderShellObject *sh, int64_t now)
{
    return leader_hw_moved(sh, now) && leader_answer_puts(sh);
}

/* Answer the parked fetches whose deadline has come; the earliest deadline left (or -1). */
static int64_t leader_expire(LeaderShellObject *sh, int64_t now)
{
    int64_t next = -1;
    for (int i = 0; i < sh->nvoters; i++) {
        shell_voter *v = &sh->voters[i];
        if (!v->parked)
            continue;
        if (v->parked_deadline <= now) {
            v->parked = 0;
            if (!leader_send_answer(sh, v, v->parked_corr, NULL, 0))
                return -2;
        } else if (next < 0 || v->parked_deadline < next) {
            next = v->parked_deadline;
        }
    }
    return next;
}

/* The client's whole PUTs: one batch, written, sent to the parked fetches, synced. */
static int leader_take_puts(LeaderShellObject *sh)
{
    client_put puts[512];
    const uint8_t *values[512];
    size_t lens[512], used = 0, n, size;
    size_t k, total = 0, at = 0;
    int64_t base = sh->lane.log_end, now;
    int had_hw;
    int64_t hw_before;
    n = read_puts(sh->cin, sh->cin_len, puts, 512, &used);
    if (n == 0) {
        if (sh->cin_len >= 4 + CLIENT_REQUEST_HEAD && used == 0) {
            /* a whole frame, or a bad one, that the lane does not take */
            uint32_t length = be32(sh->cin);
            if (length < CLIENT_REQUEST_HEAD || length > CLIENT_MAX_FRAME
                || sh->cin_len >= 4 + (size_t)length) {
                sh->t.state = SHELL_HANDOVER;
                return 0;
            }
        }
        return 1;
    }
    if (sh->npending + n > LEADER_MAX_PENDING) {
        sh->t.state = SHELL_HANDOVER;
        return 0;
    }
    for (k = 0; k < n; k++)
        total += KV_PUT_OVERHEAD + puts[k].key_len + puts[k].value_len;
    if (!grow(&sh->records_buf, &sh->records_cap, total))
        return leader_fail(sh, "buffer");
    for (k = 0; k < n; k++) { /* each value: the KV record of its PUT */
        size_t klen = puts[k].key_len, vlen = puts[k].value_len;
        write_kv_put(sh->records_buf + at, sh->cin + puts[k].key_at, klen,
                     sh->cin + puts[k].value_at, vlen);
        values[k] = sh->records_buf + at;
        lens[k] = KV_PUT_OVERHEAD + klen + vlen;
        at += lens[k];
        sh->pending_id[sh->npending + k] = puts[k].request_id;
        sh->pending_offset[sh->npending + k] = base + (int64_t)k;
    }
    size = value_batch_size(lens, n);
    if (size == 0 || !grow(&sh->last_batch, &sh->last_batch_cap, size))
        return leader_fail(sh, "batch");
    if (sh->write_pos + (int64_t)size > sh->write_limit) {
        sh->t.state = SHELL_HANDOVER; /* past the segment's room: the log rolls it in Python */
        return 0;
    }
    now = wall_ms();
    if (now < sh->timestamp_ms)
        now = sh->timestamp_ms; /* timestamps do not go back */
    sh->timestamp_ms = now;
    write_value_batch(sh->last_batch, size, base, sh->lane.epoch, now, values, lens, n);
    sh->last_batch_len = size;
    sh->last_batch_base = base;
    { /* keep it in the tail, dropping the oldest */
        int slot = (sh->tail_first + sh->tail_count) % LEADER_TAIL;
        uint8_t *copy = malloc(size);
        if (copy == NULL)
            return leader_fail(sh, "buffer");
        memcpy(copy, sh->last_batch, size);
        if (sh->tail_count == LEADER_TAIL) {
            free(sh->tail[sh->tail_first]);
            sh->tail_first = (sh->tail_first + 1) % LEADER_TAIL;
            slot = (sh->tail_first + sh->tail_count - 1) % LEADER_TAIL;
        } else {
            sh->tail_count++;
        }
        sh->tail[slot] = copy;
        sh->tail_len[slot] = size;
        sh->tail_base[slot] = base;
    }
    sh->npending += n;
    memmove(sh->cin, sh->cin + used, sh->cin_len - used);
    sh->cin_len -= used;
    if (!leader_appended(&sh->lane, base, base + (int64_t)n - 1, sh->lane.epoch)) {
        sh->t.state = SHELL_HANDOVER;
        return 0;
    }
    {
        size_t done = 0;
        while (done < size) {
            ssize_t w = pwrite(sh->log_fd, sh->last_batch + done, size - done,
                               (off_t)(sh->write_pos + (int64_t)done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return leader_fail(sh, "write");
            done += (size_t)w;
        }
    }
    sh->write_pos += (int64_t)size;
    sh->batches++;
    if ((sh->nappended + 1) * 2 * sizeof(int64_t) > sh->appended_cap) {
        size_t cap = sh->appended_cap ? sh->appended_cap * 2 : 64 * sizeof(int64_t);
        int64_t *p = realloc(sh->appended, cap);
        if (p == NULL)
            return leader_fail(sh, "buffer");
        sh->appended = p;
        sh->appended_cap = cap;
    }
    sh->appended[sh->nappended * 2] = base;
    sh->appended[sh->nappended * 2 + 1] = base + (int64_t)n - 1;
    sh->nappended++;
    sh->appended_bytes += (int64_t)total;
    now = wall_ms();
    sh->writes_streaming = sh->linger_ms > 0 && now - sh->hw_advanced_ms <= sh->linger_ms;
    for (int i = 0; i < sh->nvoters; i++) { /* replicate before the leader's own sync */
        shell_voter *v = &sh->voters[i];
        if (v->parked) {
            v->parked = 0;
            if (!leader_send_answer(sh, v, v->parked_corr, sh->last_batch, size))
                return 0;
        }
    }
    if (fdatasync(sh->log_fd) != 0)
        return leader_fail(sh, "fdatasync");
    had_hw = sh->lane.has_hw;
    hw_before = sh->lane.hw;
    leader_persisted(&sh->lane, sh->lane.log_end);
    if (sh->lane.has_hw != had_hw || sh->lane.hw != hw_before) {
        return leader_tell_move(sh, wall_ms());
    }
    return leader_publish(sh);
}

/* Every whole PUT in the client's input, a turn (at most 512 PUTs, one batch) at a time:
 * what the client sent before it waits for its answers is all taken, even when no more bytes
 * come to wake the poll. */
static int leader_take_all_puts(LeaderShellObject *sh)
{
    for (;;) {
        size_t before = sh->cin_len;
        if (!leader_take_puts(sh))
            return 0;
        if (sh->cin_len == 0 || sh->cin_len == before)
            return 1;
    }
}

/* A voter's whole fetches. */
static int leader_take_fetches(LeaderShellObject *sh, shell_voter *v)
{
    while (v->in_len >= 4) {
        uint32_t size = be32(v->in);
        fetch_request r;
        int has_read = 0;
        if (size > SHELL_MAX_FRAME) {
            sh->t.state = SHELL_HANDOVER;
            return 0;
        }
        if (v->in_len - 4 < size)
            return 1;
        int had_hw = sh->lane.has_hw, behind, moved;
        int64_t hw_before = sh->lane.hw, now, leader_end = sh->lane.log_end;
        memset(&r, 0, sizeof r);
        if (!read_fetch_request(v->in + 4, size, sh->cluster_id, sh->cluster_id_len, &r)
            || r.replica_id != v->replica_id
            || !leader_fetch(&sh->lane, r.replica_id, r.has_dir ? r.dir : NULL, r.fetch_offset,
                             r.last_fetched_epoch, r.current_leader_epoch, r.max_wait_ms,
                             &has_read)) {
            sh->t.state = SHELL_HANDOVER;
            return 0;
        }
        now = wall_ms();
        /* the voter's row, as ReplicaProgress.record_fetch keeps it */
        v->end_offset = r.fetch_offset;
        if (r.fetch_offset >= leader_end)
            v->last_caught_up_ms = now;
        else if (r.fetch_offset >= v->prev_fetch_leader_end && v->prev_fetch_ms >= 0
                 && v->prev_fetch_ms > v->last_caught_up_ms)
            v->last_caught_up_ms = v->prev_fetch_ms;
        v->prev_fetch_ms = v->last_fetch_ms = now;
        v->prev_fetch_leader_end = leader_end;
        v->fetched = 1;
        if (v->parked) { /* a fetch while one waits: the waiting one is answered as it is */
            v->parked = 0;
            if (!leader_send_answer(sh, v, v->parked_corr, NULL, 0))
                return 0;
        }
        /* a fetch that moves the high watermark: the voters learn it before the client its
         * commit (a reader of a follower sees the write sooner after its answer). This
         * fetch's own answer goes first when it is answered at once (it is, behind the new
         * high watermark, unless writes stream in), then the parked fetches', then the
         * client's */
        moved = sh->lane.has_hw != had_hw || sh->lane.hw != hw_before;
        behind = r.high_watermark != FETCH_HW_NOT_PROVIDED && sh->lane.has_hw
                 && r.high_watermark < sh->lane.hw;
        if (!has_read && r.max_wait_ms > 0 && (!behind || sh->writes_streaming)) {
            int64_t wait = r.max_wait_ms;
            if (behind && sh->linger_ms < wait)
                wait = sh->linger_ms;
            /* parked: the move reaches the others first, as before the fetch */
            if (moved && !leader_tell_move(sh, now))
                return 0;
            if (!grow(&v->parked_frame, &v->parked_frame_cap, size))
                return leader_fail(sh, "buffer");
            memcpy(v->parked_frame, v->in + 4, size);
            v->parked_frame_len = size;
            v->parked = 1;
            v->parked_has_hw = r.high_watermark != FETCH_HW_NOT_PROVIDED;
            v->parked_corr = r.correlation_id;
            v->parked_deadline = now + wait;
            memmove(v->in, v->in + 4 + size, v->in_len - 4 - size);
            v->in_len -= 4 + (size_t)size;
            if (!leader_publish(sh)) /* the voter's row: its acknowledgement */
                return 0;
            continue;
        }
        memmove(v->in, v->in + 4 + size, v->in_len - 4 - size);
        v->in_len -= 4 + (size_t)size;
        if (!has_read) {
            if (!leader_send_answer(sh, v, r.correlation_id, NULL, 0))
                return 0;
        } else {
            /* the batches from the fetch offset on, if the tail still holds them */
            int from = -1;
            size_t total = 0;
            for (int k = 0; k < sh->tail_count; k++) {
                int slot = (sh->tail_first + k) % LEADER_TAIL;
                if (sh->tail_base[slot] == r.fetch_offset)
                    from = k;
                if (from >= 0)
                    total += sh->tail_len[slot];
            }
            if (from < 0 || total > (size_t)(r.max_bytes > 0 ? r.max_bytes : 0)
                || !grow(&sh->answer_buf, &sh->answer_cap, total)) {
                if (moved && !leader_tell_move(sh, now))
                    return 0;
                sh->t.state = SHELL_HANDOVER; /* older records: the log's, not the lane's */
                return 0;
            }
            total = 0;
            for (int k = from; k < sh->tail_count; k++) {
                int slot = (sh->tail_first + k) % LEADER_TAIL;
                memcpy(sh->answer_buf + total, sh->tail[slot], sh->tail_len[slot]);
                total += sh->tail_len[slot];
            }
            if (!leader_send_answer(sh, v, r.correlation_id, sh->answer_buf, total))
                return 0;
        }
        if (moved && !leader_tell_move(sh, now))
            return 0;
    }
    return 1;
}

static int recv_into(int sock, uint8_t **buf, size_t *len, size_t *cap, int *closed)
{
    ssize_t r;
    if (*cap - *len < 65536 && !grow(buf, cap, *len + 65536))
        return -1;
    r = recv(sock, *buf + *len, *cap - *len, 0);
    if (r < 0 && errno == ECONNRESET) {
        *closed = 1; /* the peer went away with bytes unread */
        return 0;
    }
    if (r < 0)
        return (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    if (r == 0)
        *closed = 1;
    *len += (size_t)r;
    return 0;
}

static void *leader_run(void *arg)
{
    LeaderShellObject *sh = arg;
    struct pollfd pf[LEADER_MAX_VOTERS + 2];
    int n = sh->nvoters;
    /* what the connections had read before they were lent comes first */
    for (int i = 0; i < n && sh->t.state == SHELL_RUNNING; i++)
        if (sh->voters[i].in_len)
            leader_take_fetches(sh, &sh->voters[i]);
    if (sh->t.state == SHELL_RUNNING && sh->cin_len)
        leader_take_all_puts(sh);
    for (;;) {
        int closed = 0, timeout = -1;
        if (sh->t.state != SHELL_RUNNING)
            break;
        int64_t now = wall_ms(), next = leader_expire(sh, now);
        if (next == -2)
            break;
        if (next >= 0)
            timeout = next - now > 60000 ? 60000 : (int)(next - now);
        pf[0].fd = sh->t.stop_pipe[0];
        pf[0].events = POLLIN;
        pf[1].fd = sh->client;
        pf[1].events = POLLIN;
        for (int i = 0; i < n; i++) {
            pf[2 + i].fd = sh->voters[i].sock;
            pf[2 + i].events = POLLIN;
        }
        if (poll(pf, (nfds_t)(n + 2), timeout) < 0) {
            if (errno == EINTR)
                continue;
            leader_fail(sh, "poll");
            break;
        }
        if (pf[0].revents) {
            sh->t.state = SHELL_STOPPED;
            break;
        }
        /* the voters' acknowledgements first: they answer the client */
        for (int i = 0; i < n && sh->t.state == SHELL_RUNNING; i++) {
            shell_voter *v = &sh->voters[i];
            if (!pf[2 + i].revents)
                continue;
            if (recv_into(v->sock, &v->in, &v->in_len, &v->in_cap, &closed) < 0) {
                leader_fail(sh, "recv");
                break;
            }
            if (closed) {
                sh->t.state = SHELL_CLOSED;
                break;
            }
            leader_take_fetches(sh, v);
        }
        if (sh->t.state != SHELL_RUNNING)
            break;
        if (pf[1].revents) {
            if (recv_into(sh->client, &sh->cin, &sh->cin_len, &sh->cin_cap, &closed) < 0) {
                leader_fail(sh, "recv");
                break;
            }
            if (closed) {
                sh->t.state = SHELL_CLOSED;
                break;
            }
            if (!leader_take_all_puts(sh))
                break;
        }
    }
    leader_publish(sh);
    thread_done(&sh->t);
    return NULL;
}

static void LeaderShell_dealloc(LeaderShellObject *self)
{
    thread_close(&self->t);
    for (int i = 0; i < self->nvoters; i++) {
        free(self->voters[i].in);
        free(self->voters[i].parked_frame);
    }
    free(self->appended);
    free(self->p_appended);
    if (self->lock_ready)
        pthread_mutex_destroy(&self->lock);
    free(self->cin);
    free(self->last_batch);
    free(self->answer_buf);
    free(self->records_buf);
    for (int k = 0; k < self->tail_count; k++)
        free(self->tail[(self->tail_first + k) % LEADER_TAIL]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Bytes into a loop's buffer (the unread input a connection hands over with its socket). */
static int take_bytes(PyObject *o, const char *what, uint8_t **buf, size_t *len, size_t *cap)
{
    char *p;
    Py_ssize_t n;
    if (o == NULL || o == Py_None)
        return 0;
    if (PyBytes_AsStringAndSize(o, &p, &n) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be bytes", what);
        return -1;
    }
    if (n == 0)
        return 0;
    if (!grow(buf, cap, (size_t)n)) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(*buf, p, (size_t)n);
    *len = (size_t)n;
    return 0;
}

/* One voter of the setup: (socket, replica_id[, row[, parked[, unread]]]), where row is
 * (end_offset, last_fetch_ms, last_caught_up_ms, prev_fetch_ms, prev_fetch_leader_end) and
 * parked (correlation_id, frame, deadline_ms, has_hw), each None for none. */
static int leader_voter_setup(shell_voter *v, PyObject *item)
{
    PyObject *row = Py_None, *parked = Py_None, *unread = Py_None;
    int sock, rid;
    memset(v, 0, sizeof *v);
    v->end_offset = v->last_fetch_ms = v->last_caught_up_ms = v->prev_fetch_ms = -1;
    v->prev_fetch_leader_end = -1;
    if (!PyArg_ParseTuple(item, "ii|OOO", &sock, &rid, &row, &parked, &unread))
        return -1;
    if (sock < 0) {
        PyErr_SetString(PyExc_ValueError, "a voter's socket must not be negative");
        return -1;
    }
    v->sock = sock;
    v->replica_id = rid;
    if (row != Py_None) {
        long long e, f, c, pf, pe;
        if (!PyArg_ParseTuple(row, "LLLLL", &e, &f, &c, &pf, &pe))
            return -1;
        v->end_offset = e;
        v->last_fetch_ms = f;
        v->last_caught_up_ms = c;
        v->prev_fetch_ms = pf;
        v->prev_fetch_leader_end = pe;
    }
    if (parked != Py_None) {
        int corr, has_hw;
        long long deadline;
        PyObject *frame;
        if (!PyArg_ParseTuple(parked, "iSLp", &corr, &frame, &deadline, &has_hw))
            return -1;
        if (take_bytes(frame, "a parked fetch's frame", &v->parked_frame, &v->parked_frame_len,
                       &v->parked_frame_cap) < 0)
            return -1;
        v->parked = 1;
        v->parked_corr = corr;
        v->parked_deadline = deadline;
        v->parked_has_hw = has_hw;
    }
    return take_bytes(unread, "a voter's unread bytes", &v->in, &v->in_len, &v->in_cap);
}

static int LeaderShell_init(LeaderShellObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"client", "voters", "log_fd", "write_pos", "lane", "leader_id",
                         "cluster_id", "log_start", "timestamp_ms", "linger_ms",
                         "hw_advanced_ms", "writes_streaming", "client_unread", "write_limit",
                         NULL};
    PyObject *voters, *lane, *cluster, *seq, *client_unread = Py_None;
    int client, log_fd, leader_id, streaming = 0;
    long long write_pos, log_start, ts, linger = 0, hw_advanced = -(1LL << 62);
    long long write_limit = INT64_MAX;
    if (self->t.started || self->t.pipes_open) {
        PyErr_SetString(PyExc_RuntimeError, "a LeaderShell is set up once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOiLOiOLL|LLpOL", kw, &client, &voters,
                                     &log_fd, &write_pos, &lane, &leader_id, &cluster,
                                     &log_start, &ts, &linger, &hw_advanced, &streaming,
                                     &client_unread, &write_limit))
        return -1;
    if (write_limit < write_pos) {
        PyErr_SetString(PyExc_ValueError, "write_limit must not be below write_pos");
        return -1;
    }
    if (!PyObject_TypeCheck(lane, &LeaderLaneType)) {
        PyErr_SetString(PyExc_TypeError, "lane must be a kraft.lane._native.LeaderLane");
        return -1;
    }
    if (client < 0 || log_fd < 0 || write_pos < 0) {
        PyErr_SetString(PyExc_ValueError, "client, log_fd and write_pos must not be negative");
        return -1;
    }
    if (linger < 0) {
        PyErr_SetString(PyExc_ValueError, "linger_ms must not be negative");
        return -1;
    }
    if (get_text(cluster, "cluster_id", self->cluster_id, &self->cluster_id_len, NULL) < 0)
        return -1;
    seq = PySequence_Fast(voters, "voters must be a sequence of (socket, replica_id, ...)");
    if (seq == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) > LEADER_MAX_VOTERS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "a LeaderShell serves at most %d voters", LEADER_MAX_VOTERS);
        return -1;
    }
    self->nvoters = (int)PySequence_Fast_GET_SIZE(seq);
    for (int i = 0; i < self->nvoters; i++) {
        if (leader_voter_setup(&self->voters[i], PySequence_Fast_GET_ITEM(seq, i)) < 0) {
            for (int k = 0; k <= i; k++) {
                free(self->voters[k].in);
                free(self->voters[k].parked_frame);
                memset(&self->voters[k], 0, sizeof self->voters[k]);
            }
            self->nvoters = 0;
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    if (take_bytes(client_unread, "client_unread", &self->cin, &self->cin_len, &self->cin_cap) < 0)
        return -1;
    self->client = client;
    self->log_fd = log_fd;
    self->write_pos = write_pos;
    self->write_limit = write_limit;
    self->lane = ((LeaderLaneObject *)lane)->s;
    self->leader_id = leader_id;
    self->log_start = log_start;
    self->timestamp_ms = ts;
    self->linger_ms = linger;
    self->hw_advanced_ms = hw_advanced;
    self->writes_streaming = streaming;
    if (!self->lock_ready) {
        if (pthread_mutex_init(&self->lock, NULL) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_mutex_init failed");
            return -1;
        }
        self->lock_ready = 1;
    }
    if (!leader_publish(self)) {
        PyErr_NoMemory();
        return -1;
    }
    return thread_open(&self->t);
}

static PyObject *LeaderShell_start(LeaderShellObject *self, PyObject *unused)
{
    (void)unused;
    return thread_start(&self->t, leader_run, self, "LeaderShell");
}

/* What the loop has published since the last call: its log end, durable end, write position,
 * high watermark, when that last moved, whether writes stream in, the PUTs answered so far,
 * each batch written ((base, last) pairs) with their records' bytes, and the row of each voter
 * that fetched ((replica_id, end_offset, last_fetch_ms, last_caught_up_ms,
 * prev_fetch_leader_end)). */
static PyObject *leader_progress(LeaderShellObject *self)
{
    PyObject *appended = NULL, *rows = NULL, *out = NULL;
    int64_t *pairs = NULL;
    size_t npairs = 0;
    int64_t log_end, durable, write_pos, hw, hw_at, answered, nbytes, version;
    int has_hw, streaming, nrows = 0;
    int64_t row[LEADER_MAX_VOTERS][5];
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    log_end = self->p_log_end;
    durable = self->p_durable;
    write_pos = self->p_write_pos;
    has_hw = self->p_has_hw;
    hw = self->p_hw;
    hw_at = self->p_hw_advanced_ms;
    streaming = self->p_streaming;
    answered = self->p_answered;
    version = self->p_version;
    nbytes = self->p_appended_bytes;
    self->p_appended_bytes = 0;
    npairs = self->p_nappended;
    if (npairs) {
        pairs = malloc(npairs * 2 * sizeof(int64_t));
        if (pairs != NULL) {
            memcpy(pairs, self->p_appended, npairs * 2 * sizeof(int64_t));
            self->p_nappended = 0;
        }
    }
    for (int i = 0; i < self->nvoters; i++) {
        shell_voter *v = &self->voters[i];
        if (!v->p_fetched)
            continue;
        row[nrows][0] = v->replica_id;
        row[nrows][1] = v->p_end_offset;
        row[nrows][2] = v->p_last_fetch_ms;
        row[nrows][3] = v->p_last_caught_up_ms;
        row[nrows][4] = v->p_prev_fetch_leader_end;
        v->p_fetched = 0;
        nrows++;
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (npairs && pairs == NULL)
        return PyErr_NoMemory();
    appended = PyList_New((Py_ssize_t)npairs);
    rows = PyList_New(nrows);
    if (appended == NULL || rows == NULL)
        goto done;
    for (size_t k = 0; k < npairs; k++) {
        PyObject *t = Py_BuildValue("(LL)", (long long)pairs[2 * k], (long long)pairs[2 * k + 1]);
        if (t == NULL)
            goto done;
        PyList_SET_ITEM(appended, (Py_ssize_t)k, t);
    }
    for (int k = 0; k < nrows; k++) {
        PyObject *t = Py_BuildValue("(iLLLL)", (int)row[k][0], (long long)row[k][1],
                                    (long long)row[k][2], (long long)row[k][3],
                                    (long long)row[k][4]);
        if (t == NULL)
            goto done;
        PyList_SET_ITEM(rows, k, t);
    }
    out = Py_BuildValue("{s:L,s:L,s:L,s:L,s:N,s:L,s:O,s:L,s:O,s:L,s:O}", "version",
                        (long long)version, "log_end",
                        (long long)log_end, "durable", (long long)durable, "write_pos",
                        (long long)write_pos, "high_watermark", opt_i64(has_hw, hw),
                        "hw_advanced_ms", (long long)hw_at, "writes_streaming",
                        streaming ? Py_True : Py_False, "answered", (long long)answered,
                        "appended", appended, "appended_bytes", (long long)nbytes, "voters",
                        rows);
done:
    free(pairs);
    Py_XDECREF(appended);
    Py_XDECREF(rows);
    return out;
}

static PyObject *LeaderShell_version(LeaderShellObject *self, PyObject *unused)
{
    int64_t version;
    (void)unused;
    if (!self->lock_ready) {
        PyErr_SetString(PyExc_RuntimeError, "the LeaderShell was not set up");
        return NULL;
    }
    pthread_mutex_lock(&self->lock);
    version = self->p_version;
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLongLong((long long)version);
}

static PyObject *LeaderShell_progress(LeaderShellObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->lock_ready) {
        PyErr_SetString(PyExc_RuntimeError, "the LeaderShell was not set up");
        return NULL;
    }
    return leader_progress(self);
}

/* Stop the loop, and hand everything over: the progress since the last call (as progress()),
 * how it ended, the PUTs not answered yet ((id, offset)), the client's unread bytes, and each
 * voter's unread bytes and parked fetch ((replica_id, unread, (correlation_id, frame,
 * deadline_ms, has_hw) or None)). */
static PyObject *LeaderShell_stop(LeaderShellObject *self, PyObject *unused)
{
    PyObject *out, *pending = NULL, *voters = NULL, *item;
    (void)unused;
    if (!self->t.started) {
        PyErr_SetString(PyExc_RuntimeError, "the LeaderShell was not started");
        return NULL;
    }
    thread_join(&self->t);
    out = leader_progress(self);
    if (out == NULL)
        return NULL;
    pending = PyList_New((Py_ssize_t)self->npending);
    voters = PyList_New(self->nvoters);
    if (pending == NULL || voters == NULL)
        goto fail;
    for (size_t k = 0; k < self->npending; k++) {
        item = Py_BuildValue("(IL)", self->pending_id[k], (long long)self->pending_offset[k]);
        if (item == NULL)
            goto fail;
        PyList_SET_ITEM(pending, (Py_ssize_t)k, item);
    }
    for (int i = 0; i < self->nvoters; i++) {
        shell_voter *v = &self->voters[i];
        PyObject *parked = Py_None;
        if (v->parked) {
            parked = Py_BuildValue("(iy#LO)", (int)v->parked_corr, (const char *)v->parked_frame,
                                   (Py_ssize_t)v->parked_frame_len, (long long)v->parked_deadline,
                                   v->parked_has_hw ? Py_True : Py_False);
            if (parked == NULL)
                goto fail;
        } else {
            Py_INCREF(parked);
        }
        item = Py_BuildValue("(iy#N)", (int)v->replica_id, v->in ? (const char *)v->in : "",
                             (Py_ssize_t)v->in_len, parked);
        if (item == NULL)
            goto fail;
        PyList_SET_ITEM(voters, i, item);
    }
    if (PyDict_SetItemString(out, "pending", pending) < 0
        || PyDict_SetItemString(out, "parked", voters) < 0)
        goto fail;
    Py_DECREF(pending);
    Py_DECREF(voters);
    item = Py_BuildValue("{s:s,s:L,s:y#,s:i,s:s}", "reason", shell_reasons[self->t.state],
                         "batches", (long long)self->batches, "client_unread",
                         self->cin ? (const char *)self->cin : "", (Py_ssize_t)self->cin_len,
                         "error",
                         self->t.error, "error_at", self->t.error_at ? self->t.error_at : "");
    if (item == NULL || PyDict_Update(out, item) < 0) {
        Py_XDECREF(item);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(item);
    return out;
fail:
    Py_XDECREF(pending);
    Py_XDECREF(voters);
    Py_DECREF(out);
    return NULL;
}

static PyObject *LeaderShell_get_done_fd(LeaderShellObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->t.pipes_open ? self->t.done_pipe[0] : -1);
}

static PyGetSetDef LeaderShell_getset[] = {
    {"done_fd", (getter)LeaderShell_get_done_fd, NULL,
     "a descriptor that becomes readable when the loop has ended", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef LeaderShell_methods[] = {
    {"start", (PyCFunction)LeaderShell_start, METH_NOARGS, "start the loop on its thread"},
    {"progress", (PyCFunction)LeaderShell_progress, METH_NOARGS,
     "what the loop did since the last call, read while it runs"},
    {"version", (PyCFunction)LeaderShell_version, METH_NOARGS,
     "how often the loop published its progress (a change means progress() has news)"},
    {"stop", (PyCFunction)LeaderShell_stop, METH_NOARGS,
     "end the loop (if it runs), wait for its thread, and return its report"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LeaderShellType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kraft.lane._native.LeaderShell",
    .tp_basicsize = sizeof(LeaderShellObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The leader lane's I/O loop on its own thread (docs/native-lane.md, step 3).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LeaderShell_init,
    .tp_dealloc = (destructor)LeaderShell_dealloc,
    .tp_methods = LeaderShell_methods,
    .tp_getset = LeaderShell_getset,
};

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
     "leader's lane does not take"},
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
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
    if (PyType_Ready(&LeaderLaneType) < 0 || PyType_Ready(&FollowerLaneType) < 0
        || PyType_Ready(&FollowerShellType) < 0 || PyType_Ready(&LeaderShellType) < 0)
        return NULL;
    m = PyModule_Create(&lane_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAX_VOTERS", LANE_MAX_VOTERS) < 0
        || PyModule_AddObjectRef(m, "LeaderLane", (PyObject *)&LeaderLaneType) < 0
        || PyModule_AddObjectRef(m, "FollowerLane", (PyObject *)&FollowerLaneType) < 0
        || PyModule_AddObjectRef(m, "FollowerShell", (PyObject *)&FollowerShellType) < 0
        || PyModule_AddObjectRef(m, "LeaderShell", (PyObject *)&LeaderShellType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
