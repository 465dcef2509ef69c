/* The follower's I/O loop (kraft.lane._native.FollowerShell, docs/native-lane.md). */
#include "lane.h"

/* ------------------------------------------------------------------ the follower's I/O loop */

/* FollowerShell: the follower lane's loop on its own thread, over a connected socket
 * to the leader and the active segment's descriptor, with no Python and no GIL:
 *   read a size-prefixed frame -> read_fetch_answer -> follower_answer -> pwrite the batches at
 *   the write position and fdatasync them -> write_fetch_request -> send it.
 * The next fetch (the acknowledgement) leaves only once the batches are durable (rule 5). The
 * loop stops at the first frame it does not take (handover), when asked to (stop), when the
 * leader closes the connection, or on an I/O error; what it read and did not take is kept for
 * the caller. Its end is signalled on a pipe the caller can watch, and progress() reads what
 * it has made durable while it runs. The node runs it (kraft/lane/follower.py). The
 * socket and the log descriptor stay the caller's: the loop never closes them. */
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
                    ssize_t w = lane_io.pwrite(sh->log_fd, frame + from + done, bytes - done,
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
                if (lane_io.fdatasync(sh->log_fd) != 0) {
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

PyTypeObject FollowerShellType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kraft.lane._native.FollowerShell",
    .tp_basicsize = sizeof(FollowerShellObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The follower lane's I/O loop on its own thread (docs/native-lane.md).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FollowerShell_init,
    .tp_dealloc = (destructor)FollowerShell_dealloc,
    .tp_methods = FollowerShell_methods,
    .tp_getset = FollowerShell_getset,
};
