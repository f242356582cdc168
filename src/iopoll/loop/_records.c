/* _records.c: the classes of the records defer(), delay() and repeat() make in C (part of
 * iopoll.loop._speedups).
 *
 * Each is a subclass of its Python class in _callbacks.py (DeferCallback, DelayCallback,
 * RepeatCallback) with nothing added but how the garbage collector walks it.  A Python
 * class with __slots__ is walked by CPython's generic traversal, which visits every slot:
 * for a timer record that is ten, of which only the function, the heap entry (a tuple
 * holding the record itself) and the clock's numbers can hold anything the collector
 * tracks; the id is a str, the flags bools, the enable count an int, all set by the
 * driver's own code.  A burst of defers keeps thousands of records alive, each walked by a
 * collection or two before it runs: the generic walk was about 10% of a defer's cost and
 * of a delay(0)'s.  These walk the slots that can hold a tracked object and clear the
 * same ones, so that a cycle through a record (a callback that refers to its driver; a
 * timer and its heap entry) is still collected (tests/test_loop_speedups.py).
 *
 * They are freed by a destructor of their own too.  CPython's generic one for a class
 * with __slots__ (subtype_dealloc) looks, for every record, for a finalizer, weak
 * references and a __dict__ the class may have, and finds each slot by walking the
 * classes' member tables; these classes have none of the three (make_record_types()
 * refuses a base that has one), and their slots are the seven or ten S names.
 *
 * The records the Python methods make (enable() gives a defer a fresh record; the pure
 * drivers make all of theirs) are of the Python classes: the code reads both alike, and
 * tests for a kind with isinstance(), or here with PyObject_TypeCheck() and is_c_record().
 *
 * Why a record starts out untracked
 * ---------------------------------
 * Even walked by its few slots, a record the collector tracks costs a defer about as much
 * as the rest of its work.  CPython counts the tracked objects made and not yet freed and
 * collects the youngest generation at each 700; its survivors move to the middle one,
 * collected at every tenth of those, and its survivors to the oldest, collected (with
 * everything tracked) once what came in since the last full collection is a quarter of
 * what was there.  A burst of 100,000 defers keeps 100,000 records alive until the next
 * tick: 140 young collections walking 700 records each, a dozen middle ones and a full
 * one over the whole heap, 14 ms of a 49 ms burst (3.11, 20,000 other objects), all of it
 * spent on objects that are about to end by themselves.
 *
 * So new_record() (_schedule.c) takes a record off the collector's lists as it is made,
 * as CPython does for the tuples and dicts that hold nothing it tracks: allocation still
 * counts, but a collection skips what it does not track, and nothing untracked survives
 * into the older generations.  Untracking is always safe (what an untracked object refers
 * to counts as referred to from outside, so it is kept), but a cycle through an untracked
 * object is never found: a pending callback whose function refers to its driver would
 * keep both alive for good once the driver is dropped.  The record is therefore tracked
 * before any full collection can miss it: every accelerated driver is registered when it
 * is made (_native_dispatch.py), and a gc callback, at the start of each full collection
 * (generation 2, which gc.collect() runs), calls track_records() on each of them, which
 * tracks every C record still in its queues, its timers and its id map.  A record that
 * ran before then was never walked at all; one that waits across a full collection is
 * tracked from then on, as any other object; and a cycle through a pending record is
 * found by the first full collection after it is made, where without this it would have
 * been found by the first young one.  The walk costs a full collection a pass over the
 * driver's lists, which it walks anyway.
 *
 * One cycle needs no driver: a timer in the heap and its entry, a tuple that holds the
 * record.  A driver is mostly freed by a young collection (it is in cycles of its own) or
 * by its last reference, never to be seen by track_records(); its armed timers' cycles
 * would then stay, with everything their callbacks hold.  So a record is tracked as its
 * heap entry is made (_timers.c): what the heap holds is walked like any other object,
 * and the FIFO's records, whose entry is an int, stay untracked.
 */

#include "_dispatch.h"

#define SLOT(obj, member) (*(PyObject **)((char *)(obj) + (member)->offset))

static int
defer_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self)); /* a heap type's instances refer to it */
    Py_VISIT(SLOT(self, S.fn));
    return 0;
}

static int
defer_clear(PyObject *self)
{
    Py_CLEAR(SLOT(self, S.fn));
    return 0;
}

static int
timer_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(SLOT(self, S.fn));
    Py_VISIT(SLOT(self, S.entry));
    /* The clock's numbers: floats from time.monotonic, but a driver's own _now may
     * return any number. */
    Py_VISIT(SLOT(self, S.expiration));
    Py_VISIT(SLOT(self, S.interval));
    return 0;
}

static int
timer_clear(PyObject *self)
{
    Py_CLEAR(SLOT(self, S.fn));
    Py_CLEAR(SLOT(self, S.entry));
    Py_CLEAR(SLOT(self, S.expiration));
    Py_CLEAR(SLOT(self, S.interval));
    return 0;
}

/* Callback's slots that the walk leaves out: a str, bools and an int. */
static inline void
clear_plain_slots(PyObject *self)
{
    Py_CLEAR(SLOT(self, S.id));
    Py_CLEAR(SLOT(self, S.enabled));
    Py_CLEAR(SLOT(self, S.referenced));
    Py_CLEAR(SLOT(self, S.invokable));
    Py_CLEAR(SLOT(self, S.queued));
    Py_CLEAR(SLOT(self, S.indexed));
}

static void
defer_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, defer_dealloc) /* a long chain of records freed one by one */
    defer_clear(self);
    clear_plain_slots(self);
    type->tp_free(self);
    Py_DECREF(type); /* a heap type's instances refer to it */
    Py_TRASHCAN_END
}

static void
timer_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, timer_dealloc)
    timer_clear(self);
    clear_plain_slots(self);
    type->tp_free(self);
    Py_DECREF(type);
    Py_TRASHCAN_END
}

static PyType_Slot defer_slots[] = {
    {Py_tp_doc, "A defer() record made in C: a DeferCallback walked by its few slots."},
    {Py_tp_traverse, defer_traverse},
    {Py_tp_clear, defer_clear},
    {Py_tp_dealloc, defer_dealloc},
    {0, NULL},
};

static PyType_Slot delay_slots[] = {
    {Py_tp_doc, "A delay() record made in C: a DelayCallback walked by its few slots."},
    {Py_tp_traverse, timer_traverse},
    {Py_tp_clear, timer_clear},
    {Py_tp_dealloc, timer_dealloc},
    {0, NULL},
};

static PyType_Slot repeat_slots[] = {
    {Py_tp_doc, "A repeat() record made in C: a RepeatCallback walked by its few slots."},
    {Py_tp_traverse, timer_traverse},
    {Py_tp_clear, timer_clear},
    {Py_tp_dealloc, timer_dealloc},
    {0, NULL},
};

/* basicsize 0: the base's layout, its __slots__ and nothing more. */
#define RECORD_SPEC(name, slots)                                                         \
    {"iopoll.loop._speedups." name, 0, 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, slots}

static PyType_Spec record_specs[] = {
    RECORD_SPEC("DeferCallback", defer_slots),
    RECORD_SPEC("DelayCallback", delay_slots),
    RECORD_SPEC("RepeatCallback", repeat_slots),
};

/* The __slots__ of a class and its bases: what the generic walk visits.  (A type's
 * ob_size is its own count, as CPython's typeobject.c reads it.) */
static Py_ssize_t
slot_count(PyTypeObject *type)
{
    Py_ssize_t count = 0;
    for (; type != NULL; type = type->tp_base) {
        count += Py_SIZE(type);
    }
    return count;
}

/* The three classes, made from the Python ones in S (S.defer_type ...): 0, or -1.  Refused
 * if those have a __dict__, weak references, a finalizer or other slots than the walks and
 * destructors above know: Callback's seven, and TimerCallback's three more. */
int
make_record_types(void)
{
    PyTypeObject *bases[3] = {S.defer_type, S.delay_type, S.repeat_type};
    PyTypeObject **made[3] = {&S.c_defer_type, &S.c_delay_type, &S.c_repeat_type};
    Py_ssize_t slots[3] = {7, 10, 10};
    for (int i = 0; i < 3; i++) {
        PyTypeObject *base = bases[i];
        if (base->tp_dictoffset != 0 || base->tp_weaklistoffset != 0
            || base->tp_finalize != NULL || base->tp_del != NULL
            || slot_count(base) != slots[i]) {
            PyErr_Format(PyExc_TypeError,
                         "%s must have the %zd __slots__ _records.c walks and frees, and "
                         "no __dict__, __weakref__ or __del__",
                         base->tp_name, slots[i]);
            return -1;
        }
        PyObject *type = PyType_FromSpecWithBases(&record_specs[i], (PyObject *)bases[i]);
        if (type == NULL) {
            return -1;
        }
        *made[i] = (PyTypeObject *)type;
    }
    return 0;
}

/* Track one object if it is an untracked C record: what track_records() does to each it
 * finds. */
static inline void
track_if_record(PyObject *obj)
{
    if (is_c_record(Py_TYPE(obj)) && !PyObject_GC_IsTracked(obj)) {
        PyObject_GC_Track(obj);
    }
}

/* Every item of a list the driver keeps (or, of a list of heap entries, every entry's
 * record: its third item). */
static void
track_in_list(PyObject *list, int entries)
{
    if (list == NULL || !PyList_CheckExact(list)) {
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        if (!entries) {
            track_if_record(item);
        }
        else if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 3) {
            track_if_record(PyTuple_GET_ITEM(item, 2));
        }
    }
}

/* The driver's slot `member`, borrowed; NULL, with no error, if it is unset. */
static inline PyObject *
raw_slot(PyObject *obj, PyMemberDef *member)
{
    return *(PyObject **)((char *)obj + member->offset);
}

/* track_records(driver): track every C record `driver` holds (see the module doc).  It
 * runs in a gc callback, so it reads only the exact lists, dict and deque the driver made,
 * runs no Python code and raises nothing: what it cannot read (a slot set to something
 * else) it leaves, at the cost of the walk, never of a wrong one. */
PyObject *
track_records(PyObject *Py_UNUSED(module), PyObject *driver)
{
    if (S.driver_type == NULL || !PyObject_TypeCheck(driver, S.driver_type)) {
        Py_RETURN_NONE;
    }
    track_in_list(raw_slot(driver, S.unindexed), 0);
    track_in_list(raw_slot(driver, S.defers), 0);
    track_in_list(raw_slot(driver, S.enable_queue), 0);
    track_in_list(raw_slot(driver, S.fifo_timers), 0);
    track_in_list(raw_slot(driver, S.timers), 1);
    PyObject *map = raw_slot(driver, S.callbacks);
    if (map != NULL && PyDict_CheckExact(map)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(map, &pos, &key, &value)) {
            track_if_record(value);
        }
    }
    /* The run queue: a deque has no C API to index it, and an iterator would be an
     * allocation here; its items are read through the list it is copied to only if that
     * allocation succeeds. */
    PyObject *queue = raw_slot(driver, S.queue);
    if (queue != NULL && Py_IS_TYPE(queue, S.deque_type) && Py_SIZE(queue) > 0) {
        PyObject *items = PySequence_List(queue);
        if (items == NULL) {
            PyErr_Clear(); /* best effort: a record missed here is tracked at the next */
        }
        else {
            track_in_list(items, 0);
            Py_DECREF(items);
        }
    }
    Py_RETURN_NONE;
}
