/* _dispatch.h: what the files of iopoll.loop._speedups share (see _speedups.c): the slots
 * and names install() finds, the helpers that read and write slots and call back into
 * Python, and the methods each file defines for the others. */

#ifndef IOPOLL_LOOP_DISPATCH_H
#define IOPOLL_LOOP_DISPATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "../_cslots.h"
#include "../_wait_api.h"

#define CO_ASYNC (CO_COROUTINE | CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR)

/* The end of the docstring of each method installed. */
#define C_NOTE "\n\nRuns in C (iopoll.loop._speedups); the Python method is the reference."

/* The slots used and the classes and names needed, found by the first install(). */
typedef struct {
    /* CallbackRegistry */
    PyMemberDef *callbacks, *id_prefix, *id_index, *enable_queue, *enable_spare, *defers;
    PyMemberDef *stale_queued;
    PyMemberDef *live, *timers, *timer_seq, *dead_timers, *signal_callbacks, *signals;
    PyMemberDef *fifo_seqs, *fifo_timers, *fifo_last;
    PyMemberDef *unindexed, *unindexed_limit;
    Py_ssize_t sweep_unindexed; /* _registry._SWEEP_UNINDEXED */
    /* AbstractDriver */
    PyMemberDef *queue, *microtasks, *idle, *stopped, *interrupt, *runner;
    PyMemberDef *fallback_count, *registered, *poller, *fallback, *wakeup;
    PyMemberDef *runner_loop; /* LoopRunner.loop */
    PyTypeObject *runner_type; /* LoopRunner, whose slot that is */
    /* Callback and its kinds */
    PyMemberDef *id, *fn, *enabled, *referenced, *invokable, *queued, *indexed;
    PyMemberDef *interval, *expiration, *entry; /* TimerCallback */
    PyMemberDef *stream_arg, *signal_arg;       /* StreamCallback.arg, SignalCallback.arg */
    PyTypeObject *driver_type;                  /* AbstractDriver */
    PyTypeObject *defer_type, *delay_type, *repeat_type, *timer_type;
    PyTypeObject *stream_type, *signal_type;
    PyTypeObject *callback_type; /* Callback, the class of every record */
    PyTypeObject *readable_type, *writable_type; /* the two StreamCallback kinds */
    /* The records defer(), delay() and repeat() make: subclasses of the first three above
     * with a garbage-collector walk of their own (_records.c). */
    PyTypeObject *c_defer_type, *c_delay_type, *c_repeat_type;
    PyObject *sleep;         /* time.sleep: a poll with no fd to wait for */
    PyObject *monotonic;     /* time.monotonic, AbstractDriver._now */
    /* The classes install() was given: their C methods run each other directly. */
    struct {
        PyTypeObject *type;
        int monotonic; /* its _now is time.monotonic */
        int io;        /* install_io() gave it IoPollDriver's _wait and _queue_ready */
    } installed[4];
    PyTypeObject *deque_type; /* collections.deque, and the methods of it and dict used */
    PyObject *deque_popleft, *deque_append, *deque_extend, *dict_values;
    /* Their C functions (NULL: called through the descriptors; see c_method()). */
    PyCFunction deque_popleft_c, deque_append_c, deque_extend_c;
    PyObject *letters;       /* ("a", .., "z"): the last letter of an id */
    PyObject *check_callback, *check_seconds, *superseded;
    PyObject *zero; /* 0.0 */
    PyObject *s_now, *s_poll, *s_carry, *s_activate, *s_activate_stream, *s_blocking_timeout;
    PyObject *s_enqueue_signals, *s_enqueue_timers, *s_error, *s_refuse_result;
    PyObject *s_deliver_interrupt, *s_drain, *s_tick, *s_run_microtasks;
    PyObject *s_popleft, *s_append, *s_extend, *s_clear, *s_pending, *s_once, *s_arg, *s_code;
    PyObject *s_co_flags, *s_seconds, *s_interval, *s_fn;
    PyObject *s_wait, *s_context_wait, *s_queue_ready, *s_idle_wait, *s_signals_ready, *s_values;
    PyObject *s_suspension, *s_sweep_unindexed, *s_tidy_unindexed;
    /* IoPollDriver's _wait and _queue_ready (install_io()): Watcher and FdEntry slots */
    PyMemberDef *w_data, *w_triggered, *e_readers, *e_writers;
    PyTypeObject *watcher_type; /* the Watcher class whose slots those are */
    PyTypeObject *entry_type;   /* FdEntry */
    PyObject *wake_table;     /* _iopoll_driver._WAKE: reported Event -> READ|WRITE bits */
    PyObject *stream_lost;    /* _iopoll_driver._StreamLost */
    long wakes_readers, wakes_writers; /* _WakeTable.READERS and .WRITERS, as ints */
    PyTypeObject *context_type;        /* iopoll.Context */
    PyObject *context_wait;            /* its wait() when that is iopoll._speedups' C one */
    PyObject *(*context_wait_c)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
    const IopollWaitApi *wait_api;     /* iopoll._speedups' _C_API, with context_wait_c */
    int io_made;
} Slots;

/* One set per process: the classes are iopoll.loop's, and there is one of each. */

/* One set per process, made by the first install() (_speedups.c): the classes are
 * iopoll.loop's, and there is one of each. */
extern Slots S;

/* -- slots ------------------------------------------------------------------------------ */

/* obj.<member> = value (a new reference is taken). */
#define put set_slot

/* obj.<member> = value, stealing value (NULL: an error already set, returns -1). */
static inline int
put_new(PyObject *obj, PyMemberDef *member, PyObject *value)
{
    if (value == NULL) {
        return -1;
    }
    put(obj, member, value);
    Py_DECREF(value);
    return 0;
}

static inline int
put_bool(PyObject *obj, PyMemberDef *member, int value)
{
    put(obj, member, value ? Py_True : Py_False);
    return 0;
}

/* Whether an exact int is not 0, read from the object (the counters the driver keeps). */
static inline int
int_truth(PyObject *value)
{
#if PY_VERSION_HEX >= 0x030C0000
    /* 0 is compact; an int too large to be compact is never 0. */
    return !PyUnstable_Long_IsCompact((PyLongObject *)value)
           || PyUnstable_Long_CompactValue((PyLongObject *)value) != 0;
#else
    return Py_SIZE(value) != 0; /* the sign and number of digits: 0 has none */
#endif
}

/* The truth of a bool or int slot (anything else: its truth value); -1 on error. */
static inline int
truth(PyObject *obj, PyMemberDef *member)
{
    PyObject *value = peek(obj, member);
    if (value == Py_True) {
        return 1;
    }
    if (value == Py_False) {
        return 0;
    }
    if (value != NULL && PyLong_CheckExact(value)) {
        return int_truth(value);
    }
    if (value == NULL) {
        return -1;
    }
    Py_INCREF(value); /* its __bool__ may set the slot again */
    int set = PyObject_IsTrue(value);
    Py_DECREF(value);
    return set;
}

/* `bool(x)` for a container the driver keeps: without a call for an exact list or dict
 * (its run queue and fd maps, its timer lists); anything else as Python reads it. */
static inline int
nonempty(PyObject *x)
{
    if (PyList_CheckExact(x)) {
        return PyList_GET_SIZE(x) != 0;
    }
    if (PyDict_CheckExact(x)) {
        return PyDict_GET_SIZE(x) != 0;
    }
    return PyObject_IsTrue(x);
}

/* `len(x)` for the driver's queues: an exact list's or deque's size read in place (a deque
 * keeps its length in ob_size, as CPython's _collectionsmodule.c does since deque began);
 * anything else as Python asks it. */
static inline Py_ssize_t
length_of(PyObject *x)
{
    if (PyList_CheckExact(x)) {
        return PyList_GET_SIZE(x);
    }
    if (Py_IS_TYPE(x, S.deque_type)) {
        return Py_SIZE(x);
    }
    return PyObject_Size(x);
}

/* obj.<member> += delta, for an int slot; -1 on error. */
static inline int
add_to(PyObject *obj, PyMemberDef *member, long delta)
{
    PyObject *value = peek(obj, member);
    if (value == NULL) {
        return -1;
    }
    if (PyLong_CheckExact(value)) {
        int overflow;
        long current = PyLong_AsLongAndOverflow(value, &overflow);
        if (!overflow && current > LONG_MIN + 1 && current < LONG_MAX - 1) {
            return put_new(obj, member, PyLong_FromLong(current + delta));
        }
    }
    /* Held: another int's addition may run code that sets the slot again. */
    Py_INCREF(value);
    PyObject *step = PyLong_FromLong(delta);
    PyObject *sum = step == NULL ? NULL : PyNumber_Add(value, step);
    Py_XDECREF(step);
    Py_DECREF(value);
    return put_new(obj, member, sum);
}

static inline int
set_item(PyObject *mapping, PyObject *key, PyObject *value)
{
    if (PyDict_CheckExact(mapping)) {
        return PyDict_SetItem(mapping, key, value);
    }
    return PyObject_SetItem(mapping, key, value);
}

/* -- calls ------------------------------------------------------------------------------- */

static inline PyObject *
call0(PyObject *self, PyObject *name)
{
    return call_method(self, name, NULL, 0);
}

static inline PyObject *
call1(PyObject *self, PyObject *name, PyObject *arg)
{
    return call_method(self, name, &arg, 1);
}

/* Run self._error(fn, exc) as Python's `except Exception as exc:` block does: with exc as
 * the exception being handled, so that an error raised inside chains to it.  Steals exc. */
static inline int
report_error(PyObject *self, PyObject *fn, PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *outer = PyErr_GetHandledException();
    PyErr_SetHandledException(exc);
#else
    PyObject *outer_type, *outer_value, *outer_tb;
    PyErr_GetExcInfo(&outer_type, &outer_value, &outer_tb);
    PyErr_SetExcInfo(Py_NewRef((PyObject *)Py_TYPE(exc)), Py_NewRef(exc),
                     PyException_GetTraceback(exc));
#endif
    PyObject *args[2] = {fn, exc};
    PyObject *result = call_method(self, S.s_error, args, 2);
#if PY_VERSION_HEX >= 0x030B0000
    PyErr_SetHandledException(outer);
    Py_XDECREF(outer);
#else
    PyErr_SetExcInfo(outer_type, outer_value, outer_tb);
#endif
    Py_DECREF(exc);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* A pending error that `except Exception` would catch: 1 (and the error is still set), 0
 * for a BaseException that must go on up. */
static inline int
catchable(void)
{
    return PyErr_ExceptionMatches(PyExc_Exception);
}

/* The entry of self's class among the classes install() was given, or NULL (a subclass:
 * it may override any method, so everything goes by name). */
static inline int
native_index(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    for (int i = 0; i < 4 && S.installed[i].type != NULL; i++) {
        if (S.installed[i].type == type) {
            return i;
        }
    }
    return -1;
}

/* a <op> b for an order (Py_LT, Py_LE, Py_GT, Py_GE), as Python compares them, without a
 * call when both are floats (a timer's expiration and the clock): 1, 0, or -1 on error. */
static inline int
ordered(PyObject *a, PyObject *b, int op)
{
    if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b)) {
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        switch (op) {
        case Py_LT:
            return x < y;
        case Py_LE:
            return x <= y;
        case Py_GT:
            return x > y;
        default:
            return x >= y;
        }
    }
    /* Both held: the comparison may run code that drops what the caller read them from
     * (a slot, a list), and a reflected comparison reads the operands again. */
    Py_INCREF(a);
    Py_INCREF(b);
    int result = PyObject_RichCompareBool(a, b, op);
    Py_DECREF(a);
    Py_DECREF(b);
    return result;
}

/* self._now(): time.monotonic called directly for a class install() was given that keeps
 * AbstractDriver's clock; a subclass may have a clock of its own. */
static inline PyObject *
now(PyObject *self)
{
    int index = native_index(self);
    if (index >= 0 && S.installed[index].monotonic) {
        return PyObject_Vectorcall(S.monotonic, NULL, 0, NULL);
    }
    return call0(self, S.s_now);
}

/* self.<name>(arg) (arg NULL: no argument), where `function` is this module's version of
 * that method: called directly for a class install() was given, by name otherwise. */
static inline PyObject *
own_method(PyObject *self, PyObject *name, PyObject *(*function)(PyObject *, PyObject *),
           PyObject *arg)
{
    if (native_index(self) >= 0) {
        return function(self, arg);
    }
    return arg == NULL ? call0(self, name) : call1(self, name, arg);
}

/* obj.<name>(arg) where `method` is the method descriptor of obj's usual type `type` and
 * `direct` its C function (a METH_NOARGS one when arg is NULL, else METH_O; NULL: unknown):
 * called without a lookup when obj is of that type exactly, and without the descriptor's
 * call machinery when the function is known. */
static inline PyObject *
typed_call(PyObject *obj, PyTypeObject *type, PyCFunction direct, PyObject *method,
           PyObject *name, PyObject *arg)
{
    if (Py_IS_TYPE(obj, type)) {
        if (direct != NULL) {
            return direct(obj, arg);
        }
        PyObject *args[2] = {obj, arg};
        return PyObject_Vectorcall(method, args, arg == NULL ? 1 : 2, NULL);
    }
    return arg == NULL ? call0(obj, name) : call1(obj, name, arg);
}

#define DEQUE_POPLEFT(q)                                                                  \
    typed_call((q), S.deque_type, S.deque_popleft_c, S.deque_popleft, S.s_popleft, NULL)
#define DEQUE_APPEND(q, x)                                                                \
    typed_call((q), S.deque_type, S.deque_append_c, S.deque_append, S.s_append, (x))
#define DEQUE_EXTEND(q, x)                                                                \
    typed_call((q), S.deque_type, S.deque_extend_c, S.deque_extend, S.s_extend, (x))

/* heapq.heappush and heapq.heappop on a list of heap entries, and `del queue[:count]` for
 * the queues a tick empties (_timer_heap.c). */
int loop_heap_push(PyObject *heap, PyObject *item);
PyObject *loop_heap_pop(PyObject *heap);
int loop_heap_first(PyObject *entry, PyObject *expiration, PyObject *seq);
int loop_drop_front(PyObject *list, Py_ssize_t count);

/* The methods install() puts on the driver classes: the registration (_schedule.c),
 * CallbackRegistry's activation and upkeep (_registry.c), the timers' queueing (_timers.c)
 * and the run loop (_dispatch.c). */
PyObject *loop_defer(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames);
PyObject *loop_delay(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames);
PyObject *loop_repeat(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames);
PyObject *loop_carry(PyObject *self, PyObject *ignored);
PyObject *loop_activate(PyObject *self, PyObject *callbacks);
PyObject *loop_sweep_unindexed(PyObject *self, PyObject *ignored);
PyObject *loop_tidy_unindexed(PyObject *self, PyObject *ignored);
PyObject *loop_enqueue_timers(PyObject *self, PyObject *ignored);
PyObject *loop_tick(PyObject *self, PyObject *previous_idle);
PyObject *loop_run_microtasks(PyObject *self, PyObject *ignored);
PyObject *loop_drain(PyObject *self, PyObject *ignored);
PyObject *loop_run(PyObject *self, PyObject *fresh);
PyObject *loop_poll(PyObject *self, PyObject *timeout);

/* What those files call of each other.  _timers.c: the heap and the FIFO's two lists as new
 * references (0, or -1 on error), and one enabled timer put where it goes (the timer
 * branch of CallbackRegistry._activate).  _registry.c: the end of AbstractDriver._drain,
 * _tidy_unindexed() when it is due. */
int loop_timer_lists(PyObject *self, PyObject **lists);
int loop_activate_timer(PyObject *self, PyObject *callback, PyObject *timers, PyObject *seqs,
                        PyObject *fifo, PyObject *seq);
int loop_tidy_if_due(PyObject *self);

/* The classes of the records made in C (_records.c), made by the first install(); and
 * the module function that tracks a driver's untracked ones before a full collection. */
int make_record_types(void);
PyObject *track_records(PyObject *module, PyObject *driver);

/* Whether `kind` is one of the stream records on_readable() and on_writable() make: the
 * run loop's usual callback, told apart without a subclass walk. */
static inline int
is_stream_record(PyTypeObject *kind)
{
    return kind == S.readable_type || kind == S.writable_type;
}

/* Whether a record is of one of the classes of the C records. */
static inline int
is_c_record(PyTypeObject *kind)
{
    return kind == S.c_defer_type || kind == S.c_delay_type || kind == S.c_repeat_type;
}

/* Whether `obj`, taken from one of the driver's queues, timer lists or _unindexed, is a
 * record of `type` (S.callback_type, or S.timer_type for a timer's slots), whose slots
 * this code reads by offset: 0 yes.  -1 no, with the error Python raises where it reads
 * `member` of it (AttributeError); or, for an object that has that attribute, a TypeError:
 * a stand-in that is not a record is left to the Python methods' duck typing
 * (IOPOLL_PURE_PYTHON=1). */
static inline int
check_record(PyObject *obj, PyTypeObject *type, PyMemberDef *member)
{
    PyTypeObject *kind = Py_TYPE(obj);
    int usual = type == S.callback_type ? is_c_record(kind) || is_stream_record(kind)
                                        : kind == S.c_delay_type || kind == S.c_repeat_type;
    if (usual || PyObject_TypeCheck(obj, type)) {
        return 0;
    }
    PyObject *found = PyObject_GetAttrString(obj, member->name);
    if (found != NULL) {
        Py_DECREF(found);
        PyErr_Format(PyExc_TypeError, "iopoll.loop's C dispatch takes callback records only, "
                                      "not '%.200s' objects", kind->tp_name);
    }
    return -1;
}

/* PyObject_TypeCheck(obj, type), with the usual cases (the class itself, or a direct
 * subclass such as the accelerated drivers' NativeLoopRunner) told without a walk of the
 * MRO. */
static inline int
of_class(PyObject *obj, PyTypeObject *type)
{
    PyTypeObject *kind = Py_TYPE(obj);
    return kind == type || kind->tp_base == type || PyType_IsSubtype(kind, type);
}

/* obj.<member>, a new reference: by offset when `typed` (obj is of the class the slot was
 * found on), by name otherwise, as Python reads it. */
static inline PyObject *
slot_or_attribute(PyObject *obj, int typed, PyMemberDef *member)
{
    return typed ? get_slot(obj, member) : PyObject_GetAttrString(obj, member->name);
}

/* runner.loop, a new reference, for the driver's private _runner (a LoopRunner, or
 * anything else put there). */
static inline PyObject *
runner_loop(PyObject *runner)
{
    return slot_or_attribute(runner, of_class(runner, S.runner_type), S.runner_loop);
}

/* The suspension round trip (_suspend.c): the driver's get_suspension(), put on it by
 * install(), and the module function that puts the rest on LoopRunner and Suspension
 * subclasses. */
PyObject *loop_get_suspension(PyObject *self, PyObject *ignored);
PyObject *install_suspensions(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* IoPollDriver's methods (_iopoll_ready.c), put on it by install_io(). */
PyObject *iopoll_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *iopoll_queue_ready(PyObject *self, PyObject *ready);
int iopoll_waits_in_c(PyObject *poller);
Py_ssize_t iopoll_wait_and_queue(PyObject *self, PyObject *poller, PyObject *timeout);

#endif /* IOPOLL_LOOP_DISPATCH_H */
