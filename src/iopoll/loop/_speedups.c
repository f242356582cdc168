/* iopoll.loop._speedups: the dispatch of iopoll.loop's drivers in C.
 *
 * The pure-Python methods of CallbackRegistry (_registry.py) and AbstractDriver
 * (_abstract_driver.py) are the reference; these are the ones a busy loop runs per callback
 * or per tick, line for line, without the interpreter's frames around them:
 *
 *   defer(fn), delay(seconds, fn), repeat(interval, fn)    registration
 *   _carry()                                                 the next id prefix
 *   _loop(fresh), _tick(previous_idle), _drain()             the run loop and one tick
 *   _run_microtasks(), _activate(callbacks), _enqueue_timers()
 *   get_suspension(), and a suspension's round trip on LoopRunner and Suspension subclasses
 *
 * Everything else (enable, disable, cancel, the poll, signals, errors, streams, the rest of
 * the greenlet handling) stays in Python, and these call it by name, as the Python methods
 * do: `self._poll(t)`, `self._error(fn, exc)`, `self._activate_stream(cb)`.  So a driver
 * subclass that overrides one of those is obeyed (one of the methods above is called
 * directly only for a class install() was given, by name for a subclass), and no state
 * lives here: the driver, its callback records and its LoopRunner are Python objects with
 * __slots__, which install() finds once and this code then reads and writes by offset (see
 * _cslots.h).  The timers are the driver's: the FIFO of interval-0 timers (two lists) and
 * the heap, a list of (expiration, seq, callback) tuples kept with heapq's own algorithm,
 * so that the Python methods that touch them (_next_expiration, _sweep_timers) share them.
 *
 * This file holds install() and the module; _schedule.c the registration methods (ids,
 * the checks of a callback, new records); _dispatch.c the run loop, the tick and the drain;
 * _registry.c the activation of enabled records and the upkeep of the unindexed ones;
 * _timers.c where a timer waits and when it is queued; _timer_heap.c the heap's algorithm;
 * _iopoll_ready.c IoPollDriver's poll; _records.c the classes of the records made here
 * (subclasses of the Python ones, with a cheaper walk for the garbage collector);
 * _suspend.c a suspension's round trip; _dispatch.h what they share.
 *
 * install(cls) puts these methods on cls, a subclass of AbstractDriver; iopoll.loop does so
 * for IoPollDriver and SelectorsDriver unless IOPOLL_PURE_PYTHON is set.  Their parent
 * classes keep the Python methods: tests/test_loop_speedups.py runs both side by side.
 */

#include "_dispatch.h"

#include <string.h>

Slots S;
static int S_made = 0;

/* The C function behind `descriptor`, a method of a C class (deque.popleft ...), when it is
 * the method `name` taking `flags`; else NULL, and calls go through the descriptor.  The
 * function is read from CPython's PyMethodDescrObject (no public API gives it); its name
 * and flags are checked first, so that a change of that struct turns the direct calls off
 * and tests/test_loop_speedups.py::test_the_deque_methods_are_called_directly fails. */
static PyCFunction
c_method(PyObject *descriptor, const char *name, int flags)
{
    if (!Py_IS_TYPE(descriptor, &PyMethodDescr_Type)) {
        return NULL;
    }
    PyMethodDef *method = ((PyMethodDescrObject *)descriptor)->d_method;
    if (method == NULL || method->ml_name == NULL || strcmp(method->ml_name, name) != 0
        || method->ml_flags != flags) {
        return NULL;
    }
    return method->ml_meth;
}

/* -- install() ------------------------------------------------------------------------------ */

static PyMethodDef driver_methods[] = {
    {"defer", (PyCFunction)(void (*)(void))loop_defer, METH_FASTCALL | METH_KEYWORDS,
     "defer($self, /, fn)\n--\n\nRun ``fn(id)`` in the next tick; return the id." C_NOTE},
    {"delay", (PyCFunction)(void (*)(void))loop_delay, METH_FASTCALL | METH_KEYWORDS,
     "delay($self, /, seconds, fn)\n--\n\nRun ``fn(id)`` once, ``seconds`` from now; "
     "return the id." C_NOTE},
    {"repeat", (PyCFunction)(void (*)(void))loop_repeat, METH_FASTCALL | METH_KEYWORDS,
     "repeat($self, /, interval, fn)\n--\n\nRun ``fn(id)`` every ``interval`` seconds; "
     "return the id." C_NOTE},
    {"_carry", (PyCFunction)loop_carry, METH_NOARGS,
     "Move the id prefix on (\"\" -> \"a\" ... \"z\" -> \"aa\"); return the next index, 0."
     C_NOTE},
    {"_activate", (PyCFunction)loop_activate, METH_O,
     "Activate the records enabled since the last tick." C_NOTE},
    {"_enqueue_timers", (PyCFunction)loop_enqueue_timers, METH_NOARGS,
     "Queue the due timers' callbacks." C_NOTE},
    {"_sweep_unindexed", (PyCFunction)loop_sweep_unindexed, METH_NOARGS,
     "Drop every record that ended from ``_unindexed``." C_NOTE},
    {"_tidy_unindexed", (PyCFunction)loop_tidy_unindexed, METH_NOARGS,
     "After a run of the queue: drop the ended records at the front of ``_unindexed``, then "
     "sweep it whole if it reached its limit." C_NOTE},
    {"_tick", (PyCFunction)loop_tick, METH_O, "One tick, up to running its queue." C_NOTE},
    {"_run_microtasks", (PyCFunction)loop_run_microtasks, METH_NOARGS,
     "Run the queued microtasks." C_NOTE},
    {"_drain", (PyCFunction)loop_drain, METH_NOARGS,
     "Run the microtasks, then each queued callback followed by the microtasks." C_NOTE},
    {"_poll", (PyCFunction)loop_poll, METH_O,
     "Wait up to ``timeout`` seconds, then queue what is ready." C_NOTE},
    {"_loop", (PyCFunction)loop_run, METH_O,
     "Run ticks until stop() or until no callback keeps the loop alive." C_NOTE},
    {"get_suspension", (PyCFunction)loop_get_suspension, METH_NOARGS,
     "The suspension of the current greenlet (needs the ``greenlet`` package)." C_NOTE},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject *
class_named(PyObject *module, const char *name)
{
    PyObject *found = PyObject_GetAttrString(module, name);
    if (found != NULL && !PyType_Check(found)) {
        PyErr_Format(PyExc_TypeError, "%s must be a class", name);
        Py_CLEAR(found);
    }
    return (PyTypeObject *)found;
}

static PyObject *
import_from(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name);
    if (module == NULL) {
        return NULL;
    }
    PyObject *found = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return found;
}

/* Find the slots, classes and names, once; the classes stay alive with the references. */
static int
make_slots(PyTypeObject *driver_type, PyTypeObject *runner_type)
{
    Slots found = {0};
    PyObject *callbacks_module = PyImport_ImportModule("iopoll.loop._callbacks");
    if (callbacks_module == NULL) {
        return -1;
    }
    found.defer_type = class_named(callbacks_module, "DeferCallback");
    found.delay_type = class_named(callbacks_module, "DelayCallback");
    found.repeat_type = class_named(callbacks_module, "RepeatCallback");
    found.timer_type = class_named(callbacks_module, "TimerCallback");
    found.stream_type = class_named(callbacks_module, "StreamCallback");
    found.signal_type = class_named(callbacks_module, "SignalCallback");
    found.callback_type = class_named(callbacks_module, "Callback");
    found.readable_type = class_named(callbacks_module, "ReadableCallback");
    found.writable_type = class_named(callbacks_module, "WritableCallback");
    found.check_callback = PyObject_GetAttrString(callbacks_module, "check_callback");
    found.check_seconds = PyObject_GetAttrString(callbacks_module, "check_seconds");
    Py_DECREF(callbacks_module);
    if (!found.defer_type || !found.delay_type || !found.repeat_type || !found.timer_type
        || !found.stream_type || !found.signal_type || !found.callback_type
        || !found.readable_type
        || !found.writable_type || !found.check_callback
        || !found.check_seconds) {
        goto error;
    }
    PyTypeObject *d = driver_type, *t = found.timer_type;
    if (!(found.callbacks = member_of(d, "_callbacks")) || !(found.id_prefix = member_of(d, "_id_prefix"))
        || !(found.id_index = member_of(d, "_id_index"))
        || !(found.enable_queue = member_of(d, "_enable_queue"))
        || !(found.enable_spare = member_of(d, "_enable_spare"))
        || !(found.defers = member_of(d, "_defers"))
        || !(found.stale_queued = member_of(d, "_stale_queued"))
        || !(found.live = member_of(d, "_live")) || !(found.timers = member_of(d, "_timers"))
        || !(found.timer_seq = member_of(d, "_timer_seq"))
        || !(found.dead_timers = member_of(d, "_dead_timers"))
        || !(found.fifo_seqs = member_of(d, "_fifo_seqs"))
        || !(found.fifo_timers = member_of(d, "_fifo_timers"))
        || !(found.fifo_last = member_of(d, "_fifo_last"))
        || !(found.unindexed = member_of(d, "_unindexed"))
        || !(found.unindexed_limit = member_of(d, "_unindexed_limit"))
        || !(found.signal_callbacks = member_of(d, "_signal_callbacks"))
        || !(found.signals = member_of(d, "_signals")) || !(found.queue = member_of(d, "_queue"))
        || !(found.microtasks = member_of(d, "_microtasks"))
        || !(found.idle = member_of(d, "_idle")) || !(found.stopped = member_of(d, "_stopped"))
        || !(found.interrupt = member_of(d, "_interrupt"))
        || !(found.runner = member_of(d, "_runner"))
        || !(found.fallback_count = member_of(d, "_fallback_count"))
        || !(found.registered = member_of(d, "_registered"))
        || !(found.poller = member_of(d, "_poller")) || !(found.fallback = member_of(d, "_fallback"))
        || !(found.wakeup = member_of(d, "_wakeup"))
        || !(found.runner_loop = member_of(runner_type, "loop"))
        || !(found.id = member_of(t, "id")) || !(found.fn = member_of(t, "fn"))
        || !(found.enabled = member_of(t, "enabled"))
        || !(found.referenced = member_of(t, "referenced"))
        || !(found.invokable = member_of(t, "invokable"))
        || !(found.queued = member_of(t, "queued"))
        || !(found.indexed = member_of(t, "indexed"))
        || !(found.interval = member_of(t, "interval"))
        || !(found.expiration = member_of(t, "expiration"))
        || !(found.entry = member_of(t, "entry"))
        || !(found.stream_arg = member_of(found.stream_type, "arg"))
        || !(found.signal_arg = member_of(found.signal_type, "arg"))) {
        goto error;
    }
    found.driver_type = (PyTypeObject *)Py_NewRef(driver_type);
    found.runner_type = (PyTypeObject *)Py_NewRef(runner_type);
    found.letters = PyTuple_New(26);
    if (found.letters == NULL) {
        goto error;
    }
    for (int i = 0; i < 26; i++) {
        char letter = (char)('a' + i);
        PyObject *text = PyUnicode_FromStringAndSize(&letter, 1);
        if (text == NULL) {
            goto error;
        }
        PyTuple_SET_ITEM(found.letters, i, text);
    }
    found.deque_type = (PyTypeObject *)import_from("collections", "deque");
    if (found.deque_type == NULL || !PyType_Check(found.deque_type)) {
        goto error;
    }
    found.deque_popleft = PyObject_GetAttrString((PyObject *)found.deque_type, "popleft");
    found.deque_append = PyObject_GetAttrString((PyObject *)found.deque_type, "append");
    found.deque_extend = PyObject_GetAttrString((PyObject *)found.deque_type, "extend");
    found.dict_values = PyObject_GetAttrString((PyObject *)&PyDict_Type, "values");
    if (!found.deque_popleft || !found.deque_append || !found.deque_extend
        || !found.dict_values) {
        goto error;
    }
    found.deque_popleft_c = c_method(found.deque_popleft, "popleft", METH_NOARGS);
    found.deque_append_c = c_method(found.deque_append, "append", METH_O);
    found.deque_extend_c = c_method(found.deque_extend, "extend", METH_O);
    found.monotonic = import_from("time", "monotonic");
    found.sleep = import_from("time", "sleep");
    found.superseded = import_from("iopoll.loop._suspension", "Superseded");
    found.zero = PyFloat_FromDouble(0.0);
    if (found.monotonic == NULL || found.sleep == NULL || found.superseded == NULL
        || found.zero == NULL) {
        goto error;
    }
    PyObject *sweep = import_from("iopoll.loop._registry", "_SWEEP_UNINDEXED");
    found.sweep_unindexed = sweep == NULL ? -1 : PyLong_AsSsize_t(sweep);
    Py_XDECREF(sweep);
    if (found.sweep_unindexed < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_SWEEP_UNINDEXED must not be negative");
        }
        goto error;
    }
    struct {
        PyObject **target;
        const char *text;
    } names[] = {
        {&found.s_now, "_now"},
        {&found.s_poll, "_poll"},
        {&found.s_carry, "_carry"},
        {&found.s_activate, "_activate"},
        {&found.s_activate_stream, "_activate_stream"},
        {&found.s_blocking_timeout, "_blocking_timeout"},
        {&found.s_enqueue_signals, "_enqueue_signals"},
        {&found.s_enqueue_timers, "_enqueue_timers"},
        {&found.s_error, "_error"},
        {&found.s_refuse_result, "_refuse_result"},
        {&found.s_deliver_interrupt, "_deliver_interrupt"},
        {&found.s_drain, "_drain"},
        {&found.s_tick, "_tick"},
        {&found.s_run_microtasks, "_run_microtasks"},
        {&found.s_popleft, "popleft"},
        {&found.s_append, "append"},
        {&found.s_extend, "extend"},
        {&found.s_clear, "clear"},
        {&found.s_pending, "pending"},
        {&found.s_once, "once"},
        {&found.s_arg, "arg"},
        {&found.s_code, "__code__"},
        {&found.s_co_flags, "co_flags"},
        {&found.s_seconds, "seconds"},
        {&found.s_interval, "interval"},
        {&found.s_fn, "fn"},
        {&found.s_wait, "_wait"},
        {&found.s_context_wait, "wait"},
        {&found.s_queue_ready, "_queue_ready"},
        {&found.s_idle_wait, "_idle_wait"},
        {&found.s_signals_ready, "_signals_ready"},
        {&found.s_values, "values"},
        {&found.s_suspension, "suspension"},
        {&found.s_sweep_unindexed, "_sweep_unindexed"},
        {&found.s_tidy_unindexed, "_tidy_unindexed"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((*names[i].target = PyUnicode_InternFromString(names[i].text)) == NULL) {
            goto error;
        }
    }
    S = found;
    if (make_record_types() < 0) {
        return -1;
    }
    S_made = 1;
    return 0;

error:
    /* The references taken so far are kept: an install() that failed makes iopoll.loop run
     * pure Python for the process, and these are a few classes and strings. */
    return -1;
}

static PyObject *
install(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1])
        || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "install(cls, abstract_driver, loop_runner) takes three classes");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyTypeObject *driver_type = (PyTypeObject *)args[1];
    if (!PyType_IsSubtype(cls, driver_type)) {
        PyErr_Format(PyExc_TypeError, "%s is not a subclass of %s", cls->tp_name,
                     driver_type->tp_name);
        return NULL;
    }
    if (!S_made) {
        if (make_slots(driver_type, (PyTypeObject *)args[2]) < 0) {
            return NULL;
        }
    }
    else if (driver_type != S.driver_type) {
        PyErr_SetString(PyExc_RuntimeError, "install() was called for another AbstractDriver");
        return NULL;
    }
    for (PyMethodDef *def = driver_methods; def->ml_name != NULL; def++) {
        if (set_attribute(cls, PyDescr_NewMethod(cls, def)) < 0) {
            return NULL;
        }
    }
    PyObject *clock = PyObject_GetAttr((PyObject *)cls, S.s_now);
    if (clock == NULL) {
        return NULL;
    }
    int monotonic = clock == S.monotonic;
    Py_DECREF(clock);
    for (int i = 0; i < 4; i++) {
        if (S.installed[i].type == cls) {
            break;
        }
        if (S.installed[i].type == NULL) {
            S.installed[i].type = (PyTypeObject *)Py_NewRef(cls);
            S.installed[i].monotonic = monotonic;
            break;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef iopoll_methods[] = {
    {"_wait", (PyCFunction)(void (*)(void))iopoll_wait, METH_FASTCALL,
     "Wait on ``poller`` up to ``timeout`` seconds; what is ready." C_NOTE},
    {"_queue_ready", (PyCFunction)iopoll_queue_ready, METH_O,
     "Queue the callbacks the ready watchers wake." C_NOTE},
    {NULL, NULL, 0, NULL},
};

/* int(table.<name>), one of the wake table's masks; -1 with an error set. */
static long
mask_of(PyObject *table, const char *name)
{
    PyObject *mask = PyObject_GetAttrString(table, name);
    long value = mask == NULL ? -1 : PyLong_AsLong(mask);
    Py_XDECREF(mask);
    return value;
}

static PyObject *
install_io(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyType_Check(args[0]) || !PyType_Check(args[1])
        || !PyType_Check(args[2]) || !PyType_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "install_io(cls, watcher_type, fd_entry_type, "
                                         "wake_table, stream_lost, context_type) takes "
                                         "three classes, a mapping, an exception class "
                                         "and a class");
        return NULL;
    }
    if (!S_made || !PyType_IsSubtype((PyTypeObject *)args[0], S.driver_type)) {
        PyErr_SetString(PyExc_RuntimeError, "install_io() needs a class install() was given");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    if (!S.io_made) {
        PyTypeObject *watcher_type = (PyTypeObject *)args[1];
        PyTypeObject *entry_type = (PyTypeObject *)args[2];
        if (!PyExceptionClass_Check(args[4])) {
            PyErr_SetString(PyExc_TypeError, "stream_lost must be an exception class");
            return NULL;
        }
        PyMemberDef *w_data, *w_triggered, *e_readers, *e_writers;
        if (!(w_data = member_of(watcher_type, "_data"))
            || !(w_triggered = member_of(watcher_type, "_triggered"))
            || !(e_readers = member_of(entry_type, "readers"))
            || !(e_writers = member_of(entry_type, "writers"))) {
            return NULL;
        }
        long readers = mask_of(args[3], "READERS");
        long writers = PyErr_Occurred() ? -1 : mask_of(args[3], "WRITERS");
        if (PyErr_Occurred()) {
            return NULL;
        }
        PyTypeObject *context_type = (PyTypeObject *)args[5];
        PyObject *wait = PyObject_GetAttrString((PyObject *)context_type, "wait");
        if (wait == NULL) {
            return NULL;
        }
        /* A Context without iopoll's C wait() (its accelerator failed), or whose C wait()
         * is not the one the capsule names (another build), is called by name. */
        PyCFunction wait_c = c_method(wait, "wait", METH_FASTCALL | METH_KEYWORDS);
        const IopollWaitApi *api = NULL;
        if (wait_c != NULL) {
            api = PyCapsule_Import(IOPOLL_WAIT_API_CAPSULE, 0);
            if (api == NULL) {
                PyErr_Clear();
            }
            else if (api->version != IOPOLL_WAIT_API_VERSION
                     || (PyCFunction)(void (*)(void))api->wait != wait_c) {
                api = NULL;
            }
            if (api == NULL) {
                wait_c = NULL;
            }
        }
        S.w_data = w_data;
        S.w_triggered = w_triggered;
        S.e_readers = e_readers;
        S.e_writers = e_writers;
        S.watcher_type = (PyTypeObject *)Py_NewRef(watcher_type);
        S.entry_type = (PyTypeObject *)Py_NewRef(entry_type);
        S.wake_table = Py_NewRef(args[3]);
        S.wakes_readers = readers;
        S.wakes_writers = writers;
        S.context_type = (PyTypeObject *)Py_NewRef(context_type);
        S.context_wait = wait; /* the reference is kept */
        S.context_wait_c = (PyObject * (*)(PyObject *, PyObject *const *, Py_ssize_t,
                                           PyObject *))(void (*)(void))wait_c;
        S.wait_api = api;
        S.stream_lost = Py_NewRef(args[4]);
        S.io_made = 1;
    }
    for (PyMethodDef *def = iopoll_methods; def->ml_name != NULL; def++) {
        if (set_attribute(cls, PyDescr_NewMethod(cls, def)) < 0) {
            return NULL;
        }
    }
    for (int i = 0; i < 4; i++) {
        if (S.installed[i].type == cls) {
            S.installed[i].io = 1;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
method_names(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyObject *names = PyTuple_New(sizeof(driver_methods) / sizeof(driver_methods[0]) - 1);
    if (names == NULL) {
        return NULL;
    }
    Py_ssize_t i = 0;
    for (PyMethodDef *def = driver_methods; def->ml_name != NULL; def++, i++) {
        PyObject *name = PyUnicode_FromString(def->ml_name);
        if (name == NULL) {
            Py_DECREF(names);
            return NULL;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    return names;
}

/* The C methods of other classes that the dispatch calls without their descriptors
 * (c_method()), as "class.method"; empty before the first install(). */
static PyObject *
direct_calls(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    PyObject *names = PyList_New(0);
    struct {
        PyCFunction function;
        const char *name;
    } known[] = {
        {S.deque_popleft_c, "deque.popleft"},
        {S.deque_append_c, "deque.append"},
        {S.deque_extend_c, "deque.extend"},
        {(PyCFunction)(void (*)(void))S.context_wait_c, "Context.wait"},
    };
    for (size_t i = 0; names != NULL && i < sizeof(known) / sizeof(known[0]); i++) {
        PyObject *name = known[i].function ? PyUnicode_FromString(known[i].name) : NULL;
        if (known[i].function && (name == NULL || PyList_Append(names, name) < 0)) {
            Py_CLEAR(names);
        }
        Py_XDECREF(name);
    }
    PyObject *result = names == NULL ? NULL : PyList_AsTuple(names);
    Py_XDECREF(names);
    return result;
}

static PyMethodDef module_methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "install(cls, abstract_driver, loop_runner)\n--\n\n"
     "Put the C dispatch methods on ``cls``, a subclass of ``abstract_driver``."},
    {"install_io", (PyCFunction)(void (*)(void))install_io, METH_FASTCALL,
     "install_io(cls, watcher_type, fd_entry_type, wake_table, stream_lost, context_type)\n"
     "--\n\n"
     "Put IoPollDriver's C ``_wait`` and ``_queue_ready`` on ``cls``."},
    {"install_suspensions", (PyCFunction)(void (*)(void))install_suspensions, METH_FASTCALL,
     "install_suspensions(runner_cls, suspension_cls)\n--\n\n"
     "Put the C suspension round trip on subclasses of LoopRunner and Suspension."},
    {"track_records", (PyCFunction)track_records, METH_O,
     "track_records(driver)\n--\n\n"
     "Track, for the garbage collector, the records of ``driver`` that ``defer()``,\n"
     "``delay()`` and ``repeat()`` made untracked; called before each full collection."},
    {"method_names", (PyCFunction)method_names, METH_NOARGS,
     "method_names()\n--\n\nThe names of the methods ``install()`` puts on a class."},
    {"direct_calls", (PyCFunction)direct_calls, METH_NOARGS,
     "direct_calls()\n--\n\nThe C methods of other classes (``deque.popleft`` ...) that "
     "the dispatch calls\nwithout their descriptors."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot module_slots[] = {
#if PY_VERSION_HEX >= 0x030C0000
    /* The Slots above are static, one set per process: not per interpreter. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    "iopoll.loop._speedups",
    "The drivers' dispatch in C (optional; the pure-Python methods are the reference).",
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
