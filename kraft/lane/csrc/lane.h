/* The native lane's C (kraft.lane._native): what its units share.
 *
 * One extension built from several sources (setup.py's LANE), each with one job:
 *   rules.c    the lane's rules, plain C, and their Python types (LeaderLane, FollowerLane):
 *              the same rules as kraft/lane/rules.py, input for input;
 *   codec.c    the Kafka formats the lane reads and writes: Fetch v17/v18 requests and answers
 *              of the voters' shape, record batches (CRC-32C), the scan of an append;
 *   kv_put.c   (kraft/statemachine/csrc/, with the state machine) the KV state machine's PUT,
 *              as the binary client protocol carries it and as its record is stored (kraft.statemachine.kv's encoding): the one KV-specific unit;
 *   shell.c    what both I/O loops share: their thread, the pipes that stop and end it;
 *   io.c       the loops' disk calls (lane_io), and the seeded fault layer tests install;
 *   follower.c the follower's I/O loop (FollowerShell);
 *   leader.c   the leader's I/O loop (LeaderShell);
 *   args.c     the argument helpers the Python types and functions share;
 *   module.c   the module: its functions (the Python faces of codec.c and kv_put.c, the
 *              follower's decision timed) and its types.
 * No two units call each other and none calls module.c; codec.c and kv_put.c are plain C,
 * which the loops and the module's functions call.
 */
#ifndef KRAFT_LANE_H
#define KRAFT_LANE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LANE_MAX_VOTERS 64 /* a lease refuses larger sets: KRaft voter sets are a handful */
/* The first epoch no replica enters (kraft.protocol.primitives.EPOCH_LIMIT): a lease refuses
 * it, so a frame naming it, never equal to the lease's epoch, is always handed over. */
#define LANE_EPOCH_LIMIT 2147483647

/* ------------------------------------------------------------------ the rules (rules.c) */

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

typedef struct {
    PyObject_HEAD
    leader_lane s;
} LeaderLaneObject;

typedef struct {
    PyObject_HEAD
    follower_lane s;
} FollowerLaneObject;

extern PyTypeObject LeaderLaneType, FollowerLaneType;
int leader_fetch(leader_lane *l, int32_t replica_id, const uint8_t *dir, int64_t fetch_offset,
                 int32_t last_fetched_epoch, int32_t current_leader_epoch, int32_t max_wait_ms,
                 int *has_read);
int leader_appended(leader_lane *l, int64_t base, int64_t last, int32_t epoch);
void leader_persisted(leader_lane *l, int64_t end);
int follower_answer(follower_lane *f, int32_t correlation_id, int32_t error, int32_t leader_id,
                    int32_t leader_epoch, int64_t high_watermark, int diverging, int snapshot,
                    const lane_batch *b, Py_ssize_t n, int64_t *first, int64_t *last);

/* ------------------------------------------------------------------ the formats (codec.c) */

/* Big-endian reads. */
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

typedef struct {
    int32_t leader_id, leader_epoch;
    int64_t high_watermark, log_start;
} fetch_answer;

typedef struct {
    int64_t base_offset, last_offset;
    int32_t epoch;
    size_t pos, size;
} frame_batch;

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

/* Writes into a bounded buffer: the first that does not fit sets p to NULL. */
static inline void put(writer *w, const void *src, size_t n)
{
    if (w->p != NULL && (size_t)(w->end - w->p) >= n) {
        memcpy(w->p, src, n);
        w->p += n;
    } else {
        w->p = NULL; /* too small: the caller sees 0 */
    }
}

static inline void put8(writer *w, uint8_t x) { put(w, &x, 1); }
static inline void put16(writer *w, int16_t x)
{
    uint8_t b[2] = {(uint8_t)((uint16_t)x >> 8), (uint8_t)x};
    put(w, b, 2);
}
static inline void put32(writer *w, int32_t x)
{
    uint32_t u = (uint32_t)x;
    uint8_t b[4] = {(uint8_t)(u >> 24), (uint8_t)(u >> 16), (uint8_t)(u >> 8), (uint8_t)u};
    put(w, b, 4);
}
static inline void put64(writer *w, int64_t x)
{
    put32(w, (int32_t)((uint64_t)x >> 32));
    put32(w, (int32_t)(uint32_t)(uint64_t)x);
}
static inline void put_uvarint(writer *w, uint32_t v)
{
    while (v >= 0x80) {
        put8(w, (uint8_t)((v & 0x7f) | 0x80));
        v >>= 7;
    }
    put8(w, (uint8_t)v);
}
static inline size_t uvarint_size(uint32_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

typedef struct {
    int16_t version;
    int32_t correlation_id, replica_id, current_leader_epoch, last_fetched_epoch;
    int32_t max_wait_ms, max_bytes;
    int64_t fetch_offset, high_watermark; /* FETCH_HW_NOT_PROVIDED when not sent */
    int has_dir;
    uint8_t dir[16];
} fetch_request;

#define BATCH_HEADER 61 /* a record batch's header, up to its first record */

void crc_init(void);
uint32_t crc32c(const uint8_t *p, size_t n);
int read_fetch_answer(const uint8_t *f, size_t len, int32_t correlation_id, fetch_answer *a,
                      frame_batch *batches, size_t max, size_t *n);
int appended_batch(const uint8_t *f, size_t pos, size_t end, frame_batch *b, int64_t *max_ts);
size_t write_fetch_request(uint8_t *out, size_t cap, const fetch_template *t,
                           int32_t correlation_id, int32_t max_wait_ms, int32_t max_bytes,
                           int32_t current_leader_epoch, int64_t fetch_offset,
                           int32_t last_fetched_epoch, int64_t high_watermark);
int read_fetch_request(const uint8_t *f, size_t len, const char *cluster_id, size_t cluster_id_len,
                       fetch_request *r);
size_t write_fetch_answer(uint8_t *out, size_t cap, int32_t correlation_id, int32_t leader_id,
                          int32_t leader_epoch, int64_t high_watermark, int64_t log_start,
                          const uint8_t *records, size_t records_len);
size_t value_batch_size(const size_t *lens, size_t count);
void write_value_batch(uint8_t *out, size_t size, int64_t base, int32_t epoch, int64_t ts,
                       const uint8_t *const *values, const size_t *lens, size_t count);

/* ------------------------------------------------------------------ the KV PUT (kv_put.c) */

#define CLIENT_OP_PUT 1
#define CLIENT_MAX_FRAME (16 * 1024 * 1024)
#define CLIENT_REQUEST_HEAD 7 /* id, op, key length */

typedef struct {
    uint32_t request_id;
    size_t key_at, key_len, value_at, value_len;
} client_put;
#define KV_PUT_OVERHEAD 10 /* format version, op, key length, value length */
/* The limits every write path holds (kraft.statemachine.kv, kraft.server.kv_front): a PUT above
 * the key or value limit is left to the Python protocol, which refuses it; the lane's batch
 * takes at most LANE_MAX_APPEND_BYTES of records (or one alone), so it never reaches
 * LANE_MAX_BATCH_BYTES (kraft.storage.log_segments.MAX_BATCH_BYTES). */
#define KV_MAX_KEY_BYTES 4096
#define KV_MAX_VALUE_BYTES (1024 * 1024)
#define LANE_MAX_APPEND_BYTES (1024 * 1024)
#define LANE_MAX_BATCH_BYTES (8 * 1024 * 1024)
#define PUT_ANSWER_SIZE 21

size_t read_puts(const uint8_t *buf, size_t len, client_put *puts, size_t max,
                 size_t max_bytes, size_t *used);
void write_kv_put(uint8_t *r, const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen);
void write_put_answer(uint8_t out[PUT_ANSWER_SIZE], uint32_t request_id, int64_t offset);

/* ---------------------------------------------- the loops (shell.c, follower.c, leader.c) */

enum { SHELL_IDLE, SHELL_RUNNING, SHELL_HANDOVER, SHELL_STOPPED, SHELL_CLOSED, SHELL_ERROR };
extern const char *const shell_reasons[];

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

int thread_fail(shell_thread *t, const char *at);
int thread_open(shell_thread *t);
PyObject *thread_start(shell_thread *t, void *(*run)(void *), void *arg, const char *what);
void thread_done(shell_thread *t);
void thread_join(shell_thread *t);
void thread_close(shell_thread *t);
int send_all_or_stop(int sock, const uint8_t *p, size_t n, int stop_fd);
int shell_send_all(int sock, const uint8_t *p, size_t n);
extern PyTypeObject FollowerShellType, LeaderShellType;

/* ------------------------------------------------------------------ the file layer (io.c) */

/* Every disk call of the loops goes through this table: the plain syscalls by default, the
 * seeded fault layer once io_faults() installed it (tests only). */
struct lane_io {
    ssize_t (*pwrite)(int fd, const void *buf, size_t n, off_t at);
    int (*fdatasync)(int fd);
};
extern struct lane_io lane_io;
PyObject *lane_io_faults(PyObject *module, PyObject *args, PyObject *kwds);
PyObject *lane_io_fault_counts(PyObject *module, PyObject *unused);

/* ------------------------------------------------------------------ the arguments (args.c) */

PyObject *lane_result(const char *name);
int get_i64(PyObject *o, const char *what, int64_t *out);
int get_i32(PyObject *o, const char *what, int32_t *out);
int get_attr_i64(PyObject *o, const char *name, int64_t *out);
int get_dir(PyObject *o, uint8_t out[16]);
PyObject *opt_i64(int has, int64_t x);
int set_opt_i64(PyObject *o, const char *what, int *has, int64_t *x);
int get_text(PyObject *o, const char *what, char *out, size_t *len, int *present);

#endif /* KRAFT_LANE_H */
