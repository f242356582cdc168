/* _cslots.h: what iopoll's C accelerators share.  Each reads and writes the __slots__ of
 * Python classes, which own all the state; the member descriptors are looked up once, when
 * the accelerator is installed, and the slots then read by offset. */

#ifndef IOPOLL_CSLOTS_H
#define IOPOLL_CSLOTS_H

#if PY_VERSION_HEX < 0x030C0000
/* The member API's names before 3.12 (structmember.h, since deprecated). */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

/* The raised exception, normalised, with its traceback; the error indicator is cleared. */
static inline PyObject *
fetch_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
#endif
}

/* Borrowed reference, or NULL with AttributeError when the slot was never set.  What
 * PyMember_GetOne does for the Py_T_OBJECT_EX members install() accepts, without its switch
 * over member types: the fast paths read a dozen slots per call. */
static inline PyObject *
peek(PyObject *obj, PyMemberDef *member)
{
    PyObject *value = *(PyObject **)((char *)obj + member->offset);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'",
                     Py_TYPE(obj)->tp_name, member->name);
    }
    return value;
}

/* obj.<member> = value, for a member member_of() found (a writable object slot): a new
 * reference is taken, and the old value dropped last, since its destructor may run code. */
static inline void
set_slot(PyObject *obj, PyMemberDef *member, PyObject *value)
{
    PyObject **address = (PyObject **)((char *)obj + member->offset);
    PyObject *old = *address;
    *address = Py_NewRef(value);
    Py_XDECREF(old);
}

/* peek(), as a new reference. */
static inline PyObject *
get_slot(PyObject *obj, PyMemberDef *member)
{
    return Py_XNewRef(peek(obj, member));
}

/* self.name(*args) for up to three arguments: a method call, as the interpreter makes it. */
static inline PyObject *
call_method(PyObject *self, PyObject *name, PyObject *const *args, size_t nargs)
{
    PyObject *stack[4] = {self, NULL, NULL, NULL};
    for (size_t i = 0; i < nargs; i++) {
        stack[i + 1] = args[i];
    }
    return PyObject_VectorcallMethod(name, stack, (nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     NULL);
}

static inline PyMemberDef *
member_of(PyTypeObject *type, const char *name)
{
    PyObject *descriptor = PyObject_GetAttrString((PyObject *)type, name);
    if (descriptor == NULL) {
        return NULL;
    }
    PyMemberDef *member = NULL;
    if (Py_IS_TYPE(descriptor, &PyMemberDescr_Type)) {
        /* CPython-only: a __slots__ descriptor's PyMemberDef, read from the descriptor's
         * struct (no public API gives it).  If CPython changes that struct, the checks
         * below refuse it, install() raises, iopoll runs pure Python with a warning, and
         * tests/test_speedups.py::test_the_c_code_is_in_use_when_built fails loudly. */
        member = ((PyMemberDescrObject *)descriptor)->d_member;
    }
    Py_DECREF(descriptor);
    if (member == NULL || member->type != Py_T_OBJECT_EX || (member->flags & Py_READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be a writable __slots__ attribute",
                     type->tp_name, name);
        return NULL;
    }
    return member;
}

/* type.<descriptor's name> = descriptor; steals the reference (NULL: an error already set). */
static inline int
set_attribute(PyTypeObject *type, PyObject *descriptor)
{
    if (descriptor == NULL) {
        return -1;
    }
    PyObject *name = PyDescr_NAME(descriptor);
    int failed = PyObject_SetAttr((PyObject *)type, name, descriptor);
    Py_DECREF(descriptor);
    return failed;
}

/* visit(arg, item) for each item of `items`, as a Python for loop runs over it: an exact
 * list by index, its length read again each time (a visit may run code that changes it),
 * anything else through its iterator; each item held while it is visited.  How many were
 * visited, or -1 with the error set: a visit that fails (-1) ends the loop. */
static inline Py_ssize_t
for_each(PyObject *items, int (*visit)(void *, PyObject *), void *arg)
{
    Py_ssize_t visited = 0;
    int failed = 0;
    if (PyList_CheckExact(items)) {
        Py_INCREF(items);
        for (; !failed && visited < PyList_GET_SIZE(items); visited++) {
            PyObject *item = Py_NewRef(PyList_GET_ITEM(items, visited));
            failed = visit(arg, item) < 0;
            Py_DECREF(item);
        }
        Py_DECREF(items);
        return failed ? -1 : visited;
    }
    PyObject *iterator = PyObject_GetIter(items), *item;
    failed = iterator == NULL;
    while (!failed && (item = PyIter_Next(iterator)) != NULL) {
        failed = visit(arg, item) < 0;
        Py_DECREF(item);
        visited++;
    }
    failed = failed || PyErr_Occurred() != NULL;
    Py_XDECREF(iterator);
    return failed ? -1 : visited;
}

#endif /* IOPOLL_CSLOTS_H */
