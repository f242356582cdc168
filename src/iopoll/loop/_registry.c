/* CallbackRegistry's methods in C: _activate (the enable queue's records made live: timers
 * to _timers.c, streams to _activate_stream by name, signals into their map) and the upkeep
 * of _unindexed, the records that have no entry in the id map, line for line as the Python
 * methods in _registry.py.  See _speedups.c for the whole. */

#include "_dispatch.h"

/* -- activation ------------------------------------------------------------------------- */

/* One record of CallbackRegistry._activate's loop. */
static int
activate_one(PyObject *self, PyObject *callback, PyObject *const *lists, PyObject *seq)
{
    if (check_record(callback, S.callback_type, S.queued) < 0
        || add_to(callback, S.queued, -1) < 0) {
        return -1;
    }
    int queued = truth(callback, S.queued);
    if (queued != 0) {
        return queued < 0 ? -1 : 0; /* a later entry activates it */
    }
    int enabled = truth(callback, S.enabled);
    if (enabled <= 0) {
        return enabled; /* disabled since */
    }
    put_bool(callback, S.invokable, 1);
    PyTypeObject *kind = Py_TYPE(callback);
    if (kind == S.c_delay_type || kind == S.c_repeat_type
        || PyObject_TypeCheck(callback, S.timer_type)) {
        return loop_activate_timer(self, callback, lists[0], lists[1], lists[2], seq);
    }
    if (PyObject_TypeCheck(callback, S.stream_type)) {
        PyObject *done = call1(self, S.s_activate_stream, callback);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    if (PyObject_TypeCheck(callback, S.signal_type)) {
        /* `self._signal_callbacks.setdefault(callback.signum, {})[callback.id] =
         * callback`, each read when Python reads it and held: the new dict's allocation
         * (a collection) and the signal number's hash may run code. */
        PyObject *maps = get_slot(self, S.signal_callbacks);
        PyObject *signum = maps == NULL ? NULL : get_slot(callback, S.signal_arg);
        PyObject *fresh = signum == NULL ? NULL : PyDict_New();
        PyObject *callbacks_for = NULL, *callback_id = NULL;
        if (fresh != NULL) {
            callbacks_for = Py_XNewRef(PyDict_SetDefault(maps, signum, fresh));
        }
        if (callbacks_for != NULL) {
            callback_id = get_slot(callback, S.id);
        }
        int failed = callback_id == NULL
                     || PyObject_SetItem(callbacks_for, callback_id, callback) < 0;
        Py_XDECREF(callback_id);
        Py_XDECREF(callbacks_for);
        Py_XDECREF(fresh);
        Py_XDECREF(signum);
        Py_XDECREF(maps);
        return failed ? -1 : 0;
    }
    return 0;
}

/* What activate_visit() needs: the driver, its timer lists and its seq counter. */
typedef struct {
    PyObject *self, *lists[3], *seq;
} Activation;

static int
activate_visit(void *arg, PyObject *callback)
{
    Activation *a = arg;
    return activate_one(a->self, callback, a->lists, a->seq);
}

PyObject *
loop_activate(PyObject *self, PyObject *callbacks)
{
    Activation a = {self, {NULL, NULL, NULL}, peek(self, S.timer_seq)};
    if (a.seq == NULL || loop_timer_lists(self, a.lists) < 0) {
        return NULL;
    }
    Py_INCREF(a.seq);
    /* `for callback in callbacks`, a list (the enable queue) by index. */
    int failed = for_each(callbacks, activate_visit, &a) < 0;
    for (int i = 0; i < 3; i++) {
        Py_DECREF(a.lists[i]);
    }
    Py_DECREF(a.seq);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* -- the unindexed records -------------------------------------------------------------- */

/* _unindexed_limit = max(_SWEEP_UNINDEXED, 2 * length) */
static int
put_unindexed_limit(PyObject *self, Py_ssize_t length)
{
    Py_ssize_t limit = length > PY_SSIZE_T_MAX / 2 ? PY_SSIZE_T_MAX : 2 * length;
    return put_new(self, S.unindexed_limit,
                   PyLong_FromSsize_t(limit < S.sweep_unindexed ? S.sweep_unindexed : limit));
}

/* The length at which _unindexed is swept whole (its _unindexed_limit); -1 on error. */
static Py_ssize_t
unindexed_limit(PyObject *self)
{
    PyObject *limit = peek(self, S.unindexed_limit);
    if (limit == NULL) {
        return -1;
    }
    Py_ssize_t at = PyLong_AsSsize_t(limit);
    if (at < 0 && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "_unindexed_limit must not be negative");
    }
    return at < 0 ? -1 : at;
}

/* The driver's _unindexed, a new reference to the list the registry made; NULL on error. */
static PyObject *
unindexed_list(PyObject *self)
{
    PyObject *unindexed = get_slot(self, S.unindexed);
    if (unindexed != NULL && !PyList_CheckExact(unindexed)) {
        PyErr_SetString(PyExc_TypeError, "_unindexed must be a list");
        Py_CLEAR(unindexed);
    }
    return unindexed;
}

/* unindexed[i].enabled: 1, 0, or -1 with the error set; a record that is, with `kept`, is
 * appended to it.  The record is held while it is read: an `enabled` that is not a bool may
 * run code that changes the list. */
static int
enabled_at(PyObject *unindexed, Py_ssize_t i, PyObject *kept)
{
    PyObject *callback = Py_NewRef(PyList_GET_ITEM(unindexed, i));
    int enabled = check_record(callback, S.callback_type, S.enabled) < 0
                      ? -1
                      : truth(callback, S.enabled);
    if (enabled > 0 && kept != NULL && PyList_Append(kept, callback) < 0) {
        enabled = -1;
    }
    Py_DECREF(callback);
    return enabled;
}

/* CallbackRegistry._sweep_unindexed: _unindexed becomes a new list of its records that are
 * still enabled (the others ended). */
PyObject *
loop_sweep_unindexed(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *unindexed = unindexed_list(self);
    if (unindexed == NULL) {
        return NULL;
    }
    PyObject *kept = PyList_New(0);
    int failed = kept == NULL;
    /* By index, the size read again each step (as Python's compress() over the list). */
    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(unindexed); i++) {
        failed = enabled_at(unindexed, i, kept) < 0;
    }
    Py_DECREF(unindexed);
    if (failed) {
        Py_XDECREF(kept);
        return NULL;
    }
    Py_ssize_t length = PyList_GET_SIZE(kept);
    if (put_new(self, S.unindexed, kept) < 0 || put_unindexed_limit(self, length) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* CallbackRegistry._tidy_unindexed: the ended records at the front of _unindexed dropped,
 * then the whole list swept if it reached its limit. */
PyObject *
loop_tidy_unindexed(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *unindexed = unindexed_list(self);
    if (unindexed == NULL) {
        return NULL;
    }
    Py_ssize_t ended = 0;
    int failed = 0;
    for (; ended < PyList_GET_SIZE(unindexed); ended++) {
        int enabled = enabled_at(unindexed, ended, NULL);
        if (enabled != 0) {
            failed = enabled < 0;
            break;
        }
    }
    if (!failed && ended) {
        failed = PyList_SetSlice(unindexed, 0, ended, NULL) < 0
                 || put_unindexed_limit(self, PyList_GET_SIZE(unindexed)) < 0;
    }
    Py_ssize_t at = failed ? -1 : unindexed_limit(self);
    failed = failed || at < 0;
    if (!failed && PyList_GET_SIZE(unindexed) >= at) {
        PyObject *done = own_method(self, S.s_sweep_unindexed, loop_sweep_unindexed, NULL);
        failed = done == NULL;
        Py_XDECREF(done);
    }
    Py_DECREF(unindexed);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The end of AbstractDriver._drain: _tidy_unindexed() when the front of _unindexed ended or
 * the list reached its limit. */
int
loop_tidy_if_due(PyObject *self)
{
    PyObject *unindexed = peek(self, S.unindexed);
    if (unindexed == NULL) {
        return -1;
    }
    /* Anything but a list goes to _tidy_unindexed, which refuses it. */
    if (PyList_CheckExact(unindexed)) {
        if (PyList_GET_SIZE(unindexed) == 0) {
            return 0;
        }
        Py_INCREF(unindexed); /* held, and its length read after the first's `enabled` */
        int first_enabled = enabled_at(unindexed, 0, NULL);
        Py_ssize_t length = PyList_GET_SIZE(unindexed);
        Py_DECREF(unindexed);
        if (first_enabled < 0) {
            return -1;
        }
        if (first_enabled) {
            Py_ssize_t at = unindexed_limit(self);
            if (at < 0 || length < at) {
                return at < 0 ? -1 : 0;
            }
        }
    }
    PyObject *done = own_method(self, S.s_tidy_unindexed, loop_tidy_unindexed, NULL);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}
