/* kevent(2) for Context.wait()'s C fast path (iopoll._speedups; _speedups.c has the whole,
 * _os_wait.c the retry, the report buffer and the delivery it shares with the epoll and
 * poll waits).  Built where <sys/event.h> is the OS's, and over libkqueue for the tests. */

#include "_speedups.h"

#ifdef IOPOLL_HAVE_KQUEUE

/* kevent(2) on the mechanism's kqueue (KqueueMechanism.native_kqueue), and the plain kevents
 * made into reports here: a read or a write filter that is ready, with neither EV_EOF nor
 * EV_ERROR, for a watcher that asked for it, the two filters of one fd merged into one
 * report, in the order the fds first came.  Every other kevent means something that
 * depends on the kind of file or on the mechanism's state (_kqueue.py's docstring), so a
 * batch holding one goes, whole, to the mechanism's translate_kevents(), and its reports to
 * _finish_wait. */

/* kevents that fit in 8 KiB on the stack (256 where a struct kevent is 32 bytes, 128 on
 * FreeBSD 12+, whose are 64); more get the Context's _native_buffer. */
#define STACK_KEVENTS ((int)(8192 / sizeof(struct kevent)))
/* Up to this many reports, an fd's earlier one is looked for from the end; beyond, in a
 * hash table. */
#define LINEAR_MERGE 32

typedef struct {
    PyObject *self;      /* the Context */
    PyObject *mechanism; /* its KqueueMechanism, asked again after signal handlers ran */
    int kq;
    struct kevent *events;
    int size;
} KqueueCall;

static int
kqueue_call(void *call, int timeout)
{
    KqueueCall *c = call;
    struct timespec spec = {timeout / 1000, (long)(timeout % 1000) * 1000000L};
    errno = 0;
    int count = kevent(c->kq, NULL, 0, c->events, c->size, timeout < 0 ? NULL : &spec);
    if (count < 0 && errno == 0) {
        errno = EINVAL; /* libkqueue can fail without setting errno (the tests' build) */
    }
    return count;
}

/* mechanism.native_kqueue: the kqueue's fd, -1 when the C path may not wait on it (or the
 * mechanism is no KqueueMechanism: None), -2 with an error set. */
long
native_kqueue_of(PyObject *mechanism)
{
    PyObject *value = PyObject_GetAttr(mechanism, slots.str_native_kqueue);
    if (value == NULL) {
        return -2;
    }
    long fd = -1;
    if (PyLong_CheckExact(value)) {
        fd = PyLong_AsLong(value);
        if (fd == -1 && PyErr_Occurred()) {
            fd = -2;
        }
        else if (fd < -1 || fd > INT_MAX) {
            fd = -1;
        }
    }
    Py_DECREF(value);
    return fd;
}

/* A Recheck: whether the kqueue is still the one to wait on after the signal handlers ran.
 * A handler that made the Context rebuild it, or changed what the C path may do, hands the
 * wait back to Python, which goes on with the Context's object.  (A Context closed by a
 * handler never gets here: wait_retrying() hands its wait back first.) */
static int
kqueue_recheck(void *call)
{
    KqueueCall *c = call;
    long fd = native_kqueue_of(c->mechanism);
    return fd == -2 ? -1 : fd == c->kq;
}

/* The index of the report of `fd` among `reports[0..found)`, or -1; `table` (NULL below
 * LINEAR_MERGE reports) maps fds to indexes + 1, `mask` + 1 entries, open addressing. */
static int
report_of(const Report *reports, int found, int fd, int *table, size_t mask)
{
    if (table == NULL) {
        for (int j = found - 1; j >= 0; j--) {
            if (reports[j].fd == fd) {
                return j;
            }
        }
        return -1;
    }
    for (size_t at = (size_t)fd & mask;; at = (at + 1) & mask) {
        int entry = table[at];
        if (entry == 0) {
            return -1;
        }
        if (reports[entry - 1].fd == fd) {
            return entry - 1;
        }
    }
}

static void
remember_report(int *table, size_t mask, int fd, int index)
{
    size_t at = (size_t)fd & mask;
    while (table[at] != 0) {
        at = (at + 1) & mask;
    }
    table[at] = index + 1;
}

/* Whether the watcher the Context keeps under `fd` asked for every bit of `bits` (1), or
 * the report is translate_kevents()' work: no such watcher, or one that would be reported
 * less than that (bytes for a watcher without READ) (0); -1 error. */
static int
asked_for(PyObject *by_fd, int fd, unsigned int bits)
{
    if (fd >= PyList_GET_SIZE(by_fd)) {
        return 0;
    }
    PyObject *watcher = PyList_GET_ITEM(by_fd, fd);
    if (!PyObject_TypeCheck(watcher, slots.watcher_type)) {
        return 0; /* None: no watcher */
    }
    PyObject *events = peek(watcher, slots.events);
    if (events == NULL) {
        return -1;
    }
    long watched = PyLong_AsLong(events); /* an Event: an int */
    if (watched == -1 && PyErr_Occurred()) {
        return -1;
    }
    return (bits & ~(unsigned long)watched) == 0;
}

/* `count` kevents made into `reports` (room for `count`): how many, or -2 when one of them
 * is not plain (the batch is translate_kevents()' work), or -1 with an error set. */
static int
plain_reports(PyObject *self, const struct kevent *events, int count, Report *reports)
{
    int table_stack[4 * LINEAR_MERGE];
    int *table = NULL;
    size_t mask = 0;
    int found = 0, result = -1;
    PyObject *by_fd = get_slot(self, slots.by_fd);
    if (by_fd == NULL) {
        return -1;
    }
    if (!PyList_CheckExact(by_fd)) {
        result = -2;
        goto finally;
    }
    for (int i = 0; i < count; i++) {
        const struct kevent *event = &events[i];
        unsigned int bit;
        if (event->flags & (EV_EOF | EV_ERROR) || event->ident > (uintptr_t)INT_MAX) {
            result = -2;
            goto finally;
        }
        if (event->filter == EVFILT_READ) {
            bit = slots.read_bit;
        }
        else if (event->filter == EVFILT_WRITE) {
            bit = slots.write_bit;
        }
        else {
            result = -2;
            goto finally;
        }
        int fd = (int)event->ident;
        if (found == LINEAR_MERGE && table == NULL) {
            /* Many reports: a table of at least twice the kevents from here on. */
            size_t slots_needed = 1;
            while (slots_needed < 2 * (size_t)count) {
                slots_needed <<= 1;
            }
            table = slots_needed <= sizeof(table_stack) / sizeof(int)
                        ? table_stack
                        : PyMem_Calloc(slots_needed, sizeof(int));
            if (table == NULL) {
                PyErr_NoMemory();
                goto finally;
            }
            if (table == table_stack) {
                memset(table_stack, 0, slots_needed * sizeof(int));
            }
            mask = slots_needed - 1;
            for (int j = 0; j < found; j++) {
                remember_report(table, mask, reports[j].fd, j);
            }
        }
        int j = report_of(reports, found, fd, table, mask);
        if (j >= 0) {
            reports[j].bits |= bit; /* the fd's other filter */
            continue;
        }
        reports[found].fd = fd;
        reports[found].bits = bit;
        if (table != NULL) {
            remember_report(table, mask, fd, found);
        }
        found++;
    }
    for (int j = 0; j < found; j++) {
        int asked = asked_for(by_fd, reports[j].fd, reports[j].bits);
        if (asked <= 0) {
            result = asked < 0 ? -1 : -2;
            goto finally;
        }
    }
    result = found;

finally:
    if (table != NULL && table != table_stack) {
        PyMem_Free(table);
    }
    Py_DECREF(by_fd);
    return result;
}

/* What the Python path makes of `count` kevents: mechanism.translate_kevents() of their
 * (ident, filter, flags, fflags, data), then _finish_wait. */
static PyObject *
translated(PyObject *self, PyObject *mechanism, const struct kevent *events, int count,
           PyObject *seconds_obj, PyObject **started)
{
    PyObject *kevents = PyList_New(count);
    if (kevents == NULL) {
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        const struct kevent *event = &events[i];
        PyObject *item = Py_BuildValue(
            "(NNNNN)", PyLong_FromSize_t((size_t)event->ident),
            PyLong_FromLong((long)event->filter),
            PyLong_FromUnsignedLong((unsigned long)event->flags),
            PyLong_FromUnsignedLong((unsigned long)event->fflags),
            PyLong_FromLongLong((long long)event->data));
        if (item == NULL) {
            Py_DECREF(kevents);
            return NULL;
        }
        PyList_SET_ITEM(kevents, i, item);
    }
    PyObject *raw = PyObject_CallMethodOneArg(mechanism, slots.str_translate_kevents, kevents);
    Py_DECREF(kevents);
    if (raw == NULL) {
        return NULL;
    }
    PyObject *result = finish_wait(self, raw, seconds_obj, started);
    Py_DECREF(raw);
    return result;
}

/* wait()'s fast path on KQUEUE: kevent(2) on the mechanism's kqueue `kq`, with room for both
 * filters of every watcher. */
PyObject *
kqueue_fast_wait(PyObject *self, PyObject *mechanism, int kq, Py_ssize_t nwatchers,
                 PyObject *seconds_obj, double seconds, PyObject **started, int cut,
                 Held *held)
{
    struct kevent stack_events[STACK_KEVENTS];
    Report stack_reports[STACK_KEVENTS];
    Report *reports = stack_reports;
    Py_ssize_t size = nwatchers > INT_MAX / 2 ? INT_MAX : 2 * nwatchers;
    KqueueCall call = {self, mechanism, kq, stack_events, size < 1 ? 1 : (int)size};
    PyObject *buffer = NULL, *result = NULL;
    if (call.size > STACK_KEVENTS) {
        /* The kevents, then room for a report per kevent. */
        buffer = take_buffer(
            self, (Py_ssize_t)call.size * (Py_ssize_t)(sizeof(struct kevent) + sizeof(Report)));
        if (buffer == NULL) {
            return NULL;
        }
        call.events = (struct kevent *)PyByteArray_AS_STRING(buffer);
        reports = (Report *)(call.events + call.size);
    }
    int count = wait_retrying(self, kqueue_call, &call, seconds, kqueue_recheck, NULL, started);
    if (count == WAIT_HANDED_BACK) {
        result = finish_handed_back(self, seconds_obj, started);
    }
    else if (count >= 0) {
        int found = plain_reports(self, call.events, count, reports);
        if (found >= 0) {
            result = deliver(self, reports, found, seconds_obj, started, cut, held);
        }
        else if (found == -2) {
            result = translated(self, mechanism, call.events, count, seconds_obj, started);
        }
    }
    if (buffer != NULL) {
        put_buffer(self, buffer);
    }
    return result;
}

#endif /* IOPOLL_HAVE_KQUEUE */
