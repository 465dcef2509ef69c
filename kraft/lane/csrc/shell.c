/* What both I/O loops of the native lane share (follower.c, leader.c): their thread, the
 * pipe that stops it, the pipe that says it ended and how, and sending a whole buffer. */
#include "lane.h"

/* How a loop ended, by its state (SHELL_*): the reason its report gives. */
const char *const shell_reasons[] = {"idle", "running", "handover", "stopped", "closed", "error"};

int thread_fail(shell_thread *t, const char *at)
{
    t->error = errno;
    t->error_at = at;
    t->state = SHELL_ERROR;
    return 0;
}

/* The two pipes, once (-1 with the Python error set). */
int thread_open(shell_thread *t)
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

PyObject *thread_start(shell_thread *t, void *(*run)(void *), void *arg, const char *what)
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
void thread_done(shell_thread *t)
{
    uint8_t one = 1;
    ssize_t ignored = write(t->done_pipe[1], &one, 1);
    (void)ignored;
}

/* Ask the loop to end if it runs, and wait for its thread (without the GIL). */
void thread_join(shell_thread *t)
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

void thread_close(shell_thread *t)
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

int send_all_or_stop(int sock, const uint8_t *p, size_t n, int stop_fd)
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

int shell_send_all(int sock, const uint8_t *p, size_t n)
{
    return send_all_or_stop(sock, p, n, -1);
}

/* Take every whole frame at the head of the input: 1 to go on reading, 0 when the loop ends
 * (state set). */
