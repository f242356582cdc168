/* IoPollDriver's _wait and _queue_ready in C (src/iopoll/loop/_iopoll_driver.py is the
 * reference): the Context's wait(), then each returned watcher's fd entry and the callbacks
 * its report wakes, into the tick's run queue.  install_io() (_speedups.c) puts them on
 * IoPollDriver, and the C _poll runs them directly.
 *
 * When the poller is an iopoll.Context whose wait() is iopoll._speedups' (the usual case:
 * both accelerators built), the C _poll does both steps in one: wait_each() (_wait_api.h)
 * hands each ready watcher straight to queue_one(), after the wait, in order, so that no
 * list is made and freed per tick.  What runs, in what order, is what _wait and then
 * _queue_ready run. */

#include "_dispatch.h"

/* READ and WRITE, the bits _WAKE maps a reported Event to (_callbacks.py). */
#define WAKE_READ 1
#define WAKE_WRITE 2

/* Whether `poller` is an iopoll.Context whose class still has iopoll's C wait(): then what
 * a call by name would run is that function, called directly (CPython's type cache answers
 * _PyType_Lookup; Context has no instance __dict__ to hide the method). */
int
iopoll_waits_in_c(PyObject *poller)
{
    return S.context_wait_c != NULL && Py_IS_TYPE(poller, S.context_type)
           && _PyType_Lookup(S.context_type, S.s_context_wait) == S.context_wait;
}

/* IoPollDriver._wait(poller, timeout): poller.wait(timeout), or [] when a lost stream's
 * report (on_watcher_removed raising _StreamLost) ended the wait. */
PyObject *
iopoll_wait(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_wait() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *poller = args[0], *ready;
    if (iopoll_waits_in_c(poller)) {
        ready = S.context_wait_c(poller, args + 1, 1, NULL);
    }
    else {
        ready = call1(poller, S.s_context_wait, args[1]);
    }
    if (ready == NULL && PyErr_ExceptionMatches(S.stream_lost)) {
        PyErr_Clear();
        return PyList_New(0);
    }
    return ready;
}

/* queue.extend(callbacks.values()) when the dict is not empty: for a plain dict, each
 * value appended in the dict's order, which is what extend() does without the view. */
static int
extend_with(PyObject *queue, PyObject *callbacks)
{
    int any = nonempty(callbacks);
    if (any <= 0) {
        return any;
    }
    PyObject *done;
    if (PyDict_CheckExact(callbacks) && Py_IS_TYPE(queue, S.deque_type)) {
        Py_INCREF(callbacks);
        Py_ssize_t position = 0, left = PyDict_GET_SIZE(callbacks);
        PyObject *key, *value;
        int failed = 0;
        /* `left`: no last PyDict_Next() call to find the end (appending runs no code). */
        while (!failed && left-- > 0 && PyDict_Next(callbacks, &position, &key, &value)) {
            done = DEQUE_APPEND(queue, value); /* runs no Python code: the dict holds */
            failed = done == NULL;
            Py_XDECREF(done);
        }
        Py_DECREF(callbacks);
        return failed ? -1 : 0;
    }
    PyObject *values = call0(callbacks, S.s_values);
    if (values == NULL) {
        return -1;
    }
    done = DEQUE_EXTEND(queue, values);
    Py_DECREF(values);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* One watcher of IoPollDriver._queue_ready's loop. */
static int
queue_one(PyObject *self, PyObject *queue, PyObject *wakeup, PyObject *watcher)
{
    /* A Watcher's slots are read by offset; anything else a subclass's _wait() may return,
     * by name, as Python reads it. */
    int typed = of_class(watcher, S.watcher_type);
    PyObject *entry = slot_or_attribute(watcher, typed, S.w_data);
    if (entry == NULL) {
        return -1;
    }
    if (entry == wakeup) {
        Py_DECREF(entry);
        PyObject *done = call1(self, S.s_signals_ready, watcher);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    /* entry held from here: the lookup of an odd _triggered may run code */
    PyObject *triggered = slot_or_attribute(watcher, typed, S.w_triggered);
    if (triggered == NULL) {
        Py_DECREF(entry);
        return -1;
    }
    /* _WAKE[triggered]: for an Event (an int), the masks its __missing__ applies, applied
     * here; anything else is looked up in the table. */
    long wake;
    if (PyLong_Check(triggered)) {
        wake = PyLong_AsLong(triggered);
        if (!(wake == -1 && PyErr_Occurred())) {
            wake = (wake & S.wakes_readers ? WAKE_READ : 0)
                   | (wake & S.wakes_writers ? WAKE_WRITE : 0);
        }
    }
    else {
        PyObject *bits = PyObject_GetItem(S.wake_table, triggered);
        wake = bits == NULL ? -1 : PyLong_AsLong(bits);
        Py_XDECREF(bits);
    }
    Py_DECREF(triggered);
    if (wake == -1 && PyErr_Occurred()) {
        Py_DECREF(entry);
        return -1;
    }
    int failed = 0;
    int slots = Py_IS_TYPE(entry, S.entry_type);
    if (wake & WAKE_READ) {
        PyObject *readers = slot_or_attribute(entry, slots, S.e_readers);
        failed = readers == NULL || extend_with(queue, readers) < 0;
        Py_XDECREF(readers);
    }
    if (!failed && wake & WAKE_WRITE) {
        PyObject *writers = slot_or_attribute(entry, slots, S.e_writers);
        failed = writers == NULL || extend_with(queue, writers) < 0;
        Py_XDECREF(writers);
    }
    Py_DECREF(entry);
    return failed ? -1 : 0;
}

/* What queue_visit() needs: the driver, and its queue and wakeup marker (read at the first
 * watcher when NULL, as _queue_ready reads them once wait() has returned). */
typedef struct {
    PyObject *self, *queue, *wakeup;
    int visit_failed;
} Queueing;

static int
queue_visit(void *arg, PyObject *watcher)
{
    Queueing *q = arg;
    if (q->queue == NULL) {
        q->queue = Py_XNewRef(peek(q->self, S.queue));
        q->wakeup = Py_XNewRef(peek(q->self, S.wakeup));
    }
    if (q->queue == NULL || q->wakeup == NULL
        || queue_one(q->self, q->queue, q->wakeup, watcher) < 0) {
        q->visit_failed = 1;
        return -1;
    }
    return 0;
}

/* IoPollDriver._queue_ready(ready): queue the callbacks each ready watcher wakes. */
PyObject *
iopoll_queue_ready(PyObject *self, PyObject *ready)
{
    Queueing q = {self, Py_XNewRef(peek(self, S.queue)), Py_XNewRef(peek(self, S.wakeup)), 0};
    int failed = q.queue == NULL || q.wakeup == NULL || for_each(ready, queue_visit, &q) < 0;
    Py_XDECREF(q.queue);
    Py_XDECREF(q.wakeup);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* self._wait(poller, timeout), then self._queue_ready() of what came, for a poller that
 * iopoll_waits_in_c(): how many watchers came, or -1 with the error set.  A _StreamLost
 * from the wait is _wait's empty result; one from queueing is not caught, as in Python. */
Py_ssize_t
iopoll_wait_and_queue(PyObject *self, PyObject *poller, PyObject *timeout)
{
    Queueing q = {self, NULL, NULL, 0};
    Py_ssize_t came = S.wait_api->wait_each(poller, timeout, queue_visit, &q);
    Py_XDECREF(q.queue);
    Py_XDECREF(q.wakeup);
    if (came < 0 && !q.visit_failed && PyErr_ExceptionMatches(S.stream_lost)) {
        PyErr_Clear();
        return 0;
    }
    return came;
}
