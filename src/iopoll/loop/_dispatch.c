/* The run loop, one tick and the drain of iopoll.loop's drivers in C: the methods
 * AbstractDriver._loop, _tick, _poll, _drain and _run_microtasks, line for line as the Python
 * methods in _abstract_driver.py (see _speedups.c for the whole).  What a tick calls of the
 * registry is _registry.c's, and the timers' queueing _timers.c's. */

#include "_dispatch.h"

/* -- one tick --------------------------------------------------------------------------- */

/* `spare, self._enable_spare = self._enable_spare, None`, then the spare (or a new list) as
 * the next tick's queue: 0, or -1 on error. */
static int
swap_enable_queue(PyObject *self)
{
    PyObject *spare = get_slot(self, S.enable_spare);
    if (spare == NULL) {
        return -1;
    }
    put(self, S.enable_spare, Py_None); /* the spare is held: nothing dies */
    if (spare == Py_None) {
        Py_SETREF(spare, PyList_New(0));
    }
    return put_new(self, S.enable_queue, spare);
}

/* `queue.clear(); self._enable_spare = queue` once the queue is activated: 0, or -1. */
static int
emptied(PyObject *self, PyObject *queue)
{
    if (PyList_CheckExact(queue)) {
        if (loop_drop_front(queue, PyList_GET_SIZE(queue)) < 0) {
            return -1;
        }
    }
    else {
        PyObject *done = PyObject_CallMethodNoArgs(queue, S.s_clear);
        if (done == NULL) {
            return -1;
        }
        Py_DECREF(done);
    }
    put(self, S.enable_spare, queue);
    return 0;
}

PyObject *
loop_tick(PyObject *self, PyObject *previous_idle)
{
    PyObject *timeout = NULL, *done;
    PyObject *stale = peek(self, S.stale_queued);
    if (stale == NULL) {
        return NULL;
    }
    /* _stale_queued = 0, unless it is 0 already (the usual tick) */
    if ((!PyLong_CheckExact(stale) || int_truth(stale))
        && put_new(self, S.stale_queued, PyLong_FromLong(0)) < 0) {
        return NULL;
    }
    /* Each queue held from its reading on: its truth, and the new list's allocation (a
     * collection), may run code that replaces it. */
    PyObject *enable_queue = get_slot(self, S.enable_queue);
    if (enable_queue == NULL) {
        return NULL;
    }
    int waiting = nonempty(enable_queue);
    if (waiting > 0) {
        waiting = swap_enable_queue(self);
        done = waiting < 0 ? NULL : own_method(self, S.s_activate, loop_activate, enable_queue);
        waiting = done == NULL ? -1 : emptied(self, enable_queue);
        Py_XDECREF(done);
    }
    Py_DECREF(enable_queue);
    if (waiting < 0) {
        return NULL;
    }
    PyObject *defers = get_slot(self, S.defers);
    if (defers == NULL) {
        return NULL;
    }
    waiting = nonempty(defers);
    if (waiting > 0) {
        PyObject *queue = NULL;
        done = NULL;
        if (put_new(self, S.defers, PyList_New(0)) == 0
            && (queue = get_slot(self, S.queue)) != NULL) {
            done = DEQUE_EXTEND(queue, defers);
        }
        waiting = done == NULL ? -1 : 1;
        Py_XDECREF(queue);
        Py_XDECREF(done);
    }
    Py_DECREF(defers);
    if (waiting < 0) {
        return NULL;
    }
    if (waiting) {
        put_bool(self, S.idle, 0);
    }
    /* Block only after a tick that ran nothing, and once the deferred callbacks ran. */
    int idle = PyObject_IsTrue(previous_idle);
    if (idle < 0) {
        return NULL;
    }
    timeout = idle ? call0(self, S.s_blocking_timeout) : Py_NewRef(S.zero);
    if (timeout == NULL) {
        return NULL;
    }
    PyObject *queue = peek(self, S.queue);
    Py_ssize_t mark = queue == NULL ? -1 : length_of(queue);
    if (mark < 0) {
        goto error;
    }
    if ((done = own_method(self, S.s_poll, loop_poll, timeout)) == NULL) {
        goto error;
    }
    Py_DECREF(done);
    Py_CLEAR(timeout);
    PyObject *signals = peek(self, S.signals);
    if (signals == NULL) {
        return NULL;
    }
    if (signals != Py_None) {
        Py_INCREF(signals);
        PyObject *pending = PyObject_GetAttr(signals, S.s_pending);
        int any = pending == NULL ? -1 : PyObject_IsTrue(pending);
        Py_XDECREF(pending);
        if (any > 0) {
            PyObject *position = PyLong_FromSsize_t(mark);
            PyObject *args[2] = {signals, position};
            done = position == NULL ? NULL : call_method(self, S.s_enqueue_signals, args, 2);
            Py_XDECREF(position);
            Py_XDECREF(done);
            any = done == NULL ? -1 : 0;
        }
        Py_DECREF(signals);
        if (any < 0) {
            return NULL;
        }
    }
    PyObject *timers = peek(self, S.timers), *fifo = NULL;
    int any_timers = timers == NULL ? -1 : nonempty(timers);
    if (any_timers == 0) {
        fifo = peek(self, S.fifo_timers);
        any_timers = fifo == NULL ? -1 : nonempty(fifo);
    }
    if (any_timers < 0) {
        return NULL;
    }
    if (any_timers) {
        if ((done = own_method(self, S.s_enqueue_timers, loop_enqueue_timers, NULL)) == NULL) {
            return NULL;
        }
        Py_DECREF(done);
    }
    Py_RETURN_NONE;

error:
    Py_XDECREF(timeout);
    return NULL;
}

/* self._wait(poller, timeout) */
static PyObject *
call_wait(PyObject *self, PyObject *poller, PyObject *timeout)
{
    PyObject *args[3] = {self, poller, timeout};
    int index = native_index(self);
    if (index >= 0 && S.installed[index].io) {
        return iopoll_wait(self, args + 1, 2);
    }
    return PyObject_VectorcallMethod(S.s_wait, args, 3, NULL);
}

/* The end of a poll that found nothing: self._idle_wait() if it waited (timeout). */
static PyObject *
idle_after(PyObject *self, PyObject *timeout)
{
    int waited = PyObject_IsTrue(timeout);
    if (waited < 0) {
        return NULL;
    }
    if (waited) {
        return call0(self, S.s_idle_wait);
    }
    Py_RETURN_NONE;
}

/* AbstractDriver._poll: wait up to `timeout` seconds, then queue what is ready. */
PyObject *
loop_poll(PyObject *self, PyObject *timeout)
{
    PyObject *ready = NULL, *done;
    int fallback = truth(self, S.fallback_count);
    if (fallback < 0) {
        return NULL;
    }
    if (fallback) {
        /* The fallback's streams are always ready: wait on neither poller.  Each poller is
         * read just before its wait and held through it, as Python reads them: the first
         * wait may run code that replaces the fallback. */
        PyObject *zero = PyLong_FromLong(0);
        PyObject *poller = zero == NULL ? NULL : get_slot(self, S.poller);
        PyObject *first = poller == NULL ? NULL : call_wait(self, poller, zero);
        Py_XDECREF(poller);
        PyObject *other = first == NULL ? NULL : get_slot(self, S.fallback);
        PyObject *second = other == NULL ? NULL : call_wait(self, other, zero);
        Py_XDECREF(other);
        Py_XDECREF(zero);
        ready = second == NULL ? NULL : PyNumber_Add(first, second);
        Py_XDECREF(first);
        Py_XDECREF(second);
    }
    else {
        int registered = truth(self, S.registered);
        if (registered < 0) {
            return NULL;
        }
        if (registered) {
            PyObject *poller = get_slot(self, S.poller); /* held: the wait runs code */
            if (poller == NULL) {
                return NULL;
            }
            int index = native_index(self);
            if (index >= 0 && S.installed[index].io && iopoll_waits_in_c(poller)) {
                /* _wait and _queue_ready in one, without the list (_iopoll_ready.c). */
                Py_ssize_t came = iopoll_wait_and_queue(self, poller, timeout);
                Py_DECREF(poller);
                if (came < 0) {
                    return NULL;
                }
                if (came > 0) {
                    put_bool(self, S.idle, 0);
                    Py_RETURN_NONE;
                }
                return idle_after(self, timeout);
            }
            ready = call_wait(self, poller, timeout);
            Py_DECREF(poller);
        }
        else {
            /* No fd to wait for: a zero timeout needs no system call at all. */
            int sleeps = PyObject_IsTrue(timeout);
            if (sleeps < 0) {
                return NULL;
            }
            if (sleeps && (done = PyObject_CallOneArg(S.sleep, timeout)) == NULL) {
                return NULL;
            }
            if (sleeps) {
                Py_DECREF(done);
            }
            Py_RETURN_NONE;
        }
    }
    if (ready == NULL) {
        return NULL;
    }
    int any = nonempty(ready), failed = any < 0;
    if (any > 0) {
        int index = native_index(self);
        done = index >= 0 && S.installed[index].io ? iopoll_queue_ready(self, ready)
                                                   : call1(self, S.s_queue_ready, ready);
        failed = done == NULL;
        Py_XDECREF(done);
        if (!failed) {
            put_bool(self, S.idle, 0);
        }
    }
    Py_DECREF(ready);
    if (failed) {
        return NULL;
    }
    return any ? Py_NewRef(Py_None) : idle_after(self, timeout);
}

/* -- running callbacks ------------------------------------------------------------------ */

/* Whether the greenlet running the loop is still `me`; raises Superseded if not. */
static int
still_running(PyObject *runner, PyObject *me)
{
    PyObject *loop = runner_loop(runner);
    if (loop == NULL) {
        return -1;
    }
    Py_DECREF(loop); /* only its identity is used */
    if (loop != me) {
        PyErr_SetNone(S.superseded); /* the callback suspended: another greenlet runs the loop */
        return -1;
    }
    return 0;
}

PyObject *
loop_run_microtasks(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *microtasks = peek(self, S.microtasks);
    PyObject *runner = peek(self, S.runner);
    if (microtasks == NULL || runner == NULL) {
        return NULL;
    }
    Py_INCREF(microtasks); /* held before runner_loop(): a getattr may run code */
    Py_INCREF(runner);
    PyObject *me = runner_loop(runner);
    if (me == NULL) {
        Py_DECREF(microtasks);
        Py_DECREF(runner);
        return NULL;
    }
    /* A microtask's error ends run() only once the microtasks behind it ran (SPEC 9.1): the
     * queue stops for any other interrupt, not for that one. */
    PyObject *error = Py_NewRef(Py_None);
    int failed = 0;
    while (!failed) {
        Py_ssize_t left = length_of(microtasks);
        PyObject *interrupt = peek(self, S.interrupt);
        if (left < 0 || interrupt == NULL) {
            failed = 1;
            break;
        }
        if (!left || interrupt != error) {
            break;
        }
        PyObject *task = DEQUE_POPLEFT(microtasks);
        if (task == NULL) {
            failed = 1;
            break;
        }
        if (!PyTuple_Check(task) || PyTuple_GET_SIZE(task) != 2) {
            PyErr_SetString(PyExc_ValueError, "a microtask must be a (fn, args) pair");
            Py_DECREF(task);
            failed = 1;
            break;
        }
        PyObject *fn = PyTuple_GET_ITEM(task, 0), *args = PyTuple_GET_ITEM(task, 1);
        PyObject *result;
        if (PyTuple_CheckExact(args)) {
            result = PyObject_Call(fn, args, NULL);
        }
        else {
            PyObject *unpacked = PySequence_Tuple(args); /* fn(*args) */
            result = unpacked == NULL ? NULL : PyObject_Call(fn, unpacked, NULL);
            Py_XDECREF(unpacked);
        }
        if (result == NULL) {
            if (!catchable()) {
                Py_DECREF(task);
                failed = 1;
                break;
            }
            failed = report_error(self, fn, fetch_exception()) < 0;
            PyObject *now_interrupt = failed ? NULL : peek(self, S.interrupt);
            if (now_interrupt == NULL) {
                failed = 1;
            }
            else if (PyExceptionInstance_Check(now_interrupt)) {
                Py_SETREF(error, Py_NewRef(now_interrupt));
            }
        }
        else {
            Py_DECREF(result);
        }
        Py_DECREF(task);
        if (!failed) {
            failed = still_running(runner, me) < 0;
        }
    }
    Py_DECREF(error);
    Py_DECREF(microtasks);
    Py_DECREF(runner);
    Py_DECREF(me);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The argument a record's callback gets after its id, or NULL for none (fn(id)). */
static inline int
second_argument(PyObject *callback, PyObject **arg)
{
    PyTypeObject *kind = Py_TYPE(callback);
    if (kind == S.defer_type || kind == S.delay_type || kind == S.repeat_type
        || is_c_record(kind)) {
        *arg = NULL;
        return 0;
    }
    PyObject *value;
    if (is_stream_record(kind) || PyObject_TypeCheck(callback, S.stream_type)) {
        value = Py_XNewRef(peek(callback, S.stream_arg));
    }
    else if (PyObject_TypeCheck(callback, S.signal_type)) {
        value = Py_XNewRef(peek(callback, S.signal_arg));
    }
    else {
        value = PyObject_GetAttr(callback, S.s_arg);
    }
    if (value == NULL) {
        return -1;
    }
    if (value == Py_None) {
        Py_DECREF(value);
        value = NULL;
    }
    *arg = value;
    return 0;
}

/* Whether a record's id dies just before its call (the kind's `once`). */
static inline int
runs_once(PyObject *callback)
{
    PyTypeObject *kind = Py_TYPE(callback);
    if (kind == S.defer_type || kind == S.delay_type || kind == S.c_defer_type
        || kind == S.c_delay_type) {
        return 1;
    }
    if (kind == S.repeat_type || kind == S.c_repeat_type || is_stream_record(kind)
        || kind == S.signal_type) {
        return 0;
    }
    /* A record with no __dict__ (they have __slots__, none named `once`) reads its
     * class's attribute: found through the type's attribute cache, without a getattr. */
    PyObject *found = kind->tp_dictoffset == 0 ? _PyType_Lookup(kind, S.s_once) : NULL;
    if (found == Py_True || found == Py_False) {
        return found == Py_True;
    }
    PyObject *once = PyObject_GetAttr(callback, S.s_once);
    if (once == NULL) {
        return -1;
    }
    int set = PyObject_IsTrue(once);
    Py_DECREF(once);
    return set;
}

/* The try block of AbstractDriver._drain for one record, whose function is `fn`: -1 with
 * the error set. */
static int
run_callback(PyObject *self, PyObject *callback, PyObject *callback_id, PyObject *fn,
             PyObject *callbacks)
{
    int once = runs_once(callback);
    if (once < 0) {
        return -1;
    }
    if (once) {
        /* A defer's or a delay's id is dead inside its callback (cancel(), inlined), and
         * the record, which may wait in _unindexed a while, lets go of fn. */
        put_bool(callback, S.enabled, 0);
        put_bool(callback, S.invokable, 0);
        /* `del callback.fn`: loop_drain read it just before, so it is set. */
        Py_CLEAR(*(PyObject **)((char *)callback + S.fn->offset));
        int indexed = truth(callback, S.indexed);
        if (indexed < 0 || (indexed && PyObject_DelItem(callbacks, callback_id) < 0)) {
            return -1;
        }
        int referenced = truth(callback, S.referenced);
        if (referenced < 0 || (referenced && add_to(self, S.live, -1) < 0)) {
            return -1;
        }
    }
    else if (Py_IS_TYPE(callback, S.c_repeat_type)
             || (!is_stream_record(Py_TYPE(callback))
                 && PyObject_TypeCheck(callback, S.repeat_type))) {
        /* Re-armed from now, active from the next tick: never twice in one tick. */
        put_bool(callback, S.invokable, 0);
        /* `self._now() + callback.interval`: the clock first, as Python reads them (a
         * _now() of a subclass may set the interval, and drop the one read before). */
        PyObject *clock = now(self);
        PyObject *interval = clock == NULL ? NULL : get_slot(callback, S.interval);
        if (interval == NULL) {
            Py_XDECREF(clock);
            return -1;
        }
        PyObject *expiration = PyFloat_CheckExact(clock) && PyFloat_CheckExact(interval)
                                   ? PyFloat_FromDouble(PyFloat_AS_DOUBLE(clock)
                                                        + PyFloat_AS_DOUBLE(interval))
                                   : PyNumber_Add(clock, interval);
        Py_DECREF(interval);
        Py_DECREF(clock);
        if (put_new(callback, S.expiration, expiration) < 0
            || add_to(callback, S.queued, 1) < 0) {
            return -1;
        }
        /* Read once `queued` was counted: its addition may run code that replaces it. */
        PyObject *queue = get_slot(self, S.enable_queue);
        int appended = queue == NULL ? -1 : PyList_Append(queue, callback);
        Py_XDECREF(queue);
        if (appended < 0) {
            return -1;
        }
    }
    PyObject *arg;
    if (second_argument(callback, &arg) < 0) {
        return -1;
    }
    PyObject *args[2] = {callback_id, arg};
    PyObject *result = PyObject_Vectorcall(fn, args, arg == NULL ? 1 : 2, NULL);
    Py_XDECREF(arg);
    if (result == NULL) {
        return -1;
    }
    if (result != Py_None) {
        PyObject *refused_args[3] = {callback_id, fn, result};
        PyObject *refused = call_method(self, S.s_refuse_result, refused_args, 3);
        Py_DECREF(result);
        Py_XDECREF(refused); /* it always raises */
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

PyObject *
loop_drain(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *microtasks = Py_XNewRef(peek(self, S.microtasks));
    PyObject *queue = Py_XNewRef(peek(self, S.queue));
    PyObject *callbacks = Py_XNewRef(peek(self, S.callbacks));
    PyObject *runner = Py_XNewRef(peek(self, S.runner));
    int failed = microtasks == NULL || queue == NULL || callbacks == NULL || runner == NULL;
    PyObject *me = failed ? NULL : runner_loop(runner);
    PyObject *done;
    failed = failed || me == NULL;
    Py_ssize_t left = failed ? -1 : length_of(microtasks);
    if (left > 0) {
        done = own_method(self, S.s_run_microtasks, loop_run_microtasks, NULL);
        Py_XDECREF(done);
        failed = done == NULL;
    }
    failed = failed || left < 0;
    while (!failed) {
        Py_ssize_t waiting = length_of(queue);
        PyObject *interrupt = peek(self, S.interrupt);
        if (waiting < 0 || interrupt == NULL) {
            failed = 1;
            break;
        }
        if (!waiting || interrupt != Py_None) {
            break;
        }
        PyObject *callback = DEQUE_POPLEFT(queue);
        if (callback == NULL || check_record(callback, S.callback_type, S.invokable) < 0) {
            Py_XDECREF(callback);
            failed = 1;
            break;
        }
        int invokable = truth(callback, S.invokable);
        PyObject *callback_id = invokable > 0 ? Py_XNewRef(peek(callback, S.id)) : NULL;
        if (invokable <= 0 || callback_id == NULL) {
            failed = invokable < 0 || (invokable > 0 && callback_id == NULL);
            Py_DECREF(callback);
            continue;
        }
        PyObject *fn = Py_XNewRef(peek(callback, S.fn));
        if (fn == NULL) {
            failed = 1;
        }
        else if (run_callback(self, callback, callback_id, fn, callbacks) < 0) {
            failed = catchable() ? report_error(self, fn, fetch_exception()) < 0 : 1;
        }
        Py_XDECREF(fn);
        Py_DECREF(callback_id);
        Py_DECREF(callback);
        if (failed || still_running(runner, me) < 0) {
            failed = 1;
            break;
        }
        if ((left = length_of(microtasks)) < 0) {
            failed = 1;
        }
        else if (left) {
            done = own_method(self, S.s_run_microtasks, loop_run_microtasks, NULL);
            Py_XDECREF(done);
            failed = done == NULL;
        }
    }
    failed = failed || loop_tidy_if_due(self) < 0;
    Py_XDECREF(microtasks);
    Py_XDECREF(queue);
    Py_XDECREF(callbacks);
    Py_XDECREF(runner);
    Py_XDECREF(me);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static int
call_step(PyObject *self, PyObject *name, PyObject *(*function)(PyObject *, PyObject *),
          PyObject *arg)
{
    PyObject *done = function != NULL ? own_method(self, name, function, arg)
                     : arg == NULL    ? call0(self, name)
                                      : call1(self, name, arg);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* Ticks that cannot block run between two chances for pending signal handlers. */
#define SIGNAL_CHECK_TICKS 32

PyObject *
loop_run(PyObject *self, PyObject *fresh)
{
    int is_fresh = PyObject_IsTrue(fresh);
    if (is_fresh < 0) {
        return NULL;
    }
    if (is_fresh) {
        put_bool(self, S.stopped, 0);
    }
    if (call_step(self, S.s_drain, loop_drain, NULL) < 0) {
        return NULL;
    }
    unsigned int unchecked = 0; /* ticks since pending signal handlers last had a chance */
    for (;;) {
        int stopped = truth(self, S.stopped);
        if (stopped != 0) {
            if (stopped < 0) {
                return NULL;
            }
            break;
        }
        PyObject *interrupt = peek(self, S.interrupt);
        if (interrupt == NULL) {
            return NULL;
        }
        if (interrupt != Py_None) {
            if (call_step(self, S.s_deliver_interrupt, NULL, NULL) < 0) {
                return NULL;
            }
            continue;
        }
        int live = truth(self, S.live);
        if (live <= 0) {
            if (live < 0) {
                return NULL;
            }
            break;
        }
        PyObject *previous_idle = Py_XNewRef(peek(self, S.idle));
        if (previous_idle == NULL) {
            return NULL;
        }
        /* The Python loop runs pending signal handlers at its back edge.  Without this, a
         * tick whose callbacks are all C callables (builtins, partials, Cython) would spin
         * deaf to Ctrl-C while it never blocks (a stream left readable, a repeat(0)): its
         * probe-first wait makes no system call for a signal to interrupt.  Before a tick
         * that may block, then, and every SIGNAL_CHECK_TICKS ticks that may not (a check
         * costs about 50 instructions, a round trip's tick about 5,000). */
        if (previous_idle == Py_True || ++unchecked == SIGNAL_CHECK_TICKS) {
            unchecked = 0;
            if (PyErr_CheckSignals() < 0) {
                Py_DECREF(previous_idle);
                return NULL;
            }
        }
        put_bool(self, S.idle, 1);
        int failed = call_step(self, S.s_tick, loop_tick, previous_idle);
        Py_DECREF(previous_idle);
        if (failed < 0 || call_step(self, S.s_drain, loop_drain, NULL) < 0) {
            return NULL;
        }
    }
    PyObject *interrupt = peek(self, S.interrupt);
    if (interrupt == NULL) {
        return NULL;
    }
    if (interrupt != Py_None && call_step(self, S.s_deliver_interrupt, NULL, NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}
