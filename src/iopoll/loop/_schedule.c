/* defer(), delay() and repeat() in C (part of iopoll.loop._speedups): a callback's id,
 * the check of its function, and its record made and queued, line for line as
 * CallbackRegistry's methods in _registry.py.  See _speedups.c for the whole. */

#include "_dispatch.h"

#include <string.h>

/* -- registration ------------------------------------------------------------------------ */

/* Parse (name1, name2) or (name1) arguments, positional or by keyword; borrowed results. */
static int
parse_args(const char *method, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
           PyObject **names, Py_ssize_t count, PyObject **out)
{
    if (nargs > count) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd positional argument%s but %zd were given",
                     method, count, count == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        out[i] = i < nargs ? args[i] : NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t index = -1;
        for (Py_ssize_t i = 0; i < count; i++) {
            int equal = PyUnicode_Compare(key, names[i]) == 0;
            if (equal) {
                index = i;
                break;
            }
        }
        if (index < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         method, key);
            return -1;
        }
        if (out[index] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%U'", method,
                         names[index]);
            return -1;
        }
        out[index] = args[nargs + k];
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%U'", method,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

/* The id prefix after `prefix` (next_id(), _callbacks.py), for an ASCII str: the last
 * letter before "z" moves on, the "z"s after it (and any other character, which next_id()
 * passes over as it does a "z") become "a"; all of them passed over: one letter more.
 * NULL without an error for what next_id() alone answers (a character before the last
 * run that it cannot move on: it raises there). */
static PyObject *
successor(PyObject *prefix)
{
    Py_ssize_t length = PyUnicode_GET_LENGTH(prefix);
    const Py_UCS1 *text = PyUnicode_1BYTE_DATA(prefix);
    Py_ssize_t keep = length - 1; /* the letters before the one that moves on */
    if (!(text[keep] >= 'a' && text[keep] < 'z')) {
        while (keep > 0 && text[keep - 1] == 'z') { /* next_id's rstrip("z") */
            keep--;
        }
        if (keep > 0 && !(text[keep - 1] >= 'a' && text[keep - 1] < 'z')) {
            return NULL;
        }
        keep = keep > 0 ? keep - 1 : -1; /* -1: every letter passed over */
    }
    Py_ssize_t size = keep < 0 ? length + 1 : length;
    PyObject *next = PyUnicode_New(size, 127);
    if (next != NULL) {
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(next);
        if (keep >= 0) {
            memcpy(out, text, (size_t)keep);
            out[keep] = (Py_UCS1)(text[keep] + 1);
        }
        memset(out + keep + 1, 'a', (size_t)(size - keep - 1));
    }
    return next;
}

/* CallbackRegistry._carry: the next id prefix ("" -> "a" -> "b" ... "z" -> "aa"); 0. */
PyObject *
loop_carry(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *prefix = peek(self, S.id_prefix), *next = NULL;
    if (prefix == NULL) {
        return NULL;
    }
    if (PyUnicode_CheckExact(prefix) && PyUnicode_IS_COMPACT_ASCII(prefix)) {
        if (PyUnicode_GET_LENGTH(prefix) == 0) {
            next = Py_NewRef(PyTuple_GET_ITEM(S.letters, 0)); /* "a" */
        }
        else if ((next = successor(prefix)) == NULL && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (next == NULL) {
        /* Anything else: the Python method decides (AbstractDriver's, which install()
         * leaves as it is: looked up now, so that a patched one is the one called). */
        PyObject *carry = PyObject_GetAttr((PyObject *)S.driver_type, S.s_carry);
        PyObject *carried = carry == NULL ? NULL : PyObject_CallOneArg(carry, self);
        Py_XDECREF(carry);
        return carried;
    }
    if (put_new(self, S.id_prefix, next) < 0) {
        return NULL;
    }
    return PyLong_FromLong(0);
}

/* The next id (CallbackRegistry._new_id): a new reference. */
static PyObject *
new_id(PyObject *self)
{
    PyObject *value = peek(self, S.id_index);
    if (value == NULL) {
        return NULL;
    }
    long index = PyLong_AsLong(value);
    if (index == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (index == 26) {
        PyObject *carried = own_method(self, S.s_carry, loop_carry, NULL);
        if (carried == NULL) {
            return NULL;
        }
        index = PyLong_AsLong(carried);
        Py_DECREF(carried);
        if (index == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    if (index < 0 || index >= 26) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    if (put_new(self, S.id_index, PyLong_FromLong(index + 1)) < 0) {
        return NULL;
    }
    PyObject *prefix = peek(self, S.id_prefix);
    if (prefix == NULL) {
        return NULL;
    }
    if (!PyUnicode_CheckExact(prefix) || !PyUnicode_IS_COMPACT_ASCII(prefix)) {
        Py_INCREF(prefix); /* held: a str subclass's + may set the prefix again */
        PyObject *callback_id = PyNumber_Add(prefix, PyTuple_GET_ITEM(S.letters, index));
        Py_DECREF(prefix);
        return callback_id;
    }
    /* prefix + letter, as str concatenation makes it, without its generic path. */
    Py_ssize_t length = PyUnicode_GET_LENGTH(prefix);
    PyObject *callback_id = PyUnicode_New(length + 1, 127);
    if (callback_id != NULL) {
        Py_UCS1 *text = PyUnicode_1BYTE_DATA(callback_id);
        memcpy(text, PyUnicode_1BYTE_DATA(prefix), (size_t)length);
        text[length] = (Py_UCS1)('a' + index);
    }
    return callback_id;
}

static int
refuse_unless_callback(PyObject *fn)
{
    PyObject *checked = PyObject_CallOneArg(S.check_callback, fn);
    if (checked == NULL) {
        return -1;
    }
    Py_DECREF(checked);
    return 0;
}

/* fn.__code__: 1 with a new reference in *code, 0 when fn has none, -1 on another error. */
static int
code_of(PyObject *fn, PyObject **code)
{
    if (PyFunction_Check(fn)) {
        *code = Py_NewRef(PyFunction_GET_CODE(fn));
        return 1;
    }
    if ((*code = PyObject_GetAttr(fn, S.s_code)) != NULL) {
        return 1;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return -1;
    }
    PyErr_Clear();
    return 0;
}

/* defer()'s check: `fn.__code__.co_flags & _CO_ASYNC` refused by the general check, which
 * also runs when either attribute is missing, and accepts a C function (the general check's
 * second test) at once. */
static int
check_deferred(PyObject *fn)
{
    if (PyCFunction_CheckExact(fn)) {
        return 0;
    }
    PyObject *code;
    int found = code_of(fn, &code);
    if (found <= 0) {
        return found < 0 ? -1 : refuse_unless_callback(fn);
    }
    if (PyCode_Check(code)) {
        int async = ((PyCodeObject *)code)->co_flags & CO_ASYNC;
        Py_DECREF(code);
        return async ? refuse_unless_callback(fn) : 0;
    }
    /* Not a code object: its co_flags, whatever it is, as Python reads it. */
    PyObject *flags = PyObject_GetAttr(code, S.s_co_flags);
    Py_DECREF(code);
    if (flags == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
        return refuse_unless_callback(fn);
    }
    PyObject *mask = PyLong_FromLong(CO_ASYNC);
    PyObject *async = mask == NULL ? NULL : PyNumber_And(flags, mask);
    Py_DECREF(flags);
    Py_XDECREF(mask);
    int set = async == NULL ? -1 : PyObject_IsTrue(async);
    Py_XDECREF(async);
    return set <= 0 ? set : refuse_unless_callback(fn);
}

/* delay()'s check: `type(code) is not CodeType or code.co_flags & _CO_ASYNC` refused by the
 * general check, where code is `getattr(fn, "__code__", None)`. */
static int
check_timed(PyObject *fn)
{
    if (PyCFunction_CheckExact(fn)) {
        return 0; /* what the general check decides at once */
    }
    PyObject *code;
    int found = code_of(fn, &code);
    if (found < 0) {
        return -1;
    }
    int plain = found && PyCode_Check(code) && !(((PyCodeObject *)code)->co_flags & CO_ASYNC);
    if (found) {
        Py_DECREF(code);
    }
    return plain ? 0 : refuse_unless_callback(fn);
}

/* A fresh record of `type`: what `type()` makes, every slot unset, and not tracked by the
 * garbage collector until a full collection comes (_records.c says why). */
static inline PyObject *
new_record(PyTypeObject *type)
{
    PyObject *record = type->tp_alloc(type, 0);
    if (record != NULL) {
        PyObject_GC_UnTrack(record);
    }
    return record;
}

PyObject *
loop_defer(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *fn;
    if (nargs == 1 && kwnames == NULL) {
        fn = args[0];
    }
    else if (parse_args("defer", args, nargs, kwnames, &S.s_fn, 1, &fn) < 0) {
        return NULL;
    }
    if (check_deferred(fn) < 0) {
        return NULL;
    }
    PyObject *callback_id = new_id(self);
    if (callback_id == NULL) {
        return NULL;
    }
    /* The lists read once the record is made: its allocation may collect garbage, and a
     * finalizer may run code that replaces them. */
    PyObject *callback = new_record(S.c_defer_type);
    PyObject *unindexed = callback == NULL ? NULL : peek(self, S.unindexed);
    PyObject *defers = unindexed == NULL ? NULL : peek(self, S.defers);
    if (defers == NULL) {
        goto error;
    }
    put(callback, S.id, callback_id);
    put(callback, S.fn, fn);
    put_bool(callback, S.enabled, 1);
    put_bool(callback, S.referenced, 1);
    put_bool(callback, S.invokable, 1);
    put_bool(callback, S.indexed, 0);
    if (PyList_Append(unindexed, callback) < 0 || PyList_Append(defers, callback) < 0
        || add_to(self, S.live, 1) < 0) {
        goto error;
    }
    Py_DECREF(callback);
    return callback_id;

error:
    Py_XDECREF(callback);
    Py_DECREF(callback_id);
    return NULL;
}

/* CallbackRegistry._add_timer: a delay or repeat record of `kind`, queued for activation. */
static PyObject *
add_timer(PyObject *self, PyObject *seconds, PyObject *fn, PyTypeObject *kind)
{
    PyObject *callback_id = new_id(self);
    if (callback_id == NULL) {
        return NULL;
    }
    PyObject *callback = NULL, *clock = now(self), *expiration = NULL;
    if (clock == NULL) {
        goto error;
    }
    if (PyFloat_CheckExact(clock) && PyFloat_CheckExact(seconds)) {
        expiration = PyFloat_FromDouble(PyFloat_AS_DOUBLE(clock) + PyFloat_AS_DOUBLE(seconds));
    }
    else {
        expiration = PyNumber_Add(clock, seconds);
    }
    /* The lists read once the record is made, as in defer(). */
    if (expiration == NULL || (callback = new_record(kind)) == NULL) {
        goto error;
    }
    PyObject *unindexed = peek(self, S.unindexed);
    PyObject *queue = unindexed == NULL ? NULL : peek(self, S.enable_queue);
    if (queue == NULL) {
        goto error;
    }
    /* TimerCallback.__init__ (Callback._init_queued) */
    put(callback, S.id, callback_id);
    put(callback, S.fn, fn);
    put_bool(callback, S.enabled, 1);
    put_bool(callback, S.referenced, 1);
    put_bool(callback, S.invokable, 0);
    put_new(callback, S.queued, PyLong_FromLong(1));
    put(callback, S.interval, seconds);
    put(callback, S.expiration, expiration);
    put(callback, S.entry, Py_None);
    put_bool(callback, S.indexed, 0);
    if (PyList_Append(unindexed, callback) < 0 || PyList_Append(queue, callback) < 0
        || add_to(self, S.live, 1) < 0) {
        goto error;
    }
    Py_DECREF(clock);
    Py_DECREF(expiration);
    Py_DECREF(callback);
    return callback_id;

error:
    Py_XDECREF(clock);
    Py_XDECREF(expiration);
    Py_XDECREF(callback);
    Py_DECREF(callback_id);
    return NULL;
}

/* check_seconds(value, name): a new reference to a float.  A float >= 0 is itself, an int
 * >= 0 its float (infinity when too big for one), as the Python check makes them; any other
 * value goes to that check, which raises what it must. */
static PyObject *
checked_seconds(PyObject *value, const char *name)
{
    if (PyFloat_CheckExact(value) && PyFloat_AS_DOUBLE(value) >= 0) {
        return Py_NewRef(value);
    }
    if (PyLong_CheckExact(value)) {
        int overflow;
        long small = PyLong_AsLongAndOverflow(value, &overflow);
        if (overflow > 0 || (!overflow && small >= 0)) {
            double seconds = PyLong_AsDouble(value);
            if (seconds == -1.0 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
                    return NULL;
                }
                PyErr_Clear(); /* as good as never */
                seconds = Py_HUGE_VAL;
            }
            return PyFloat_FromDouble(seconds);
        }
        if (small == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    PyObject *label = PyUnicode_FromString(name);
    if (label == NULL) {
        return NULL;
    }
    PyObject *args[2] = {value, label};
    PyObject *seconds = PyObject_Vectorcall(S.check_seconds, args, 2, NULL);
    Py_DECREF(label);
    return seconds;
}

PyObject *
loop_delay(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *given[2];
    PyObject *names[2] = {S.s_seconds, S.s_fn};
    if (nargs == 2 && kwnames == NULL) {
        given[0] = args[0];
        given[1] = args[1];
    }
    else if (parse_args("delay", args, nargs, kwnames, names, 2, given) < 0) {
        return NULL;
    }
    PyObject *fn = given[1], *seconds = checked_seconds(given[0], "seconds");
    if (seconds == NULL) {
        return NULL;
    }
    PyObject *result = check_timed(fn) < 0 ? NULL : add_timer(self, seconds, fn, S.c_delay_type);
    Py_DECREF(seconds);
    return result;
}

PyObject *
loop_repeat(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *given[2];
    PyObject *names[2] = {S.s_interval, S.s_fn};
    if (parse_args("repeat", args, nargs, kwnames, names, 2, given) < 0) {
        return NULL;
    }
    PyObject *interval = checked_seconds(given[0], "interval");
    if (interval == NULL) {
        return NULL;
    }
    /* check_callback(fn); check_timed() comes to the same answer, faster for a function. */
    PyObject *result = check_timed(given[1]) < 0 ? NULL
                                                 : add_timer(self, interval, given[1],
                                                             S.c_repeat_type);
    Py_DECREF(interval);
    return result;
}

