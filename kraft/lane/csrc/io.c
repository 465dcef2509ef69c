/* The loops' disk calls (docs/native-lane.md, "The file layer"): both I/O loops write and sync
 * their segment through `lane_io`, whose default is the plain syscalls (one indirect call each).
 * io_faults() swaps in a deterministic fault layer for tests: a seeded splitmix64 stream decides,
 * call by call, whether a write fails (EIO), is torn (only a prefix reaches the file, then the
 * call reports EIO or the short count, as a kernel may), whether an fdatasync fails (EIO), and
 * how long a call is delayed. It counts what it injected, and the file size at the last sync
 * that succeeded (what a crash keeps). After a failed fdatasync that size no longer moves: the
 * kernel may have dropped the pages whose writeback failed, and a later fdatasync that succeeds
 * does not bring them back. */
#include "lane.h"

static ssize_t real_pwrite(int fd, const void *buf, size_t n, off_t at)
{
    return pwrite(fd, buf, n, at);
}

static int real_fdatasync(int fd)
{
    return fdatasync(fd);
}

struct lane_io lane_io = {real_pwrite, real_fdatasync};

/* ------------------------------------------------------------------ the fault layer */

static pthread_mutex_t faults_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint64_t state;
    uint32_t fail_write, tear_write, fail_sync; /* per 2^32 */
    uint32_t delay_us;
    int64_t writes, syncs, failed_writes, torn_writes, short_writes, failed_syncs, delays;
    int64_t synced_size; /* the file's size at the last fdatasync that succeeded; -1 before */
    int synced_fd;
    int sync_failed; /* a sync failed: the kernel may have dropped its dirty pages, so no later
                      * sync makes the bytes after synced_size durable (synced_size stays) */
} faults;

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint32_t draw(void) { return (uint32_t)(splitmix64(&faults.state) >> 32); }

/* Under faults_lock: the delay this call gets (drawn even when none is asked, so the stream of
 * decisions does not depend on delay_us). */
static uint32_t draw_delay(void)
{
    uint32_t d = draw();
    if (faults.delay_us == 0)
        return 0;
    d = (uint32_t)((uint64_t)d * (faults.delay_us + 1) >> 32);
    if (d)
        faults.delays++;
    return d;
}

static void pause_us(uint32_t us)
{
    if (us) {
        struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
}

static ssize_t faulty_pwrite(int fd, const void *buf, size_t n, off_t at)
{
    uint32_t d, kind, cut, how;
    size_t keep = 0;
    ssize_t w;
    pthread_mutex_lock(&faults_lock);
    faults.writes++;
    d = draw_delay();
    kind = draw();
    cut = draw();
    how = draw();
    if (kind < faults.fail_write) {
        faults.failed_writes++;
        pthread_mutex_unlock(&faults_lock);
        pause_us(d);
        errno = EIO;
        return -1;
    }
    if (n > 1 && kind - faults.fail_write < faults.tear_write) {
        keep = 1 + (size_t)((uint64_t)cut * (n - 1) >> 32); /* 1 .. n-1 bytes reach the file */
        if (how >> 31)
            faults.short_writes++;
        else
            faults.torn_writes++;
    }
    pthread_mutex_unlock(&faults_lock);
    pause_us(d);
    if (keep == 0)
        return pwrite(fd, buf, n, at);
    w = pwrite(fd, buf, keep, at);
    if (w < 0 || (how >> 31))
        return w; /* a short count: the caller writes the rest */
    errno = EIO; /* a prefix reached the file, and the call failed */
    return -1;
}

static int faulty_fdatasync(int fd)
{
    uint32_t d, kind;
    struct stat st;
    int r;
    pthread_mutex_lock(&faults_lock);
    faults.syncs++;
    d = draw_delay();
    kind = draw();
    if (kind < faults.fail_sync) {
        faults.failed_syncs++;
        faults.sync_failed = 1;
        pthread_mutex_unlock(&faults_lock);
        pause_us(d);
        errno = EIO;
        return -1;
    }
    pthread_mutex_unlock(&faults_lock);
    pause_us(d);
    r = fdatasync(fd);
    if (r == 0 && fstat(fd, &st) == 0) {
        pthread_mutex_lock(&faults_lock);
        if (!faults.sync_failed) {
            faults.synced_size = (int64_t)st.st_size;
            faults.synced_fd = fd;
        }
        pthread_mutex_unlock(&faults_lock);
    }
    return r;
}

static int get_rate(PyObject *o, const char *what, uint32_t *out)
{
    double p = PyFloat_AsDouble(o);
    if (p == -1.0 && PyErr_Occurred())
        return -1;
    if (!(p >= 0.0 && p <= 1.0)) {
        PyErr_Format(PyExc_ValueError, "%s must be a probability in [0, 1], not %R", what, o);
        return -1;
    }
    *out = p >= 1.0 ? UINT32_MAX : (uint32_t)(p * 4294967296.0);
    return 0;
}

PyObject *lane_io_faults(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"seed", "fail_write", "tear_write", "fail_sync", "delay_us", NULL};
    PyObject *seed, *fw = NULL, *tw = NULL, *fs = NULL;
    unsigned long long s;
    long long delay = 0;
    uint32_t fail_write = 0, tear_write = 0, fail_sync = 0;
    (void)module;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOL", kw, &seed, &fw, &tw, &fs, &delay))
        return NULL;
    if (seed == Py_None) {
        pthread_mutex_lock(&faults_lock);
        lane_io.pwrite = real_pwrite;
        lane_io.fdatasync = real_fdatasync;
        pthread_mutex_unlock(&faults_lock);
        Py_RETURN_NONE;
    }
    s = PyLong_AsUnsignedLongLongMask(seed);
    if (s == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if ((fw && get_rate(fw, "fail_write", &fail_write) < 0)
        || (tw && get_rate(tw, "tear_write", &tear_write) < 0)
        || (fs && get_rate(fs, "fail_sync", &fail_sync) < 0))
        return NULL;
    if ((uint64_t)fail_write + tear_write > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "fail_write + tear_write must not exceed 1");
        return NULL;
    }
    if (delay < 0 || delay > 1000000) {
        PyErr_Format(PyExc_ValueError, "delay_us must be in [0, 1000000], not %lld", delay);
        return NULL;
    }
    pthread_mutex_lock(&faults_lock);
    memset(&faults, 0, sizeof faults);
    faults.state = (uint64_t)s;
    faults.fail_write = fail_write;
    faults.tear_write = tear_write;
    faults.fail_sync = fail_sync;
    faults.delay_us = (uint32_t)delay;
    faults.synced_size = -1;
    faults.synced_fd = -1;
    lane_io.pwrite = faulty_pwrite;
    lane_io.fdatasync = faulty_fdatasync;
    pthread_mutex_unlock(&faults_lock);
    Py_RETURN_NONE;
}

PyObject *lane_io_fault_counts(PyObject *module, PyObject *unused)
{
    PyObject *r;
    (void)module;
    (void)unused;
    pthread_mutex_lock(&faults_lock);
    r = Py_BuildValue("{s:O,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:i}",
                      "installed", lane_io.pwrite == faulty_pwrite ? Py_True : Py_False,
                      "writes", (long long)faults.writes, "syncs", (long long)faults.syncs,
                      "failed_writes", (long long)faults.failed_writes,
                      "torn_writes", (long long)faults.torn_writes,
                      "short_writes", (long long)faults.short_writes,
                      "failed_syncs", (long long)faults.failed_syncs,
                      "delays", (long long)faults.delays,
                      "synced_size", (long long)faults.synced_size,
                      "synced_fd", faults.synced_fd);
    pthread_mutex_unlock(&faults_lock);
    return r;
}
