/* The drivers' timer heap in C: heapq's own algorithm (Lib/heapq.py's _siftdown and _siftup)
 * on the driver's list of (expiration, seq, callback) tuples, so that the Python methods
 * that use heapq on the same list (CallbackRegistry._next_expiration and _sweep_timers)
 * find it laid out exactly as they would have left it.  Also the cut that empties the
 * queues a tick takes whole (the enable queue, the FIFO), which keeps a small list's
 * memory as the heap's pop does. */

#include "_dispatch.h"

/* a < b for two heap entries: 1, 0, or -1 on error.  Tuples of a float and an int compare
 * as Python compares them, without a call; anything else goes through Python's `<`. */
static int
entry_less(PyObject *a, PyObject *b)
{
    if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) == 3
        && PyTuple_GET_SIZE(b) == 3) {
        PyObject *x = PyTuple_GET_ITEM(a, 0), *y = PyTuple_GET_ITEM(b, 0);
        if (PyFloat_CheckExact(x) && PyFloat_CheckExact(y)) {
            double p = PyFloat_AS_DOUBLE(x), q = PyFloat_AS_DOUBLE(y);
            if (p != q) {
                return p < q;
            }
            PyObject *m = PyTuple_GET_ITEM(a, 1), *n = PyTuple_GET_ITEM(b, 1);
            if (PyLong_CheckExact(m) && PyLong_CheckExact(n) && m != n) {
                return PyObject_RichCompareBool(m, n, Py_LT);
            }
        }
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

/* heapq._siftdown: move heap[pos] up towards start while it is smaller than its parent. */
static int
sift_down(PyObject *heap, Py_ssize_t start, Py_ssize_t pos)
{
    Py_ssize_t size = PyList_GET_SIZE(heap);
    PyObject *item = PyList_GET_ITEM(heap, pos);
    while (pos > start) {
        Py_ssize_t parent_pos = (pos - 1) >> 1;
        PyObject *parent = PyList_GET_ITEM(heap, parent_pos);
        Py_INCREF(item);
        Py_INCREF(parent);
        int less = entry_less(item, parent);
        Py_DECREF(parent);
        Py_DECREF(item);
        if (less < 0) {
            return -1;
        }
        if (size != PyList_GET_SIZE(heap)) {
            PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
            return -1;
        }
        if (!less) {
            break;
        }
        /* Swap the two as they are now (the comparison may have run code that put other
         * entries there), as _heapqmodule.c does: the list keeps one reference to each. */
        parent = PyList_GET_ITEM(heap, parent_pos);
        item = PyList_GET_ITEM(heap, pos);
        PyList_SET_ITEM(heap, parent_pos, item);
        PyList_SET_ITEM(heap, pos, parent);
        pos = parent_pos;
    }
    return 0;
}

/* heapq._siftup: move the smaller child up until a leaf, then heap[pos] into place. */
static int
sift_up(PyObject *heap, Py_ssize_t pos)
{
    Py_ssize_t end = PyList_GET_SIZE(heap), start = pos;
    Py_ssize_t child = 2 * pos + 1;
    while (child < end) {
        Py_ssize_t right = child + 1;
        if (right < end) {
            PyObject *c = Py_NewRef(PyList_GET_ITEM(heap, child));
            PyObject *r = Py_NewRef(PyList_GET_ITEM(heap, right));
            int less = entry_less(c, r);
            Py_DECREF(c);
            Py_DECREF(r);
            if (less < 0) {
                return -1;
            }
            if (end != PyList_GET_SIZE(heap)) {
                PyErr_SetString(PyExc_RuntimeError, "list changed size during iteration");
                return -1;
            }
            if (!less) {
                child = right;
            }
        }
        PyObject *moved = PyList_GET_ITEM(heap, child);
        PyList_SET_ITEM(heap, child, PyList_GET_ITEM(heap, pos));
        PyList_SET_ITEM(heap, pos, moved);
        pos = child;
        child = 2 * pos + 1;
    }
    return sift_down(heap, start, pos);
}

int
loop_heap_push(PyObject *heap, PyObject *item)
{
    if (PyList_Append(heap, item) < 0) {
        return -1;
    }
    return sift_down(heap, 0, PyList_GET_SIZE(heap) - 1);
}

/* Whether a list cut down to `left` items keeps its memory: while it stays at least half
 * full, as list_resize() in listobject.c decides, and also while that memory is small.  A
 * heap or queue of a few timers then does not give back and take again its memory at
 * every tick, as list.pop() and del would (a lone repeat(0) timer empties its heap and
 * the enable queue in each tick). */
static inline int
keeps_memory(PyObject *list, Py_ssize_t left)
{
    Py_ssize_t allocated = ((PyListObject *)list)->allocated;
    return allocated <= 16 || left >= allocated >> 1;
}

/* list.pop() of a list that is not empty: its last item, as a new reference.  When the
 * list keeps its memory its length is only shortened, as list.pop() itself does then and
 * Cython's fast path for it does; otherwise the slice is deleted, which gives it back. */
static inline PyObject *
pop_last(PyObject *list)
{
    Py_ssize_t size = PyList_GET_SIZE(list);
    PyObject *last = PyList_GET_ITEM(list, size - 1);
    if (keeps_memory(list, size - 1)) {
        Py_SET_SIZE(list, size - 1);
        return last;
    }
    Py_INCREF(last);
    if (PyList_SetSlice(list, size - 1, size, NULL) < 0) {
        Py_DECREF(last);
        return NULL;
    }
    return last;
}

/* `del list[:count]` for a list, count >= 0 (clipped to its length), keeping its memory
 * as pop_last() does when a few items leave: the enable queue and the FIFO that a tick
 * empties fill again in the next one.  They leave the list before they are let go, as
 * del does, since a destructor may run code that uses it. */
int
loop_drop_front(PyObject *list, Py_ssize_t count)
{
    enum { FEW = 16 }; /* as many as a list whose memory keeps_memory() keeps can hold */
    Py_ssize_t size = PyList_GET_SIZE(list);
    if (count > size) {
        count = size;
    }
    if (count == 0) {
        return 0; /* a list being sorted shows no items, and no memory */
    }
    if (count > FEW || !keeps_memory(list, size - count)) {
        return PyList_SetSlice(list, 0, count, NULL);
    }
    PyObject *gone[FEW];
    PyObject **items = ((PyListObject *)list)->ob_item;
    for (Py_ssize_t i = 0; i < count; i++) {
        gone[i] = items[i];
    }
    memmove(items, items + count, (size_t)(size - count) * sizeof(PyObject *));
    Py_SET_SIZE(list, size - count);
    for (Py_ssize_t i = count; i-- > 0;) {
        Py_DECREF(gone[i]); /* last first, as list.clear() and del let them go */
    }
    return 0;
}

/* heapq.heappop: a new reference to the smallest entry.  The callers pop a heap they saw
 * holding a due entry, but a comparison on the way may have run code that emptied it (or
 * the list may be in the middle of a sort, which shows it empty): IndexError then, as
 * heapq raises. */
PyObject *
loop_heap_pop(PyObject *heap)
{
    Py_ssize_t size = PyList_GET_SIZE(heap);
    if (size == 0) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    PyObject *last = pop_last(heap); /* the list's reference is now ours */
    if (last == NULL) {
        return NULL;
    }
    if (size == 1) {
        return last;
    }
    PyObject *smallest = PyList_GET_ITEM(heap, 0);
    PyList_SET_ITEM(heap, 0, last); /* the list's reference to smallest is now ours */
    if (sift_up(heap, 0) < 0) {
        Py_DECREF(smallest);
        return NULL;
    }
    return smallest;
}

/* _abstract_driver._heap_first: whether a heap entry comes before (expiration, seq), the
 * FIFO's head; 1, 0, or -1 on error. */
int
loop_heap_first(PyObject *entry, PyObject *expiration, PyObject *seq)
{
    if (PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 3) {
        PyObject *x = PyTuple_GET_ITEM(entry, 0), *m = PyTuple_GET_ITEM(entry, 1);
        if (PyFloat_CheckExact(x) && PyFloat_CheckExact(expiration) && PyLong_CheckExact(m)
            && PyLong_CheckExact(seq)) {
            double p = PyFloat_AS_DOUBLE(x), q = PyFloat_AS_DOUBLE(expiration);
            if (p != q) {
                return p < q;
            }
            return m == seq ? 0 : PyObject_RichCompareBool(m, seq, Py_LT);
        }
    }
    Py_INCREF(entry);
    PyObject *x = PySequence_GetItem(entry, 0);
    int result = x == NULL ? -1 : PyObject_RichCompareBool(x, expiration, Py_LT);
    if (result == 0) {
        result = PyObject_RichCompareBool(x, expiration, Py_EQ);
        if (result > 0) {
            PyObject *m = PySequence_GetItem(entry, 1);
            result = m == NULL ? -1 : PyObject_RichCompareBool(m, seq, Py_LT);
            Py_XDECREF(m);
        }
    }
    Py_XDECREF(x);
    Py_DECREF(entry);
    return result;
}
