/* The timers of iopoll.loop's drivers in C: where an enabled timer goes (the back of the
 * FIFO of interval-0 timers, or the heap: the timer branch of CallbackRegistry._activate),
 * and the due ones into the run queue (AbstractDriver._enqueue_timers with its
 * _enqueue_fifo, called here directly, not by name: it is no hook), line for line as the
 * Python methods.  The heap's algorithm is _timer_heap.c's; see _speedups.c for the whole. */

#include "_dispatch.h"

/* -- activation ------------------------------------------------------------------------- */

/* The timer heap and the FIFO's two lists, as new references: 0, or -1 on error. */
int
loop_timer_lists(PyObject *self, PyObject **lists)
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
int
loop_activate_timer(PyObject *self, PyObject *callback, PyObject *timers, PyObject *seqs,
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
        PyObject *entry = PyTuple_New(3);
        if (entry == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(entry, 0, Py_NewRef(expiration));
        PyTuple_SET_ITEM(entry, 1, Py_NewRef(number));
        PyTuple_SET_ITEM(entry, 2, Py_NewRef(callback));
        put(callback, S.entry, entry);
        /* The entry holds the record that holds it: a cycle, which the collector only
         * finds through a tracked record (a C record starts out untracked, _records.c).
         * Left to track_records(), it outlives a driver freed between full collections. */
        if (PyObject_IS_GC(callback) && !PyObject_GC_IsTracked(callback)) {
            PyObject_GC_Track(callback);
        }
        failed = loop_heap_push(timers, entry);
        Py_DECREF(entry);
    }
done:
    Py_DECREF(expiration);
    Py_XDECREF(number);
    return failed;
}

/* -- due timers into the run queue ------------------------------------------------------ */

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
    PyObject *entry = record == NULL || check_record(record, S.timer_type, S.entry) < 0
                          ? NULL
                          : peek(record, S.entry);
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
    if (loop_timer_lists(self, lists) < 0) {
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
        PyObject *entry = check_record(callback, S.timer_type, S.entry) < 0
                              ? NULL
                              : peek(callback, S.entry);
        PyObject *expiration = NULL;
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
        && (loop_drop_front(seqs, taken) < 0 || loop_drop_front(fifo, taken) < 0)) {
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
