/* The run loop, one tick, the drain and the timer queue of iopoll.loop's drivers in C: the
 * methods AbstractDriver._loop, _tick, _drain, _run_microtasks and CallbackRegistry._activate
 * and AbstractDriver._enqueue_timers with its _enqueue_fifo (called here directly, not by
 * name: it is no hook), line for line (see _speedups.c for the whole).  The timer heap they
 * keep is _timer_heap.c's. */

#include "_dispatch.h"

/* -- activation ---------------------------------------------------------------------------- */

/* The timer heap and the FIFO's two lists, as new references: 0, or -1 on error. */
static inline int
timer_lists(PyObject *self, PyObject **lists)
{
    lists[0] = peek(self, S.timers);
    lists[1] = peek(self, S.fifo_seqs);
    lists[2] = peek(self, S.fifo_timers);
    if (lists[0] == NULL || lists[1] == NULL || lists[2] == NULL) {
        return -1;
    }
    if (!PyList_Check(lists[0]) || !PyList_Check(lists[1]) || !PyList_Check(lists[2])) {
        PyErr_SetString(PyExc_TypeError, "the timer heap and FIFO must be lists");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        Py_INCREF(lists[i]);
    }
    return 0;
}

/* Whether a timer with this expiration goes to the back of the FIFO: the heap holds a
 * timer, its interval is 0, and it is not before the FIFO's last. */
static int
fits_fifo(PyObject *self, PyObject *callback, PyObject *timers, PyObject *fifo,
          PyObject *expiration)
{
    if (!PyList_GET_SIZE(timers)) {
        return 0;
    }
    PyObject *interval = peek(callback, S.interval);
    if (interval == NULL) {
        return -1;
    }
    int zero = PyFloat_CheckExact(interval) ? PyFloat_AS_DOUBLE(interval) == 0.0
                                             : PyObject_Not(interval);
    if (zero <= 0) {
        return zero;
    }
    if (!PyList_GET_SIZE(fifo)) {
        return 1;
    }
    PyObject *last = peek(self, S.fifo_last);
    return last == NULL ? -1 : ordered(expiration, last, Py_GE);
}

/* The timer branch of CallbackRegistry._activate: the FIFO's back or the heap. */
static int
activate_timer(PyObject *self, PyObject *callback, PyObject *timers, PyObject *seqs,
               PyObject *fifo, PyObject *seq)
{
    PyObject *expiration = peek(callback, S.expiration);
    if (expiration == NULL) {
        return -1;
    }
    Py_INCREF(expiration);
    PyObject *number = PyIter_Next(seq);
    int failed = -1;
    if (number == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetNone(PyExc_StopIteration);
        }
        goto done;
    }
    int in_order = fits_fifo(self, callback, timers, fifo, expiration);
    if (in_order < 0) {
        goto done;
    }
    if (in_order) {
        put(callback, S.entry, number);
        if (PyList_Append(seqs, number) == 0 && PyList_Append(fifo, callback) == 0) {
            put(self, S.fifo_last, expiration);
            failed = 0;
        }
    }
    else {
        PyObject *entry = PyTuple_Pack(3, expiration, number, callback);
        if (entry == NULL) {
            goto done;
        }
        put(callback, S.entry, entry);
        failed = loop_heap_push(timers, entry);
        Py_DECREF(entry);
    }
done:
    Py_DECREF(expiration);
    Py_XDECREF(number);
    return failed;
}

/* One record of CallbackRegistry._activate's loop. */
static int
activate_one(PyObject *self, PyObject *callback, PyObject *const *lists, PyObject *seq)
{
    if (add_to(callback, S.queued, -1) < 0) {
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
        return activate_timer(self, callback, lists[0], lists[1], lists[2], seq);
    }
    if (PyObject_TypeCheck(callback, S.stream_type)) {
        PyObject *done = call1(self, S.s_activate_stream, callback);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    if (PyObject_TypeCheck(callback, S.signal_type)) {
        PyObject *maps = peek(self, S.signal_callbacks);
        PyObject *signum = peek(callback, S.signal_arg);
        PyObject *callback_id = peek(callback, S.id);
        if (maps == NULL || signum == NULL || callback_id == NULL) {
            return -1;
        }
        PyObject *fresh = PyDict_New();
        if (fresh == NULL) {
            return -1;
        }
        PyObject *callbacks_for = PyDict_SetDefault(maps, signum, fresh); /* borrowed */
        Py_DECREF(fresh);
        if (callbacks_for == NULL) {
            return -1;
        }
        return PyObject_SetItem(callbacks_for, callback_id, callback);
    }
    return 0;
}

PyObject *
loop_activate(PyObject *self, PyObject *callbacks)
{
    PyObject *lists[3]; /* the heap and the FIFO's seqs and records */
    PyObject *seq = peek(self, S.timer_seq);
    if (timer_lists(self, lists) < 0 || seq == NULL) {
        return NULL;
    }
    Py_INCREF(seq);
    PyObject *iterator = PyObject_GetIter(callbacks);
    PyObject *callback = NULL;
    int failed = iterator == NULL;
    while (!failed && (callback = PyIter_Next(iterator)) != NULL) {
        failed = activate_one(self, callback, lists, seq) < 0;
        Py_DECREF(callback);
    }
    failed = failed || PyErr_Occurred() != NULL;
    Py_XDECREF(iterator);
    for (int i = 0; i < 3; i++) {
        Py_DECREF(lists[i]);
    }
    Py_DECREF(seq);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* -- one tick ---------------------------------------------------------------------------- */

/* Whether the heap's head is due: 1, 0, or -1 on error. */
static int
heap_due(PyObject *timers, PyObject *clock)
{
    PyObject *first = Py_NewRef(PyList_GET_ITEM(timers, 0));
    PyObject *head = PyTuple_Check(first) && PyTuple_GET_SIZE(first)
                         ? Py_NewRef(PyTuple_GET_ITEM(first, 0))
                         : PySequence_GetItem(first, 0);
    int due = head == NULL ? -1 : ordered(head, clock, Py_LE);
    Py_XDECREF(head);
    Py_DECREF(first);
    return due;
}

/* Pop the heap's head, due: its record (a new reference) when it is live, else NULL with
 * no error set (the entry was dead, now counted).  NULL with an error set on error. */
static inline PyObject *
heap_take(PyObject *self, PyObject *timers)
{
    PyObject *item = loop_heap_pop(timers);
    if (item == NULL) {
        return NULL;
    }
    PyObject *record = PySequence_GetItem(item, 2);
    PyObject *entry = record == NULL ? NULL : peek(record, S.entry);
    if (entry != NULL && entry != item) {
        Py_CLEAR(record);
        add_to(self, S.dead_timers, -1);
    }
    else if (entry == NULL) {
        Py_CLEAR(record);
    }
    Py_DECREF(item);
    return record;
}

/* Queue a due timer's record: its entry gone (the tick is marked busy by the caller). */
static inline int
queue_timer(PyObject *queue, PyObject *callback)
{
    put(callback, S.entry, Py_None);
    PyObject *done = DEQUE_APPEND(queue, callback);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* One FIFO entry of AbstractDriver._enqueue_fifo, live and due: the heap's timers that come
 * before it (due too), then it. */
static int
take_fifo_entry(PyObject *self, PyObject *timers, PyObject *queue, PyObject *callback,
                PyObject *number)
{
    for (;;) {
        if (!PyList_GET_SIZE(timers)) {
            break;
        }
        PyObject *expiration = peek(callback, S.expiration);
        if (expiration == NULL) {
            return -1;
        }
        Py_INCREF(expiration); /* a comparison may run Python code */
        PyObject *first = Py_NewRef(PyList_GET_ITEM(timers, 0));
        int heap_first = loop_heap_first(first, expiration, number);
        Py_DECREF(first);
        Py_DECREF(expiration);
        if (heap_first <= 0) {
            if (heap_first < 0) {
                return -1;
            }
            break;
        }
        PyObject *record = heap_take(self, timers); /* due: it comes first */
        if (record == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue; /* a dead entry */
        }
        int failed = queue_timer(queue, record);
        Py_DECREF(record);
        if (failed < 0) {
            return -1;
        }
    }
    if (queue_timer(queue, callback) < 0) {
        return -1;
    }
    return put_bool(self, S.idle, 0);
}

/* AbstractDriver._enqueue_fifo: the FIFO's due timers, each after the heap's that come
 * before it; the heap's due timers after the last of them are left to the heap's loop. */
static int
enqueue_fifo(PyObject *self, PyObject *clock)
{
    PyObject *lists[3];
    if (timer_lists(self, lists) < 0) {
        return -1;
    }
    PyObject *timers = lists[0], *seqs = lists[1], *fifo = lists[2];
    PyObject *queue = peek(self, S.queue);
    int failed = queue == NULL;
    Py_XINCREF(queue);
    /* The sizes are read again on each step: a comparison of something other than floats
     * may run Python code. */
    Py_ssize_t taken = 0;
    while (!failed && taken < PyList_GET_SIZE(fifo) && taken < PyList_GET_SIZE(seqs)) {
        PyObject *callback = Py_NewRef(PyList_GET_ITEM(fifo, taken));
        PyObject *number = Py_NewRef(PyList_GET_ITEM(seqs, taken));
        PyObject *entry = peek(callback, S.entry), *expiration = NULL;
        int later = 0;
        if (entry == NULL) {
            failed = 1;
        }
        else if (entry != number) { /* dead: its expiration may have moved since */
            failed = add_to(self, S.dead_timers, -1) < 0;
        }
        else if ((expiration = peek(callback, S.expiration)) == NULL) {
            failed = 1;
        }
        else {
            later = ordered(expiration, clock, Py_GT);
            failed = later < 0
                     || (!later && take_fifo_entry(self, timers, queue, callback, number) < 0);
        }
        Py_DECREF(callback);
        Py_DECREF(number);
        if (later) {
            break; /* every due heap timer comes before it */
        }
        taken++;
    }
    /* All of them, unless the clock went back. */
    if (!failed && taken
        && (PyList_SetSlice(seqs, 0, taken, NULL) < 0
            || PyList_SetSlice(fifo, 0, taken, NULL) < 0)) {
        failed = 1;
    }
    Py_XDECREF(queue);
    for (int i = 0; i < 3; i++) {
        Py_DECREF(lists[i]);
    }
    return failed ? -1 : 0;
}

PyObject *
loop_enqueue_timers(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *timers = peek(self, S.timers);
    if (timers == NULL) {
        return NULL;
    }
    if (!PyList_Check(timers)) {
        PyErr_SetString(PyExc_TypeError, "the timer heap must be a list");
        return NULL;
    }
    Py_INCREF(timers);
    PyObject *clock = now(self), *queue = NULL, *fifo = NULL;
    if (clock == NULL || (fifo = peek(self, S.fifo_timers)) == NULL) {
        goto error;
    }
    int any = nonempty(fifo);
    if (any < 0 || (any && enqueue_fifo(self, clock) < 0)
        || (queue = peek(self, S.queue)) == NULL) {
        goto error;
    }
    Py_INCREF(queue);
    while (PyList_GET_SIZE(timers)) {
        int due = heap_due(timers, clock);
        if (due <= 0) {
            if (due < 0) {
                goto error;
            }
            break;
        }
        PyObject *callback = heap_take(self, timers);
        if (callback == NULL) {
            if (PyErr_Occurred()) {
                goto error;
            }
            continue; /* a dead entry */
        }
        int failed = queue_timer(queue, callback);
        Py_DECREF(callback);
        if (failed < 0 || put_bool(self, S.idle, 0) < 0) {
            goto error;
        }
    }
    Py_DECREF(clock);
    Py_DECREF(queue);
    Py_DECREF(timers);
    Py_RETURN_NONE;

error:
    Py_XDECREF(clock);
    Py_XDECREF(queue);
    Py_DECREF(timers);
    return NULL;
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
    PyObject *enable_queue = peek(self, S.enable_queue);
    if (enable_queue == NULL) {
        return NULL;
    }
    int waiting = nonempty(enable_queue);
    if (waiting < 0) {
        return NULL;
    }
    if (waiting) {
        Py_INCREF(enable_queue);
        if (put_new(self, S.enable_queue, PyList_New(0)) < 0) {
            Py_DECREF(enable_queue);
            return NULL;
        }
        done = own_method(self, S.s_activate, loop_activate, enable_queue);
        Py_DECREF(enable_queue);
        if (done == NULL) {
            return NULL;
        }
        Py_DECREF(done);
    }
    PyObject *defers = peek(self, S.defers);
    if (defers == NULL || (waiting = nonempty(defers)) < 0) {
        return NULL;
    }
    if (waiting) {
        Py_INCREF(defers);
        PyObject *queue = peek(self, S.queue);
        if (put_new(self, S.defers, PyList_New(0)) < 0 || queue == NULL) {
            Py_DECREF(defers);
            return NULL;
        }
        done = DEQUE_EXTEND(queue, defers);
        Py_DECREF(defers);
        if (done == NULL) {
            return NULL;
        }
        Py_DECREF(done);
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
        /* The fallback's streams are always ready: wait on neither poller. */
        PyObject *poller = peek(self, S.poller), *other = peek(self, S.fallback);
        if (poller == NULL || other == NULL) {
            return NULL;
        }
        PyObject *zero = PyLong_FromLong(0);
        PyObject *first = zero == NULL ? NULL : call_wait(self, poller, zero);
        PyObject *second = first == NULL ? NULL : call_wait(self, other, zero);
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
            PyObject *poller = peek(self, S.poller);
            if (poller == NULL) {
                return NULL;
            }
            int index = native_index(self);
            if (index >= 0 && S.installed[index].io && iopoll_waits_in_c(poller)) {
                /* _wait and _queue_ready in one, without the list (_iopoll_ready.c). */
                Py_ssize_t came = iopoll_wait_and_queue(self, poller, timeout);
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

/* -- running callbacks --------------------------------------------------------------------- */

/* Whether the greenlet running the loop is still `me`; raises Superseded if not. */
static int
still_running(PyObject *runner, PyObject *me)
{
    PyObject *loop = peek(runner, S.runner_loop);
    if (loop == NULL) {
        return -1;
    }
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
    PyObject *me = peek(runner, S.runner_loop);
    if (me == NULL) {
        return NULL;
    }
    Py_INCREF(microtasks);
    Py_INCREF(runner);
    Py_INCREF(me);
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
    /* Reading a record's bool slot runs no Python code: the list cannot change meanwhile. */
    for (Py_ssize_t i = 0; !failed && i < PyList_GET_SIZE(unindexed); i++) {
        PyObject *callback = PyList_GET_ITEM(unindexed, i);
        int enabled = truth(callback, S.enabled);
        failed = enabled < 0 || (enabled && PyList_Append(kept, callback) < 0);
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
        int enabled = truth(PyList_GET_ITEM(unindexed, ended), S.enabled);
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
static int
tidy_if_due(PyObject *self)
{
    PyObject *unindexed = peek(self, S.unindexed);
    if (unindexed == NULL) {
        return -1;
    }
    /* Anything but a list goes to _tidy_unindexed, which refuses it. */
    if (PyList_CheckExact(unindexed)) {
        Py_ssize_t length = PyList_GET_SIZE(unindexed);
        if (length == 0) {
            return 0;
        }
        int first_enabled = truth(PyList_GET_ITEM(unindexed, 0), S.enabled);
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
        PyObject *interval = peek(callback, S.interval);
        PyObject *clock = interval == NULL ? NULL : now(self);
        if (clock == NULL) {
            return -1;
        }
        if (put_new(callback, S.expiration, PyNumber_Add(clock, interval)) < 0) {
            Py_DECREF(clock);
            return -1;
        }
        Py_DECREF(clock);
        PyObject *queue = peek(self, S.enable_queue);
        if (add_to(callback, S.queued, 1) < 0 || queue == NULL
            || PyList_Append(queue, callback) < 0) {
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
    PyObject *me = runner == NULL ? NULL : Py_XNewRef(peek(runner, S.runner_loop));
    PyObject *done;
    int failed = microtasks == NULL || queue == NULL || callbacks == NULL || me == NULL;
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
        if (callback == NULL) {
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
    failed = failed || tidy_if_due(self) < 0;
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
