/* The OS side of Context.wait()'s C fast path (iopoll._speedups; _speedups.c has the
 * whole): epoll_wait(2) and poll(2) called directly, with the GIL released only when they
 * block; PEP 475's retry; and each report handed to its watcher, once the watcher's
 * fileno() probe says its stream is still the fd's, with its decoded events set.  A report
 * that needs care goes back, with all the others, to the Context's _finish_wait.  The
 * kqueue wait (_kqueue_wait.c) uses the same retry, buffer and delivery. */

#include "_speedups.h"

/* -- a report's watcher ------------------------------------------------------------------ */

/* probe(), the watcher's bound fileno().  When it is a C method without arguments (a
 * socket's, a file's: the usual probe), its C function is called directly, which is what
 * the call would run, without the vectorcall dispatch around it; the check that follows a
 * C call is kept (a NULL without an exception is a SystemError). */
static inline PyObject *
call_probe(PyObject *probe)
{
    if (PyCFunction_CheckExact(probe) && PyCFunction_GET_FLAGS(probe) == METH_NOARGS) {
        PyObject *result = PyCFunction_GET_FUNCTION(probe)(PyCFunction_GET_SELF(probe), NULL);
        if (result == NULL && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, "fileno() returned NULL without an exception");
        }
        return result;
    }
    return PyObject_CallNoArgs(probe);
}

/* Whether `watcher` (any object, held by the caller) is a plain stream watcher whose stream
 * still has `fd` open, as the Python fast path's loop body asks before it decodes: 1 yes;
 * 0 it needs care (not a watcher, one-shot, not a stream, closed, or the number now names
 * another file); -1 error. */
int
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
    PyObject *probed = call_probe(probe);
    Py_DECREF(probe);
    int same;
    if (probed != NULL && PyLong_CheckExact(probed)) {
        /* The common case, compared in C: fileno() gave an exact int. */
        int overflow;
        long probed_fd = PyLong_AsLongAndOverflow(probed, &overflow);
        same = !overflow && probed_fd == fd;
    }
    else if (probed != NULL) {
        /* `probe() != fd`, as Python asks it (an odd int's __ne__ need not be !__eq__). */
        PyObject *fd_obj = PyLong_FromLong(fd);
        int other = fd_obj == NULL ? -1 : PyObject_RichCompareBool(probed, fd_obj, Py_NE);
        same = other < 0 ? -1 : !other;
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
int
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

/* Raise what wait() raises for the OSError set now: Context._poll_failed decides (a signal
 * handler's exception is never an OSError here: PyErr_CheckSignals returned it already). */
void
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

/* *started = time.monotonic() unless it was read already (wait_with() leaves it NULL until
 * the wait blocks or must resume); 0, or -1 with the error set. */
int
read_started(PyObject **started)
{
    if (*started == NULL && (*started = PyObject_CallNoArgs(slots.monotonic)) == NULL) {
        return -1;
    }
    return 0;
}

/* -- the OS waits ------------------------------------------------------------------------ */

#ifdef IOPOLL_HAVE_NATIVE

/* At least `size` bytes for one OS wait's reports, when they may not fit on the stack: the
 * Context's _native_buffer (a bytearray the Python side owns), taken out of its slot for
 * the call so that a wait() nested in a probe finds None there and makes its own.  A new
 * reference, or NULL with an error; put_buffer() gives it back.  One array grown as the
 * watchers grow, instead of a malloc and a free per call (at 1,000 watchers, 12 KiB: the
 * allocator's slow path, and more than the rest of the call). */
PyObject *
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
void
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

/* self._can_be_woken(): 1 a watcher is left that can end a wait with no timeout, 0 none
 * (the Context retired the closed streams' watchers it found), -1 error. */
static int
can_be_woken(PyObject *self)
{
    PyObject *answer = call_method(self, slots.str_can_be_woken, NULL, 0);
    if (answer == NULL) {
        return -1;
    }
    int can = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return can;
}

/* `wait(call, ...)` for up to `seconds` (< 0: forever), as PEP 475 says: EINTR runs the
 * signal handlers, and one that raises ends the wait with its exception (-1); otherwise the
 * wait goes on for the time that is left.  Another error: what _poll_failed raises (-1).
 * After the handlers, and after a call that gave up the GIL, the wait is handed back
 * (WAIT_HANDED_BACK) if the Context is no longer usable: a handler closed it, or forked and
 * runs in the child, whose wait must not report the parent's fds; another thread closed
 * it.  `recheck`, if given, is asked after the handlers whether the OS object is still the
 * one to wait on (a handler may have made the Context replace it): WAIT_HANDED_BACK when it
 * says 0.  Before it blocks, it sets *started, if NULL, to time.monotonic() (see
 * wait_with()), and calls `prepare`, if given; a wait with no timeout then returns 0
 * instead if nothing is left that can end it (_can_be_woken). */
int
wait_retrying(PyObject *self, OsWait wait, void *call, double seconds, Recheck recheck,
              Prepare prepare, PyObject **started)
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
                if (timeout < 0) {
                    /* For ever: only if a watcher is left that can end it (a closed
                     * stream's fd leaves epoll in silence); none, and no reports.  The
                     * probes it made ran Python code, so the OS object is asked again. */
                    int can = can_be_woken(self);
                    if (can <= 0) {
                        return can;
                    }
                    int usable = still_usable(self);
                    if (usable <= 0) {
                        return usable < 0 ? -1 : WAIT_HANDED_BACK;
                    }
                    int go_on = recheck == NULL ? 1 : recheck(call);
                    if (go_on <= 0) {
                        return go_on < 0 ? -1 : WAIT_HANDED_BACK;
                    }
                }
                if (prepare != NULL && prepare(call) < 0) {
                    return -1;
                }
                deadline = timeout > 0 ? monotonic_seconds() + seconds : 0.0;
            }
            Py_BEGIN_ALLOW_THREADS
            count = wait(call, timeout);
            Py_END_ALLOW_THREADS
            if (count >= 0) {
                int usable = still_usable(self); /* other threads ran meanwhile */
                return usable > 0 ? count : usable < 0 ? -1 : WAIT_HANDED_BACK;
            }
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
        int usable = still_usable(self);
        if (usable <= 0) {
            return usable < 0 ? -1 : WAIT_HANDED_BACK;
        }
        if (recheck != NULL) {
            int go_on = recheck(call);
            if (go_on <= 0) {
                return go_on < 0 ? -1 : WAIT_HANDED_BACK;
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

/* self._finish_wait(raw, seconds_obj, started): what the Python path makes of `raw`, the
 * (fd, Event or OS bits) reports, going on with the wait if none is ready. */
PyObject *
finish_wait(PyObject *self, PyObject *raw, PyObject *seconds_obj, PyObject **started)
{
    if (read_started(started) < 0) {
        return NULL;
    }
    PyObject *finish_args[3] = {raw, seconds_obj, *started};
    return call_method(self, slots.str_finish_wait, finish_args, 3);
}

/* A wait wait_retrying() handed back (WAIT_HANDED_BACK): the rest of it is the Python
 * path's, from no reports. */
PyObject *
finish_handed_back(PyObject *self, PyObject *seconds_obj, PyObject **started)
{
    PyObject *none = PyList_New(0);
    if (none == NULL) {
        return NULL;
    }
    PyObject *result = finish_wait(self, none, seconds_obj, started);
    Py_DECREF(none);
    return result;
}

/* The ready watchers for `count` reports, found in the Context's fd-indexed list; or, when
 * one needs care (or none came and `cut` says a timer's deadline cut the wait short of
 * `seconds_obj`), what _finish_wait makes of all of them as (fd, bits) pairs.  No more
 * than `held` holds go there, and the result is None. */
PyObject *
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
    result = finish_wait(self, raw, seconds_obj, started);
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
    PyObject *self;
    PyObject *epoll_object; /* the select.epoll object whose fd epfd is, or NULL */
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

/* A Recheck: whether epfd is still the Context's epoll after the signal handlers ran.  A
 * handler can make the Context rebuild it (an add() of a stream whose number a stale entry
 * holds): the old object is closed, and the rest of the wait is the Python path's, on the
 * new one, as its own retry would be; its fd number may be another file's by then, so it
 * is not waited on again.  (A Context closed by a handler never gets here.) */
static int
epoll_recheck(void *call)
{
    EpollCall *c = call;
    PyObject *native = get_slot(c->self, slots.native_fd);
    if (native == NULL) {
        return -1;
    }
    long fd = PyLong_Check(native) ? PyLong_AsLong(native) : -1;
    Py_DECREF(native);
    if (fd == -1 && PyErr_Occurred()) {
        return -1;
    }
    int closed = 0;
    if (c->epoll_object != NULL) {
        PyObject *flag = PyObject_GetAttr(c->epoll_object, slots.str_closed);
        closed = flag == NULL ? -1 : PyObject_IsTrue(flag);
        Py_XDECREF(flag);
        if (closed < 0) {
            return -1;
        }
    }
    return !closed && fd == c->epfd;
}

_Static_assert(sizeof(Report) <= sizeof(struct epoll_event), "reports overwrite the events");

/* wait()'s fast path on EPOLL: epoll_wait(2) on the Context's epoll fd, with room for a
 * report from each of `nwatchers` watchers (the fast path has no max_events). */
PyObject *
epoll_fast_wait(PyObject *self, int epfd, PyObject *epoll_object, Py_ssize_t nwatchers,
                PyObject *seconds_obj, double seconds, PyObject **started, int cut, Held *held)
{
    struct epoll_event stack_events[STACK_REPORTS];
    EpollCall call = {self, epoll_object, epfd, stack_events,
                      nwatchers > INT_MAX ? INT_MAX : (int)nwatchers};
    PyObject *buffer = NULL, *result = NULL;
    if (call.size > STACK_REPORTS) {
        buffer = take_buffer(self, (Py_ssize_t)call.size * (Py_ssize_t)sizeof(struct epoll_event));
        if (buffer == NULL) {
            return NULL;
        }
        call.events = (struct epoll_event *)PyByteArray_AS_STRING(buffer);
    }
    int count = wait_retrying(self, epoll_call, &call, seconds, epoll_recheck, NULL, started);
    if (count == WAIT_HANDED_BACK) {
        result = finish_handed_back(self, seconds_obj, started);
    }
    else if (count >= 0) {
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
    PyObject *self;
    PyObject *pollfds;         /* the mechanism's struct pollfd array (a bytearray) */
    struct pollfd *fds;        /* what the calls poll: that array's bytes, then a copy */
    nfds_t size;
    struct pollfd *stack;      /* room for a copy of up to STACK_REPORTS entries */
    PyObject *buffer;          /* the Context's _native_buffer, when the copy needs it */
} PollCall;

static int
poll_call(void *call, int timeout)
{
    PollCall *c = call;
    return poll(c->fds, c->size, timeout);
}

/* A Prepare: from the first call without the GIL on, the calls poll a copy of the array,
 * which another thread or a signal handler may change meanwhile (CPython's poll object
 * polls an array of its own for that reason).  The array is read again here: handlers may
 * have run since the first call.  With the buffer, room for a report per entry after the
 * copy. */
static int
poll_prepare(void *call)
{
    PollCall *c = call;
    size_t size = (size_t)PyByteArray_GET_SIZE(c->pollfds) / sizeof(struct pollfd);
    struct pollfd *copy = c->stack;
    if (size > STACK_REPORTS) {
        c->buffer = take_buffer(
            c->self, (Py_ssize_t)(size * (sizeof(struct pollfd) + sizeof(Report))));
        if (c->buffer == NULL) {
            return -1;
        }
        copy = (struct pollfd *)PyByteArray_AS_STRING(c->buffer);
    }
    memcpy(copy, PyByteArray_AS_STRING(c->pollfds), size * sizeof(struct pollfd));
    c->fds = copy;
    c->size = (nfds_t)size;
    return 0;
}

/* wait()'s fast path on POLL: poll(2) on the mechanism's struct pollfd array (`pollfds`, a
 * bytearray).  The first call, which does not block and holds the GIL, polls the array
 * itself: nothing can change it meanwhile, and poll(2) only writes each entry's revents,
 * which nothing else reads.  So the usual call of an event loop, with something ready,
 * copies nothing; a call that blocks polls a copy (poll_prepare). */
PyObject *
poll_fast_wait(PyObject *self, PyObject *pollfds, PyObject *seconds_obj, double seconds,
               PyObject **started, int cut, Held *held)
{
    struct pollfd stack_fds[STACK_REPORTS];
    Report stack_reports[STACK_REPORTS];
    PollCall call = {
        self, pollfds, (struct pollfd *)PyByteArray_AS_STRING(pollfds),
        (nfds_t)((size_t)PyByteArray_GET_SIZE(pollfds) / sizeof(struct pollfd)), stack_fds, NULL,
    };
    PyObject *result = NULL, *reports_buffer = NULL;
    int count = wait_retrying(self, poll_call, &call, seconds, NULL, poll_prepare, started);
    if (count == WAIT_HANDED_BACK) {
        result = finish_handed_back(self, seconds_obj, started);
    }
    else if (count >= 0) {
        Report *reports = stack_reports;
        if (call.buffer != NULL) {
            reports = (Report *)(call.fds + call.size);
        }
        else if (count > STACK_REPORTS) {
            /* Polled in place: the array's bytes stay put, since this runs no Python code. */
            reports_buffer = take_buffer(self, (Py_ssize_t)count * (Py_ssize_t)sizeof(Report));
            if (reports_buffer == NULL) {
                count = -1;
            }
            else {
                reports = (Report *)PyByteArray_AS_STRING(reports_buffer);
            }
        }
        int found = 0;
        for (nfds_t i = 0; i < call.size && found < count; i++) {
            if (call.fds[i].revents) { /* in the array's order: the poll object's (_poll.py) */
                reports[found].fd = call.fds[i].fd;
                reports[found].bits = (unsigned short)call.fds[i].revents;
                found++;
            }
        }
        if (count >= 0) {
            result = deliver(self, reports, found, seconds_obj, started, cut, held);
        }
    }
    if (reports_buffer != NULL) {
        put_buffer(self, reports_buffer);
    }
    if (call.buffer != NULL) {
        put_buffer(self, call.buffer);
    }
    return result;
}

#endif /* IOPOLL_HAVE_POLL */
