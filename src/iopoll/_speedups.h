/* _speedups.h: what the two files of iopoll._speedups share (see _speedups.c): the
 * Context's and Watcher's slots, the array the fast path holds its watchers in, and the
 * functions _os_wait.c and _registration.c give _speedups.c. */

#ifndef IOPOLL_SPEEDUPS_H
#define IOPOLL_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_cslots.h"
#include "_wait_api.h"
#include <errno.h>
#include <string.h>
#include <math.h>
#ifdef __linux__
#include <sys/epoll.h>
#define IOPOLL_HAVE_EPOLL 1
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <poll.h>
#include <time.h> /* clock_gettime */
#define IOPOLL_HAVE_POLL 1
#endif
/* kqueue: BSD and macOS; on Linux only in the test build over libkqueue, which defines
 * IOPOLL_WITH_LIBKQUEUE and puts libkqueue's <sys/event.h> on the include path
 * (tests/test_kqueue_libkqueue.py). */
#if defined(__APPLE__) || defined(__FreeBSD__) || defined(__NetBSD__) || defined(__OpenBSD__) \
    || defined(__DragonFly__) || defined(IOPOLL_WITH_LIBKQUEUE)
#include <sys/types.h>
#include <sys/event.h>
#include <sys/time.h>
#define IOPOLL_HAVE_KQUEUE 1
#endif
#if defined(IOPOLL_HAVE_EPOLL) || defined(IOPOLL_HAVE_POLL) || defined(IOPOLL_HAVE_KQUEUE)
#define IOPOLL_HAVE_NATIVE 1
#endif

/* The slots used, as PyMemberDef pointers taken from the classes' member descriptors.  They
 * stay valid while the classes live; install() keeps a reference to both classes. */
typedef struct {
    PyTypeObject *context_type;
    PyTypeObject *watcher_type;
    PyMemberDef *fast_poll, *watchers, *decode, *decode_low, *max_timeout; /* Context */
    PyMemberDef *native_fd, *native_pollfds, *native_buffer;        /* Context */
    PyMemberDef *by_fd, *first_timer, *usable;                      /* Context */
    PyMemberDef *plain, *probe, *triggered, *data, *events;     /* Watcher */
    PyObject *monotonic;                                        /* time.monotonic */
    PyObject *forever;                                          /* -1.0: no timeout */
    PyObject *zero;                                             /* 0.0 */
    PyObject *str_wait, *str_poll_failed, *str_finish_wait;
    PyObject *str_can_be_woken, *str_poll_forever;
    PyObject *str_native_kqueue, *str_translate_kevents, *str_closed;
    unsigned int read_bit, write_bit;                           /* Event.READ, Event.WRITE */
} Slots;

/* One set per process, made by the one install() call (_speedups.c): there is one
 * iopoll.Context. */
extern Slots slots;

/* Whether the Context may still be waited on: 1; 0 once it is closed, or in a child after
 * fork (its _usable is None: _finish_wait then says which); -1 error. */
static inline int
still_usable(PyObject *self)
{
    PyObject *usable = peek(self, slots.usable);
    return usable == NULL ? -1 : usable != Py_None;
}

/* Reports that fit on the stack; more get the Context's _native_buffer. */
#define STACK_REPORTS 256

/* Where the fast path puts the ready watchers while their probes run Python code, instead
 * of a list that code could reach: new references, `count` of them (-1: none put here, the
 * result is what the call returned).  wait() makes its
 * list of them afterwards; wait_each() (_wait_api.h) visits them.  Only a result of up to
 * STACK_REPORTS watchers goes here; a larger one, and every result of the general path,
 * is a list. */
typedef struct {
    PyObject *held[STACK_REPORTS];
    Py_ssize_t count;
} Held;

#ifdef IOPOLL_HAVE_NATIVE
/* One report of the OS, whichever call made it. */
typedef struct {
    int fd;
    unsigned int bits;
} Report;

/* One OS wait of `timeout` ms (-1: forever), called without the GIL: its count, or -1 with
 * errno set. */
typedef int (*OsWait)(void *call, int timeout);

/* Asked after the signal handlers of an EINTR ran, for a wait whose OS object the Context
 * may have changed meanwhile: 1 wait on; 0 hand the rest of the wait to the Python path
 * (WAIT_HANDED_BACK); -1 error (set). */
typedef int (*Recheck)(void *call);

/* wait_retrying()'s answer when the Context is no longer usable (closed, or a fork child)
 * or the Recheck said 0: the rest of the wait is the Python path's. */
#define WAIT_HANDED_BACK (-2)

/* Called once, with the GIL, before the first call without it: 0, or -1 with an error. */
typedef int (*Prepare)(void *call);

/* _os_wait.c, for every OS wait: the Context's report buffer taken and put back, PEP 475's
 * retry, the reports delivered to their watchers, and _finish_wait. */
PyObject *take_buffer(PyObject *self, Py_ssize_t size);
void put_buffer(PyObject *self, PyObject *buffer);
int wait_retrying(PyObject *self, OsWait wait, void *call, double seconds, Recheck recheck,
                  Prepare prepare, PyObject **started);
PyObject *finish_wait(PyObject *self, PyObject *raw, PyObject *seconds_obj, PyObject **started);
PyObject *finish_handed_back(PyObject *self, PyObject *seconds_obj, PyObject **started);
PyObject *deliver(PyObject *self, const Report *reports, int count, PyObject *seconds_obj,
                  PyObject **started, int cut, Held *held);
#endif

/* _os_wait.c: a report's watcher still open, and its report decoded into it; the error
 * that ends a wait whose poll failed; the clock read once; and the OS waits
 * (_kqueue_wait.c: kevent's). */
int still_open(PyObject *watcher, long fd);
int set_triggered(PyObject *watcher, unsigned long bits, PyObject *low, PyObject *decode);
void poll_failed(PyObject *self);
int read_started(PyObject **started);
#ifdef IOPOLL_HAVE_EPOLL
PyObject *epoll_fast_wait(PyObject *self, int epfd, PyObject *epoll_object,
                          Py_ssize_t nwatchers, PyObject *seconds_obj, double seconds,
                          PyObject **started, int cut, Held *held);
#endif
#ifdef IOPOLL_HAVE_POLL
PyObject *poll_fast_wait(PyObject *self, PyObject *pollfds, PyObject *seconds_obj,
                         double seconds, PyObject **started, int cut, Held *held);
#endif
#ifdef IOPOLL_HAVE_KQUEUE
long native_kqueue_of(PyObject *mechanism);
PyObject *kqueue_fast_wait(PyObject *self, PyObject *mechanism, int kq, Py_ssize_t nwatchers,
                           PyObject *seconds_obj, double seconds, PyObject **started, int cut,
                           Held *held);
#endif

/* _registration.c: add() on context_type and remove() on watcher_type, in C for their usual
 * calls; 0, or -1 with an error set. */
int install_registration(PyTypeObject *context_type, PyTypeObject *watcher_type);

#endif /* IOPOLL_SPEEDUPS_H */
