/* The leader's I/O loop (kraft.lane._native.LeaderShell, docs/native-lane.md). */
#include "lane.h"

/* ------------------------------------------------------------------ the leader's I/O loop */

/* LeaderShell: the leader lane's loop on its own thread, over one client connection,
 * its voters' fetch connections and the active segment's descriptor, with no Python and no
 * GIL. Each loop turn:
 *   - the client's whole PUT frames become one batch at the log's end (value_batch), written
 *     with pwrite, sent to every parked fetch with the high watermark, then fdatasync'ed; the
 *     leader's durable end then counts (leader_persisted);
 *   - a voter's fetch (read_fetch_request) is counted (leader_fetch); one that has nothing to
 *     read is parked until the next batch, the high watermark's move (when it asked for it)
 *     or its deadline (MaxWaitMs, or the linger); one that asks for the last batch gets it
 *     again;
 *   - PUTs are answered (put_answer) once the high watermark passes their offset.
 * It stops at the first frame it does not take (handover), when asked to, when a peer closes,
 * or on an I/O error. The node runs it (kraft/lane/leader.py). */

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
    uint32_t max_frame, client_max_frame; /* socket.request.max.bytes, within the lane's own */
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
    n = read_puts(sh->cin, sh->cin_len, puts, 512, LANE_MAX_APPEND_BYTES, &used);
    for (k = 0; k < n; k++) { /* a frame above socket.request.max.bytes: Python's to refuse */
        size_t start = puts[k].key_at - 4 - CLIENT_REQUEST_HEAD;
        if (puts[k].value_at + puts[k].value_len - start - 4 > sh->client_max_frame) {
            n = k;
            used = start;
            break;
        }
    }
    if (n == 0) {
        if (sh->cin_len >= 4 + CLIENT_REQUEST_HEAD && used == 0) {
            /* a whole frame, or a bad one, that the lane does not take */
            uint32_t length = be32(sh->cin);
            size_t klen = be16(sh->cin + 9);
            if (length < CLIENT_REQUEST_HEAD || length > sh->client_max_frame
                || sh->cin_len >= 4 + (size_t)length || klen > KV_MAX_KEY_BYTES
                || (size_t)length > CLIENT_REQUEST_HEAD + klen + KV_MAX_VALUE_BYTES) {
                /* (a PUT above a limit goes to Python as soon as its head is read) */
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
            ssize_t w = lane_io.pwrite(sh->log_fd, sh->last_batch + done, size - done,
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
    if (lane_io.fdatasync(sh->log_fd) != 0)
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
        if (size > sh->max_frame) { /* Python's listener refuses it, and says why */
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
                         "max_frame", NULL};
    PyObject *voters, *lane, *cluster, *seq, *client_unread = Py_None;
    int client, log_fd, leader_id, streaming = 0;
    long long write_pos, log_start, ts, linger = 0, hw_advanced = -(1LL << 62);
    long long write_limit = INT64_MAX, max_frame = SHELL_MAX_FRAME;
    if (self->t.started || self->t.pipes_open) {
        PyErr_SetString(PyExc_RuntimeError, "a LeaderShell is set up once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOiLOiOLL|LLpOLL", kw, &client, &voters,
                                     &log_fd, &write_pos, &lane, &leader_id, &cluster,
                                     &log_start, &ts, &linger, &hw_advanced, &streaming,
                                     &client_unread, &write_limit, &max_frame))
        return -1;
    if (max_frame < 1) {
        PyErr_SetString(PyExc_ValueError, "max_frame must be at least 1");
        return -1;
    }
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
    /* the largest request frame the lane reads (socket.request.max.bytes), never above what
     * the lane buffers per connection; a larger one goes back to the Python listener */
    self->max_frame = max_frame < SHELL_MAX_FRAME ? (uint32_t)max_frame : SHELL_MAX_FRAME;
    self->client_max_frame = max_frame < CLIENT_MAX_FRAME ? (uint32_t)max_frame : CLIENT_MAX_FRAME;
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

PyTypeObject LeaderShellType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kraft.lane._native.LeaderShell",
    .tp_basicsize = sizeof(LeaderShellObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The leader lane's I/O loop on its own thread (docs/native-lane.md).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)LeaderShell_init,
    .tp_dealloc = (destructor)LeaderShell_dealloc,
    .tp_methods = LeaderShell_methods,
    .tp_getset = LeaderShell_getset,
};
