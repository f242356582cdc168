/* iopoll._speedups: Context.wait()'s fast path in C.
 *
 * The pure-Python Context.wait() (src/_iopoll_core/context.py) is the reference; this is the
 * same fast path, line for line, without the interpreter's frame and bytecode around it.  On
 * EPOLL it goes one step further: where the Python path calls select.epoll.poll(), which
 * builds a list of (fd, bits) tuples that the loop then looks up in a dict, this calls
 * epoll_wait(2) itself on the Context's epoll fd (_native_fd), with the GIL released, into
 * an array on the stack, and finds each report's watcher in the Context's fd-indexed list
 * (_by_fd): no tuple, no hash per report.  It does the same with poll(2) on POLL's struct
 * pollfd array (_native_pollfds) and with kevent(2) on KQUEUE's kqueue (the mechanism's
 * native_kqueue).  EINTR is PEP 475's: the signal handlers run, an exception from one
 * leaves wait() as it is, and otherwise the wait goes on for the time that is left.
 * Everything that is not that path goes back to the Context's Python methods:
 *
 *   self._wait(timeout, microseconds, max_events)   any other form of wait()
 *   self._poll_failed(exc)                          the mechanism's poll raised OSError
 *   self._finish_wait(raw, seconds, started)        a report needs care (_collect)
 *   self._can_be_woken()                            an OS wait is about to block for ever
 *   self._poll_forever(poll, registered)            the mechanism's poll, with no timeout
 *   mechanism.translate_kevents(kevents)            a kevent that is not plain (KQUEUE)
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
 *
 * This file holds wait()'s entry points (wait(), and wait_each() for the loop's C core),
 * the reports of a mechanism's poll, and install(); _os_wait.c the OS waits and what their
 * reports become; _speedups.h what the two share.
 */

#include "_speedups.h"

Slots slots;
static int slots_made = 0;

static int
is_int_zero(PyObject *value)
{
    int overflow;
    return PyLong_CheckExact(value) && PyLong_AsLongAndOverflow(value, &overflow) == 0
           && !overflow;
}

/* Parse wait(timeout=None, microseconds=0, max_events=None); borrowed references.  Bad
 * calls get the messages CPython gives the Python method (its self counted). */
static int
parse_wait_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    static const char *const names[] = {"timeout", "microseconds", "max_events"};
    out[0] = Py_None;
    out[1] = NULL; /* NULL: the default 0 */
    out[2] = Py_None;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError,
                     "Context.wait() takes from 1 to 4 positional arguments but %zd were given",
                     nargs + 1);
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
                         "Context.wait() got an unexpected keyword argument '%U'", key);
            return -1;
        }
        if (index < nargs) {
            PyErr_Format(PyExc_TypeError,
                         "Context.wait() got multiple values for argument '%s'",
                         names[index]);
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

/* wait(*arguments) (timeout, microseconds or NULL for 0, max_events): what the wait
 * returns, or None when the fast path put the watchers in `held` instead, which it then
 * says with a count of 0 or more (the caller sets -1 first: a None from a subclass's
 * _wait() or _finish_wait() is returned as it is, as Python's wait() returns it). */
static PyObject *
wait_with(PyObject *self, PyObject **arguments, Held *held)
{
    PyObject *timeout = arguments[0], *microseconds = arguments[1];
    PyObject *poll = NULL, *watchers = NULL, *decode = NULL, *low = NULL, *max_timeout = NULL;
    PyObject *seconds = NULL, *started = NULL, *raw = NULL, *ready = NULL, *result = NULL;
    PyObject *first = NULL, *now = NULL, *wait_obj = NULL;

    /* wait()'s fast path: as in Python, a microseconds that is not the int 0 (0.0, False)
     * goes to _wait(), which refuses it. */
    if (arguments[2] == Py_None && microseconds != NULL && !PyLong_CheckExact(microseconds)) {
        /* Python asks `microseconds == 0` (which may run code, or raise) before its type,
         * when its fast path is set; either way it is _wait()'s to refuse or take. */
        PyObject *fast = get_slot(self, slots.fast_poll);
        if (fast == NULL) {
            return NULL;
        }
        int asked = 0;
        if (fast != Py_None) {
            PyObject *zero = PyLong_FromLong(0);
            asked = zero == NULL ? -1 : PyObject_RichCompareBool(microseconds, zero, Py_EQ);
            Py_XDECREF(zero);
        }
        Py_DECREF(fast);
        return asked < 0 ? NULL : general_wait(self, arguments);
    }
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
#ifdef IOPOLL_HAVE_KQUEUE
    PyObject *mechanism = get_slot(self, slots.usable);
    if (mechanism == NULL) {
        goto finally;
    }
    long kq = mechanism == Py_None ? -1 : native_kqueue_of(mechanism);
    if (kq >= 0) {
        result = kqueue_fast_wait(self, mechanism, (int)kq, PyDict_GET_SIZE(watchers), seconds,
                                  wait_value, &started, cut, held);
    }
    Py_DECREF(mechanism);
    if (kq != -1) {
        goto finally; /* waited, or an error (-2) */
    }
#endif
#ifndef IOPOLL_HAVE_NATIVE
    (void)held; /* only the OS waits fill it: here the result is always a list */
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
    if (!cut && value < 0.0) {
        /* No timeout: first what is ready, then only if a watcher can end the wait. */
        PyObject *forever_args[2] = {poll, registered};
        raw = call_method(self, slots.str_poll_forever, forever_args, 2);
    }
    else {
        raw = PyObject_Vectorcall(poll, poll_args, 2, NULL);
    }
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
    /* A signal handler closed the Context while the poll waited (select() then answers
     * nothing), or forked, and this is the child, whose wait must not report the parent's
     * fds; or, with no reports, the deadline cut the wait short: _finish_wait goes on, or
     * says why not. */
    int usable = still_usable(self);
    if (usable < 0) {
        goto finally;
    }
    int unfinished = !usable || (cut && PyList_CheckExact(raw) && PyList_GET_SIZE(raw) == 0);
    if (PyList_CheckExact(raw) && PyDict_CheckExact(decode) && PyTuple_CheckExact(low)
        && !unfinished) {
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
    held.count = -1;
    PyObject *result = wait_with(self, arguments, &held);
    if (held.count < 0) {
        return result; /* the general path's result, a list from the fast path, or NULL */
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
    held.count = -1;
    PyObject *arguments[3] = {timeout, NULL, Py_None};
    PyObject *result = wait_with(self, arguments, &held);
    if (result == NULL) {
        return -1;
    }
    Py_ssize_t visited = 0;
    if (held.count >= 0) {
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
    {NULL, 0, 0, 0, NULL}, /* every field, for clang's -Wmissing-field-initializers */
};

/* Event.READ's and Event.WRITE's values, which the KQUEUE path reports (_kqueue_wait.c). */
static int
event_bits(Slots *found)
{
    PyObject *events = PyImport_ImportModule("_iopoll_core.events");
    PyObject *event = events == NULL ? NULL : PyObject_GetAttrString(events, "Event");
    Py_XDECREF(events);
    if (event == NULL) {
        return -1;
    }
    unsigned long values[2];
    const char *names[2] = {"READ", "WRITE"};
    for (int i = 0; i < 2; i++) {
        PyObject *member = PyObject_GetAttrString(event, names[i]);
        values[i] = member == NULL ? (unsigned long)-1 : PyLong_AsUnsignedLong(member);
        Py_XDECREF(member);
        if (values[i] == (unsigned long)-1 && PyErr_Occurred()) {
            Py_DECREF(event);
            return -1;
        }
    }
    Py_DECREF(event);
    found->read_bit = (unsigned int)values[0];
    found->write_bit = (unsigned int)values[1];
    return 0;
}

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
        || !(found.usable = member_of(context_type, "_usable"))
        || !(found.plain = member_of(watcher_type, "_plain"))
        || !(found.events = member_of(watcher_type, "_events"))
        || !(found.probe = member_of(watcher_type, "_probe"))
        || !(found.triggered = member_of(watcher_type, "_triggered"))
        || !(found.data = member_of(watcher_type, "_data"))) {
        goto error;
    }
    if (event_bits(&found) < 0) {
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
        || !(found.str_finish_wait = PyUnicode_InternFromString("_finish_wait"))
        || !(found.str_can_be_woken = PyUnicode_InternFromString("_can_be_woken"))
        || !(found.str_poll_forever = PyUnicode_InternFromString("_poll_forever"))
        || !(found.str_native_kqueue = PyUnicode_InternFromString("native_kqueue"))
        || !(found.str_translate_kevents = PyUnicode_InternFromString("translate_kevents"))
        || !(found.str_closed = PyUnicode_InternFromString("closed"))) {
        goto error;
    }
    slots = found;
    slots_made = 1;
    data_def[0].offset = found.data->offset;
    /* add() and remove() first: they read the Python methods they replace, and refuse
     * classes that are not what they read (then nothing is put on either class). */
    if (install_registration(context_type, watcher_type) < 0
        || set_attribute(context_type, PyDescr_NewMethod(context_type, &wait_def)) < 0
        || set_attribute(watcher_type, PyDescr_NewMember(watcher_type, data_def)) < 0) {
        return NULL; /* the slots stay: a class may hold some of the methods already */
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
    Py_XDECREF(found.str_can_be_woken);
    Py_XDECREF(found.str_poll_forever);
    Py_XDECREF(found.str_native_kqueue);
    Py_XDECREF(found.str_translate_kevents);
    Py_XDECREF(found.str_closed);
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
