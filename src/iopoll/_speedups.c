/* iopoll._speedups: Context.wait()'s fast path in C.
 *
 * The pure-Python Context.wait() (src/_iopoll_core/context.py) is the reference; this is the
 * same fast path, line for line, without the interpreter's frame and bytecode around it.  On
 * EPOLL it goes one step further: where the Python path calls select.epoll.poll(), which
 * builds a list of (fd, bits) tuples that the loop then looks up in a dict, this calls
 * epoll_wait(2) itself on the Context's epoll fd (_native_fd), with the GIL released, into
 * an array on the stack, and finds each report's watcher in the Context's fd-indexed list
 * (_by_fd): no tuple, no hash per report.  EINTR is PEP 475's: the signal handlers run, an
 * exception from one leaves wait() as it is, and otherwise the wait goes on for the time
 * that is left.  Everything that is not that path goes back to the Context's Python methods:
 *
 *   self._wait(timeout, microseconds, max_events)   any other form of wait()
 *   self._poll_failed(exc)                          the mechanism's poll raised OSError
 *   self._finish_wait(raw, seconds, started)        a report needs care (_collect)
 *
 * so that no bookkeeping lives here.  install(context_type, watcher_type) puts this wait() on
 * context_type and a C getter for `data` (read by every event loop for every report) on
 * watcher_type; iopoll does so for iopoll.Context and iopoll.Watcher unless the
 * IOPOLL_PURE_PYTHON environment variable is set.
 *
 * The Context and Watcher attributes read here are __slots__ of those Python classes.  Their
 * member descriptors are looked up once, in install(), and the slots read and written at
 * their offsets (_cslots.h): what `obj._slot` does in Python, with the type check that a
 * descriptor implies done once instead of per access.
 */

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
#if defined(IOPOLL_HAVE_EPOLL) || defined(IOPOLL_HAVE_POLL)
#define IOPOLL_HAVE_NATIVE 1
#endif

/* The slots used, as PyMemberDef pointers taken from the classes' member descriptors.  They
 * stay valid while the classes live; install() keeps a reference to both classes. */
typedef struct {
    PyTypeObject *context_type;
    PyTypeObject *watcher_type;
    PyMemberDef *fast_poll, *watchers, *decode, *decode_low, *max_timeout; /* Context */
    PyMemberDef *native_fd, *native_pollfds, *native_buffer;        /* Context */
    PyMemberDef *by_fd, *first_timer;                               /* Context */
    PyMemberDef *plain, *probe, *triggered, *data;              /* Watcher */
    PyObject *monotonic;                                        /* time.monotonic */
    PyObject *forever;                                          /* -1.0: no timeout */
    PyObject *zero;                                             /* 0.0 */
    PyObject *str_wait, *str_poll_failed, *str_finish_wait;
} Slots;

/* One set per process, made by the one install() call: there is one iopoll.Context. */
static Slots slots;
static int slots_made = 0;

/* Reports that fit on the stack; more get the Context's _native_buffer. */
#define STACK_REPORTS 256

/* Where the fast path puts the ready watchers while their probes run Python code, instead
 * of a list that code could reach: new references, `count` of them.  wait() makes its
 * list of them afterwards; wait_each() (_wait_api.h) visits them.  Only a result of up to
 * STACK_REPORTS watchers goes here; a larger one, and every result of the general path,
 * is a list. */
typedef struct {
    PyObject *held[STACK_REPORTS];
    Py_ssize_t count;
} Held;

static int
is_int_zero(PyObject *value)
{
    int overflow;
    return PyLong_CheckExact(value) && PyLong_AsLongAndOverflow(value, &overflow) == 0
           && !overflow;
}

/* Parse wait(timeout=None, microseconds=0, max_events=None); borrowed references. */
static int
parse_wait_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    static const char *const names[] = {"timeout", "microseconds", "max_events"};
    out[0] = Py_None;
    out[1] = NULL; /* NULL: the default 0 */
    out[2] = Py_None;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError,
                     "wait() takes at most 3 positional arguments (%zd given)", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        out[i] = args[i];
    }
    if (kwnames == NULL) {
        return 0;
    }
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t index = -1;
        for (Py_ssize_t i = 0; i < 3; i++) {
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                index = i;
                break;
            }
        }
        if (index < 0) {
            PyErr_Format(PyExc_TypeError,
                         "wait() got an unexpected keyword argument '%U'", key);
            return -1;
        }
        if (index < nargs) {
            PyErr_Format(PyExc_TypeError,
                         "wait() got multiple values for argument '%s'", names[index]);
            return -1;
        }
        out[index] = args[nargs + k];
    }
    return 0;
}

static PyObject *
general_wait(PyObject *self, PyObject **arguments)
{
    PyObject *call_args[3] = {arguments[0], arguments[1], arguments[2]};
    PyObject *zero = NULL;
    if (call_args[1] == NULL) {
        zero = PyLong_FromLong(0);
        if (zero == NULL) {
            return NULL;
        }
        call_args[1] = zero;
    }
    PyObject *result = call_method(self, slots.str_wait, call_args, 3);
    Py_XDECREF(zero);
    return result;
}

/* Whether `watcher` (any object, held by the caller) is a plain stream watcher whose stream
 * still has `fd` open, as the Python fast path's loop body asks before it decodes: 1 yes;
 * 0 it needs care (not a watcher, one-shot, not a stream, closed, or the number now names
 * another file); -1 error. */
static int
still_open(PyObject *watcher, long fd)
{
    if (!PyObject_TypeCheck(watcher, slots.watcher_type)) {
        return 0;
    }
    PyObject *plain = peek(watcher, slots.plain);
    if (plain == NULL) {
        return -1;
    }
    if (plain != Py_True) {
        return 0; /* one-shot, or a handle that is not a stream: _collect */
    }
    PyObject *probe = get_slot(watcher, slots.probe);
    if (probe == NULL) {
        return -1;
    }
    PyObject *probed = PyObject_CallNoArgs(probe);
    Py_DECREF(probe);
    int same;
    if (probed != NULL && PyLong_CheckExact(probed)) {
        /* The common case, compared in C: fileno() gave an exact int. */
        int overflow;
        long probed_fd = PyLong_AsLongAndOverflow(probed, &overflow);
        same = !overflow && probed_fd == fd;
    }
    else if (probed != NULL) {
        PyObject *fd_obj = PyLong_FromLong(fd);
        same = fd_obj == NULL ? -1 : PyObject_RichCompareBool(probed, fd_obj, Py_EQ);
        Py_XDECREF(fd_obj);
    }
    else {
        same = -1;
    }
    Py_XDECREF(probed);
    if (same < 0 && PyErr_ExceptionMatches(PyExc_Exception)) {
        /* A closed file's fileno() raises, and so may a broken handle's, or its number's
         * comparison: as in Python, _collect decides (it takes any Exception for closed). */
        PyErr_Clear();
        return 0;
    }
    return same;
}

/* `watcher`'s report decoded and set as its _triggered, once still_open() said 1: 1 done;
 * 0 a bit pattern the table lacks (POLLNVAL), for _collect; -1 error.  `low` is the
 * Context's _decode_low, indexed by the bits below its length; `decode` its _decode. */
static int
set_triggered(PyObject *watcher, unsigned long bits, PyObject *low, PyObject *decode)
{
    PyObject *triggered; /* borrowed: the tables hold it */
    if (bits < (unsigned long)PyTuple_GET_SIZE(low)) {
        triggered = PyTuple_GET_ITEM(low, (Py_ssize_t)bits);
        if (triggered == Py_None) {
            return 0;
        }
    }
    else {
        PyObject *bits_obj = PyLong_FromUnsignedLong(bits);
        if (bits_obj == NULL) {
            return -1;
        }
        triggered = PyDict_GetItemWithError(decode, bits_obj); /* runs no Python code */
        Py_DECREF(bits_obj);
        if (triggered == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
    }
    set_slot(watcher, slots.triggered, triggered);
    return 1;
}

/* 1: the (fd, bits) report from the mechanism's poll was handled (its watcher appended to
 * ready); 0: it needs care; -1: error. */
static int
take_report(PyObject *report, PyObject *watchers, PyObject *low, PyObject *decode,
            PyObject *ready)
{
    if (!PyTuple_CheckExact(report) || PyTuple_GET_SIZE(report) != 2) {
        return 0;
    }
    PyObject *fd = PyTuple_GET_ITEM(report, 0), *bits = PyTuple_GET_ITEM(report, 1);
    if (!PyLong_CheckExact(fd) || !PyLong_CheckExact(bits)) {
        return 0; /* not what a mechanism reports: _collect */
    }
    PyObject *watcher = PyDict_GetItemWithError(watchers, fd); /* borrowed */
    if (watcher == NULL) {
        return PyErr_Occurred() ? -1 : 0; /* no watcher: a stale registration */
    }
    int overflow;
    long fd_value = PyLong_AsLongAndOverflow(fd, &overflow);
    unsigned long bits_value = PyLong_AsUnsignedLong(bits);
    if (overflow || (bits_value == (unsigned long)-1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0; /* numbers no OS reports: _collect */
    }
    Py_INCREF(watcher); /* the probe may run code that drops it from the Context */
    int handled = still_open(watcher, fd_value);
    if (handled == 1) {
        handled = set_triggered(watcher, bits_value, low, decode);
    }
    if (handled == 1 && PyList_Append(ready, watcher) < 0) {
        handled = -1;
    }
    Py_DECREF(watcher);
    return handled;
}

/* Raise what wait() raises for the OSError set now: Context._poll_failed decides (a signal
 * handler's exception is never an OSError here: PyErr_CheckSignals returned it already). */
static void
poll_failed(PyObject *self)
{
    PyObject *exc = fetch_exception();
    PyObject *failed = call_method(self, slots.str_poll_failed, &exc, 1);
    Py_DECREF(exc);
    if (failed != NULL) { /* it always raises */
        Py_DECREF(failed);
        PyErr_SetString(PyExc_SystemError, "Context._poll_failed() returned");
    }
}

#ifdef IOPOLL_HAVE_NATIVE

/* One report of the OS, whichever call made it. */
typedef struct {
    int fd;
    unsigned int bits;
} Report;

/* At least `size` bytes for one OS wait's reports, when they may not fit on the stack: the
 * Context's _native_buffer (a bytearray the Python side owns), taken out of its slot for
 * the call so that a wait() nested in a probe finds None there and makes its own.  A new
 * reference, or NULL with an error; put_buffer() gives it back.  One array grown as the
 * watchers grow, instead of a malloc and a free per call (at 1,000 watchers, 12 KiB: the
 * allocator's slow path, and more than the rest of the call). */
static PyObject *
take_buffer(PyObject *self, Py_ssize_t size)
{
    PyObject *buffer = get_slot(self, slots.native_buffer);
    if (buffer == NULL) {
        return NULL;
    }
    if (PyByteArray_CheckExact(buffer)) {
        set_slot(self, slots.native_buffer, Py_None);
    }
    else {
        Py_SETREF(buffer, PyByteArray_FromStringAndSize(NULL, 0));
        if (buffer == NULL) {
            return NULL;
        }
    }
    if (PyByteArray_GET_SIZE(buffer) < size && PyByteArray_Resize(buffer, size) < 0) {
        Py_DECREF(buffer);
        return NULL;
    }
    return buffer;
}

/* take_buffer()'s array back into the Context's slot; steals the reference. */
static void
put_buffer(PyObject *self, PyObject *buffer)
{
    set_slot(self, slots.native_buffer, buffer);
    Py_DECREF(buffer);
}

static double
monotonic_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* time.monotonic()'s clock on Linux and BSD */
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static int
milliseconds(double seconds)
{
    /* Rounded up, as CPython's epoll.poll() and poll.poll() do, so that a wait never ends
     * early; the caller keeps seconds within Mechanism.max_timeout, an int of ms. */
    double ms = ceil(seconds * 1e3);
    return ms > (double)INT_MAX ? INT_MAX : (int)ms;
}

/* *started = time.monotonic() unless it was read already (wait_with() leaves it NULL until
 * the wait blocks or must resume); 0, or -1 with the error set. */
static int
read_started(PyObject **started)
{
    if (*started == NULL && (*started = PyObject_CallNoArgs(slots.monotonic)) == NULL) {
        return -1;
    }
    return 0;
}

/* One OS wait of `timeout` ms (-1: forever), called without the GIL: its count, or -1 with
 * errno set. */
typedef int (*OsWait)(void *call, int timeout);

/* `wait(call, ...)` for up to `seconds` (< 0: forever), as PEP 475 says: EINTR runs the
 * signal handlers, and one that raises ends the wait with its exception (-1); otherwise the
 * wait goes on for the time that is left.  Another error: what _poll_failed raises (-1).
 * `os_object` (the select.epoll object, or NULL) is asked after the handlers whether one of
 * them closed it, as CPython's own retry finds (EBADF): its fd number may be another file's
 * by then.  Before it blocks, it sets *started, if NULL, to time.monotonic() (see
 * wait_with()). */
static int
wait_retrying(PyObject *self, OsWait wait, void *call, double seconds, PyObject *os_object,
              PyObject **started)
{
    int timeout = seconds < 0.0 ? -1 : milliseconds(seconds);
    double deadline = 0.0; /* read when the wait first blocks (`blocked`) */
    int blocked = 0;
    /* First what is ready now, asked with the GIL held, since nothing blocks: an event loop
     * mostly calls wait() with something ready, and then skips giving up and taking back
     * the GIL (two mutex operations, and waking any thread that waits for it; threads get
     * the GIL at the interpreter's switch interval, as from any other C call).  Only when
     * nothing is ready does the wait block, with the GIL released.  A zero timeout never
     * blocks, so that call is the whole wait (an event loop's tick after a busy one). */
    int now_first = 1;
    for (;;) {
        int count;
        if (now_first) {
            now_first = 0;
            count = wait(call, 0);
            if (count == 0 && timeout != 0) {
                continue; /* nothing yet: the blocking wait */
            }
        }
        else {
            if (!blocked) {
                /* The clock, once: before the first blocking call, whether the
                 * non-blocking one found nothing or was interrupted (EINTR). */
                blocked = 1;
                if (read_started(started) < 0) {
                    return -1;
                }
                deadline = timeout > 0 ? monotonic_seconds() + seconds : 0.0;
            }
            Py_BEGIN_ALLOW_THREADS
            count = wait(call, timeout);
            Py_END_ALLOW_THREADS
        }
        if (count >= 0) {
            return count;
        }
        if (errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            poll_failed(self);
            return -1;
        }
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
        if (os_object != NULL) {
            PyObject *closed = PyObject_GetAttrString(os_object, "closed");
            int is_closed = closed == NULL ? -1 : PyObject_IsTrue(closed);
            Py_XDECREF(closed);
            if (is_closed < 0) {
                return -1;
            }
            if (is_closed) {
                errno = EBADF;
                PyErr_SetFromErrno(PyExc_OSError);
                poll_failed(self);
                return -1;
            }
        }
        if (timeout > 0 && blocked) { /* else the first blocking call has it all */
            double left = deadline - monotonic_seconds();
            if (left <= 0.0) {
                return 0;
            }
            timeout = milliseconds(left);
        }
    }
}

/* The ready watchers for `count` reports, found in the Context's fd-indexed list; or, when
 * one needs care (or none came and `cut` says a timer's deadline cut the wait short of
 * `seconds_obj`), what _finish_wait makes of all of them as (fd, bits) pairs.  No more
 * than `held` holds go there, and the result is None. */
static PyObject *
deliver(PyObject *self, const Report *reports, int count, PyObject *seconds_obj,
        PyObject **started, int cut, Held *held)
{
    PyObject *by_fd = get_slot(self, slots.by_fd);
    PyObject *low = get_slot(self, slots.decode_low);
    PyObject *decode = get_slot(self, slots.decode);
    PyObject *ready = NULL, *result = NULL;
    /* Where the watchers go while the probes run Python code: held's array or, for more,
     * the list's own items with the list out of the collector's sight until it is full, so
     * that nothing a probe runs can reach (gc.get_objects) a list with empty items, let
     * alone resize it under `into`. */
    PyObject **into;
    if (count <= STACK_REPORTS) {
        into = held->held;
    }
    else {
        if (by_fd == NULL || (ready = PyList_New(count)) == NULL) {
            goto finally;
        }
        PyObject_GC_UnTrack(ready);
        into = ((PyListObject *)ready)->ob_item;
    }
    if (by_fd == NULL || low == NULL || decode == NULL) {
        goto finally;
    }
    int handled = PyList_CheckExact(by_fd) && PyTuple_CheckExact(low)
                  && PyDict_CheckExact(decode) && !(cut && !count);
    int taken = 0; /* the watchers put in `into` so far */
    for (int i = 0; i < count && handled == 1; i++) {
        int fd = reports[i].fd;
        /* Re-read each time: a probe may have run code that changed the Context. */
        if (fd < 0 || fd >= PyList_GET_SIZE(by_fd)) {
            handled = 0; /* no watcher: a stale registration */
            break;
        }
        PyObject *watcher = Py_NewRef(PyList_GET_ITEM(by_fd, fd));
        handled = still_open(watcher, fd);
        if (handled == 1) {
            handled = set_triggered(watcher, reports[i].bits, low, decode);
        }
        if (handled == 1) {
            into[taken++] = watcher; /* held's array, or the list, takes the reference */
        }
        else {
            Py_DECREF(watcher);
        }
    }
    if (handled == 1) {
        if (ready == NULL) {
            held->count = taken;
            result = Py_NewRef(Py_None);
        }
        else {
            PyObject_GC_Track(ready);
            result = Py_NewRef(ready);
        }
        goto finally;
    }
    if (ready == NULL) { /* held's; the list's own go with it */
        for (int i = 0; i < taken; i++) {
            Py_DECREF(into[i]);
        }
    }
    if (handled < 0) {
        goto finally;
    }
    PyObject *raw = PyList_New(count);
    if (raw == NULL) {
        goto finally;
    }
    for (int i = 0; i < count; i++) {
        PyObject *pair = Py_BuildValue("(ik)", reports[i].fd, (unsigned long)reports[i].bits);
        if (pair == NULL) {
            Py_DECREF(raw);
            goto finally;
        }
        PyList_SET_ITEM(raw, i, pair);
    }
    if (read_started(started) < 0) {
        Py_DECREF(raw);
        goto finally;
    }
    PyObject *finish_args[3] = {raw, seconds_obj, *started};
    result = call_method(self, slots.str_finish_wait, finish_args, 3);
    Py_DECREF(raw);

finally:
    Py_XDECREF(ready);
    Py_XDECREF(decode);
    Py_XDECREF(low);
    Py_XDECREF(by_fd);
    return result;
}

#endif /* IOPOLL_HAVE_NATIVE */

#ifdef IOPOLL_HAVE_EPOLL

typedef struct {
    int epfd;
    struct epoll_event *events;
    int size;
} EpollCall;

static int
epoll_call(void *call, int timeout)
{
    EpollCall *c = call;
    return epoll_wait(c->epfd, c->events, c->size, timeout);
}

_Static_assert(sizeof(Report) <= sizeof(struct epoll_event), "reports overwrite the events");

/* wait()'s fast path on EPOLL: epoll_wait(2) on the Context's epoll fd, with room for a
 * report from each of `nwatchers` watchers (the fast path has no max_events). */
static PyObject *
epoll_fast_wait(PyObject *self, int epfd, PyObject *epoll_object, Py_ssize_t nwatchers,
                PyObject *seconds_obj, double seconds, PyObject **started, int cut, Held *held)
{
    struct epoll_event stack_events[STACK_REPORTS];
    EpollCall call = {epfd, stack_events, nwatchers > INT_MAX ? INT_MAX : (int)nwatchers};
    PyObject *buffer = NULL, *result = NULL;
    if (call.size > STACK_REPORTS) {
        buffer = take_buffer(self, (Py_ssize_t)call.size * (Py_ssize_t)sizeof(struct epoll_event));
        if (buffer == NULL) {
            return NULL;
        }
        call.events = (struct epoll_event *)PyByteArray_AS_STRING(buffer);
    }
    int count = wait_retrying(self, epoll_call, &call, seconds, epoll_object, started);
    if (count >= 0) {
        /* The reports are written over the events, in order: a Report is no larger than
         * an epoll_event, so reports[i] never reaches events[i], which is read first. */
        Report *reports = (Report *)call.events;
        for (int i = 0; i < count; i++) {
            struct epoll_event event = call.events[i];
            reports[i].fd = event.data.fd; /* CPython's epoll registers data.fd = fd */
            reports[i].bits = event.events;
        }
        result = deliver(self, reports, count, seconds_obj, started, cut, held);
    }
    if (buffer != NULL) {
        put_buffer(self, buffer);
    }
    return result;
}

#endif /* IOPOLL_HAVE_EPOLL */

#ifdef IOPOLL_HAVE_POLL

typedef struct {
    struct pollfd *fds;
    nfds_t size;
} PollCall;

static int
poll_call(void *call, int timeout)
{
    PollCall *c = call;
    return poll(c->fds, c->size, timeout);
}

/* wait()'s fast path on POLL: poll(2) on a copy of the mechanism's struct pollfd array
 * (`pollfds`, a bytearray).  A copy, as CPython's poll object polls its own array: a signal
 * handler run between retries, or another thread, may change the poll set meanwhile. */
static PyObject *
poll_fast_wait(PyObject *self, PyObject *pollfds, PyObject *seconds_obj, double seconds,
               PyObject **started, int cut, Held *held)
{
    struct pollfd stack_fds[STACK_REPORTS];
    Report stack_reports[STACK_REPORTS];
    Report *reports = stack_reports;
    size_t size = (size_t)PyByteArray_GET_SIZE(pollfds) / sizeof(struct pollfd);
    PollCall call = {stack_fds, (nfds_t)size};
    PyObject *buffer = NULL, *result = NULL;
    if (size > STACK_REPORTS) {
        /* The copy of the array, then room for a report per entry. */
        buffer = take_buffer(self, (Py_ssize_t)(size * (sizeof(struct pollfd) + sizeof(Report))));
        if (buffer == NULL) {
            return NULL;
        }
        call.fds = (struct pollfd *)PyByteArray_AS_STRING(buffer);
        reports = (Report *)(call.fds + size);
    }
    memcpy(call.fds, PyByteArray_AS_STRING(pollfds), size * sizeof(struct pollfd));
    int count = wait_retrying(self, poll_call, &call, seconds, NULL, started);
    if (count >= 0) {
        int found = 0;
        for (nfds_t i = 0; i < call.size && found < count; i++) {
            if (call.fds[i].revents) { /* in the array's order: the poll object's (_poll.py) */
                reports[found].fd = call.fds[i].fd;
                reports[found].bits = (unsigned short)call.fds[i].revents;
                found++;
            }
        }
        result = deliver(self, reports, found, seconds_obj, started, cut, held);
    }
    if (buffer != NULL) {
        put_buffer(self, buffer);
    }
    return result;
}

#endif /* IOPOLL_HAVE_POLL */

/* wait(*arguments) (timeout, microseconds or NULL for 0, max_events): a list, or None
 * when the fast path put the watchers in `held` instead (fast_wait() and wait_each()). */
static PyObject *
wait_with(PyObject *self, PyObject **arguments, Held *held)
{
    PyObject *timeout = arguments[0], *microseconds = arguments[1];
    PyObject *poll = NULL, *watchers = NULL, *decode = NULL, *low = NULL, *max_timeout = NULL;
    PyObject *seconds = NULL, *started = NULL, *raw = NULL, *ready = NULL, *result = NULL;
    PyObject *first = NULL, *now = NULL, *wait_obj = NULL;

    /* wait()'s fast path: as in Python, a microseconds that is not the int 0 (0.0, False)
     * goes to _wait(), which refuses it. */
    if (arguments[2] != Py_None || (microseconds != NULL && !is_int_zero(microseconds))) {
        return general_wait(self, arguments);
    }
    poll = get_slot(self, slots.fast_poll);
    watchers = get_slot(self, slots.watchers);
    if (poll == NULL || watchers == NULL) {
        goto finally;
    }
    if (poll == Py_None || !PyDict_CheckExact(watchers) || PyDict_GET_SIZE(watchers) == 0) {
        result = general_wait(self, arguments);
        goto finally;
    }
    double value = -1.0; /* the timeout in seconds; -1.0: none */
    if (timeout == Py_None) {
        seconds = Py_NewRef(slots.forever);
        started = Py_NewRef(slots.forever);
    }
    else if (PyFloat_CheckExact(timeout) || PyLong_CheckExact(timeout)) {
        max_timeout = get_slot(self, slots.max_timeout);
        if (max_timeout == NULL) {
            goto finally;
        }
        if (PyFloat_CheckExact(timeout)) {
            value = PyFloat_AS_DOUBLE(timeout);
        }
        else {
            value = PyLong_AsDouble(timeout);
            if (value == -1.0 && PyErr_Occurred()) { /* too large for a double */
                PyErr_Clear();
                result = general_wait(self, arguments);
                goto finally;
            }
        }
        /* 0, a loop's usual timeout after a busy tick, is within any limit (>= 0). */
        double limit = value == 0.0 ? 0.0 : PyFloat_AsDouble(max_timeout);
        if (limit == -1.0 && PyErr_Occurred()) {
            goto finally;
        }
        if (!(value >= 0.0 && value <= limit)) {
            result = general_wait(self, arguments);
            goto finally;
        }
        seconds = Py_NewRef(timeout);
        /* The clock is read only when the wait may have to be resumed (_finish_wait), and
         * only if it is: before the OS wait blocks (wait_retrying), or, when it did not
         * block, once a report needs care.  NULL until then.  Python reads it before its
         * poll; read after a poll that did not block, it is later by the microseconds the
         * poll and the probes took, by which a resumed wait may end later, never sooner. */
        started = value > 0.0 ? NULL : Py_NewRef(slots.zero);
    }
    else {
        result = general_wait(self, arguments);
        goto finally;
    }

    /* A timer is armed: a due one goes to _wait(), which reports timers; otherwise the OS
     * wait ends at its deadline at the latest (`cut`), and _finish_wait goes on from there. */
    double wait_value = value;
    int cut = 0;
    first = get_slot(self, slots.first_timer);
    if (first == NULL) {
        goto finally;
    }
    if (first != Py_None) {
        double deadline = PyFloat_AsDouble(first);
        if (deadline == -1.0 && PyErr_Occurred()) {
            goto finally;
        }
        now = PyObject_CallNoArgs(slots.monotonic);
        if (now == NULL) {
            goto finally;
        }
        double left = deadline - PyFloat_AsDouble(now);
        if (!(left > 0.0)) {
            result = general_wait(self, arguments);
            goto finally;
        }
        if (value < 0.0 || left < value) {
            wait_value = left;
            cut = 1;
        }
    }

#ifdef IOPOLL_HAVE_EPOLL
    PyObject *native = get_slot(self, slots.native_fd);
    if (native == NULL) {
        goto finally;
    }
    long epfd = PyLong_Check(native) ? PyLong_AsLong(native) : -1;
    Py_DECREF(native);
    if (epfd == -1 && PyErr_Occurred()) {
        goto finally;
    }
    if (epfd >= 0 && epfd <= INT_MAX) {
        /* _fast_poll is the epoll object's bound poll(): that object, to ask if closed. */
        PyObject *epoll_object = PyCFunction_Check(poll) ? PyCFunction_GET_SELF(poll) : NULL;
        result = epoll_fast_wait(self, (int)epfd, epoll_object, PyDict_GET_SIZE(watchers),
                                 seconds, wait_value, &started, cut, held);
        goto finally;
    }
#endif
#ifdef IOPOLL_HAVE_POLL
    PyObject *pollfds = get_slot(self, slots.native_pollfds);
    if (pollfds == NULL) {
        goto finally;
    }
    if (PyByteArray_CheckExact(pollfds)) {
        result = poll_fast_wait(self, pollfds, seconds, wait_value, &started, cut, held);
        Py_DECREF(pollfds);
        goto finally;
    }
    Py_DECREF(pollfds);
#endif

    if (cut) {
        wait_obj = PyFloat_FromDouble(wait_value);
        if (wait_obj == NULL) {
            goto finally;
        }
    }
    if (read_started(&started) < 0) {
        goto finally; /* the mechanism's poll may block: the clock first, as in Python */
    }
    PyObject *poll_args[2] = {cut ? wait_obj : seconds, NULL};
    PyObject *registered = PyLong_FromSsize_t(PyDict_GET_SIZE(watchers));
    if (registered == NULL) {
        goto finally;
    }
    poll_args[1] = registered;
    raw = PyObject_Vectorcall(poll, poll_args, 2, NULL);
    Py_DECREF(registered);
    if (raw == NULL) {
        if (PyErr_ExceptionMatches(PyExc_OSError)) {
            poll_failed(self);
        }
        goto finally;
    }

    decode = get_slot(self, slots.decode);
    low = get_slot(self, slots.decode_low);
    if (decode == NULL || low == NULL) {
        goto finally;
    }
    int handled = 0;
    if (PyList_CheckExact(raw) && PyDict_CheckExact(decode) && PyTuple_CheckExact(low)
        && !(cut && PyList_GET_SIZE(raw) == 0)) {
        ready = PyList_New(0);
        if (ready == NULL) {
            goto finally;
        }
        handled = 1;
        /* The list may not change under us: the mechanism made it for this call alone. */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(raw) && handled == 1; i++) {
            handled = take_report(PyList_GET_ITEM(raw, i), watchers, low, decode, ready);
        }
        if (handled < 0) {
            goto finally;
        }
    }
    if (handled) {
        result = Py_NewRef(ready);
    }
    else {
        PyObject *finish_args[3] = {raw, seconds, started};
        result = call_method(self, slots.str_finish_wait, finish_args, 3);
    }

finally:
    Py_XDECREF(wait_obj);
    Py_XDECREF(now);
    Py_XDECREF(first);
    Py_XDECREF(ready);
    Py_XDECREF(raw);
    Py_XDECREF(started);
    Py_XDECREF(seconds);
    Py_XDECREF(max_timeout);
    Py_XDECREF(low);
    Py_XDECREF(decode);
    Py_XDECREF(watchers);
    Py_XDECREF(poll);
    return result;
}

static PyObject *
fast_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *arguments[3];
    if (parse_wait_args(args, nargs, kwnames, arguments) < 0) {
        return NULL;
    }
    Held held;
    held.count = 0;
    PyObject *result = wait_with(self, arguments, &held);
    if (result != Py_None) {
        return result; /* a list, or NULL */
    }
    Py_DECREF(result);
    if ((result = PyList_New(held.count)) == NULL) {
        for (Py_ssize_t i = 0; i < held.count; i++) {
            Py_DECREF(held.held[i]);
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < held.count; i++) {
        PyList_SET_ITEM(result, i, held.held[i]); /* the list takes the references */
    }
    return result;
}

/* _wait_api.h's wait_each(), for an iopoll.Context (the caller checks that its wait() is
 * this module's).  The visits come after the wait is over, as a loop over the list would:
 * the report array is back in the Context and every watcher was probed first. */
static Py_ssize_t
wait_each(PyObject *self, PyObject *timeout, IopollVisit visit, void *arg)
{
    Held held;
    held.count = 0;
    PyObject *arguments[3] = {timeout, NULL, Py_None};
    PyObject *result = wait_with(self, arguments, &held);
    if (result == NULL) {
        return -1;
    }
    Py_ssize_t visited = 0;
    if (result == Py_None) {
        int failed = 0;
        for (Py_ssize_t i = 0; i < held.count; i++) {
            failed = failed || visit(arg, held.held[i]) < 0;
            Py_DECREF(held.held[i]);
        }
        visited = failed ? -1 : held.count;
    }
    else {
        visited = for_each(result, visit, arg);
    }
    Py_DECREF(result);
    return visited;
}

static PyObject *fast_wait(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

static const IopollWaitApi wait_api = {IOPOLL_WAIT_API_VERSION, fast_wait, wait_each};

static PyMethodDef wait_def = {
    "wait",
    (PyCFunction)(void (*)(void))fast_wait,
    METH_FASTCALL | METH_KEYWORDS,
    "wait($self, /, timeout=None, microseconds=0, max_events=None)\n--\n\n"
    "Wait until watchers are ready and return them, one entry per watcher.\n\n"
    "``timeout`` is ``None`` (until something is ready), seconds as ``int`` or\n"
    "``float``, or a ``timedelta``; ``microseconds`` is added to it.  At most\n"
    "``max_events`` watchers are returned; the rest stay ready for the next call.\n\n"
    "A context holding only fired one-shot watchers has nothing that can become ready:\n"
    "``wait(None)`` then blocks until a signal handler raises.\n\n"
    "Runs in C (iopoll._speedups); the pure-Python method it speeds up is the reference.",
};

/* Watcher.data: a read-only member at the offset of the _data slot (install() sets it), so
 * that CPython 3.11+ specializes `watcher.data` as a slot read; a property, or a getset,
 * costs a generic attribute lookup per read, and a loop reads it for every report. */
static PyMemberDef data_def[] = {
    {"data", Py_T_OBJECT_EX, 0, Py_READONLY, "The user data given to ``add`` or ``modify``."},
    {NULL},
};

static PyObject *
install(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "install(context_type, watcher_type) takes two classes");
        return NULL;
    }
    if (slots_made) {
        PyErr_SetString(PyExc_RuntimeError, "install() was already called");
        return NULL;
    }
    PyTypeObject *context_type = (PyTypeObject *)args[0];
    PyTypeObject *watcher_type = (PyTypeObject *)args[1];
    Slots found = {0};
    found.context_type = (PyTypeObject *)Py_NewRef(context_type);
    found.watcher_type = (PyTypeObject *)Py_NewRef(watcher_type);
    if (!(found.fast_poll = member_of(context_type, "_fast_poll"))
        || !(found.watchers = member_of(context_type, "_watchers"))
        || !(found.decode = member_of(context_type, "_decode"))
        || !(found.decode_low = member_of(context_type, "_decode_low"))
        || !(found.max_timeout = member_of(context_type, "_max_timeout"))
        || !(found.native_fd = member_of(context_type, "_native_fd"))
        || !(found.native_pollfds = member_of(context_type, "_native_pollfds"))
        || !(found.native_buffer = member_of(context_type, "_native_buffer"))
        || !(found.by_fd = member_of(context_type, "_by_fd"))
        || !(found.first_timer = member_of(context_type, "_first_timer"))
        || !(found.plain = member_of(watcher_type, "_plain"))
        || !(found.probe = member_of(watcher_type, "_probe"))
        || !(found.triggered = member_of(watcher_type, "_triggered"))
        || !(found.data = member_of(watcher_type, "_data"))) {
        goto error;
    }
    PyObject *time_module = PyImport_ImportModule("time");
    if (time_module == NULL) {
        goto error;
    }
    found.monotonic = PyObject_GetAttrString(time_module, "monotonic");
    Py_DECREF(time_module);
    if (found.monotonic == NULL
        || !(found.forever = PyFloat_FromDouble(-1.0))
        || !(found.zero = PyFloat_FromDouble(0.0))
        || !(found.str_wait = PyUnicode_InternFromString("_wait"))
        || !(found.str_poll_failed = PyUnicode_InternFromString("_poll_failed"))
        || !(found.str_finish_wait = PyUnicode_InternFromString("_finish_wait"))) {
        goto error;
    }
    slots = found;
    slots_made = 1;
    data_def[0].offset = found.data->offset;
    if (set_attribute(context_type, PyDescr_NewMethod(context_type, &wait_def)) < 0
        || set_attribute(watcher_type, PyDescr_NewMember(watcher_type, data_def)) < 0) {
        return NULL; /* the slots stay: a class may hold one of the two already */
    }
    Py_RETURN_NONE;

error:
    Py_XDECREF(found.context_type);
    Py_XDECREF(found.watcher_type);
    Py_XDECREF(found.monotonic);
    Py_XDECREF(found.forever);
    Py_XDECREF(found.zero);
    Py_XDECREF(found.str_wait);
    Py_XDECREF(found.str_poll_failed);
    Py_XDECREF(found.str_finish_wait);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "install(context_type, watcher_type)\n--\n\n"
     "Put the C ``wait()`` on ``context_type`` and the C ``data`` getter on ``watcher_type``."},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    PyObject *capsule = PyCapsule_New((void *)&wait_api, IOPOLL_WAIT_API_CAPSULE, NULL);
    if (capsule == NULL) {
        return -1;
    }
    int failed = PyModule_AddObjectRef(module, "_C_API", capsule);
    Py_DECREF(capsule);
    return failed;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* One install() per process (the Slots above are static): not per interpreter. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "iopoll._speedups",
    "Context.wait()'s fast path in C (optional; the pure-Python one is the reference).",
    0,             /* m_size: no module state; install() binds to the classes it is given */
    module_methods,
    module_slots,  /* multi-phase initialisation (PEP 489) */
    NULL,          /* m_traverse */
    NULL,          /* m_clear */
    NULL,          /* m_free */
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&speedups_module);
}
