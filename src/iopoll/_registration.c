/* Context.add()'s and Watcher.remove()'s usual calls in C (part of iopoll._speedups).
 *
 * A server that accepts and closes connections pays an add() and a remove() per connection,
 * and an asyncio program one of each per add_reader() and remove_reader().  In Python each
 * is a chain of small methods (the handle, the watcher, the records, the mechanism): about a
 * microsecond and a half on top of the two system calls, more than selectors pays.  This
 * file runs the call both are usually given, a socket or an int fd watched for a stream's
 * events, without those frames.  Every other call goes, before anything has changed, to the
 * Python method it replaces, which stays the reference:
 *
 *   add()     the block at the top of Context.add() (src/_iopoll_core/context.py), step for
 *             step: StreamPollHandle._of_checked(), mechanism.register(), Watcher._make()
 *             and ContextState._remember(), with the same checks in the same order, and
 *             ContextState._unadd() if a MemoryError comes once the mechanism took the fd;
 *   remove()  Watcher.remove() and ContextState._remove() of an active watcher of a socket
 *             or an int fd that still answers with its fd, with no buffered bytes, left-over
 *             report or release to drop: _forget() and _unregister().
 *
 * The mechanism is still called by name (its register() and unregister() are the backend's
 * translation), and every record is a slot that the Python classes declare. */

#include "_speedups.h"

/* What install_registration() finds, once per process. */
typedef struct {
    PyMemberDef *stale_fds, *self_ref, *buffered, *leftovers, *releases;  /* Context */
    PyMemberDef *context, *fd, *handle, *kind, *oneshot, *armed, *state; /* Watcher */
    PyMemberDef *stream_fileno, *stream;                               /* StreamPollHandle */
    PyTypeObject *stream_handle_type, *socket_type, *event_type;
    PyObject *no_events, *refusal, *failed_add, *active, *removed, *empty;
    PyObject *python_add, *python_remove; /* the methods replaced, for every other call */
    PyObject *str_register, *str_unregister, *str_fileno, *str_index, *str_failure;
    PyObject *str_watcher_type, *str_unadd;
    PyObject *what_failed; /* "Failed to add handle" */
    /* Read from Python at install: context._PLAIN_STREAM_BITS (the events any backend takes
     * for a stream with nothing to check), Event.ONESHOT, handles.MAX_FD. */
    long plain_stream_bits, oneshot_bit, max_fd;
} Registration;

static Registration reg;

/* The raised exception, set again (what fetch_exception() took); steals it. */
static void
restore_exception(PyObject *raised)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(raised);
#else
    PyErr_Restore(Py_NewRef(Py_TYPE(raised)), raised, PyException_GetTraceback(raised));
#endif
}

/* `raise error from cause` in the `except` block that caught cause, as the Python method
 * raises it; steals error.  Its context is cause even when add() was called while another
 * exception was being handled (PyErr_SetObject() would make that one its context). */
static void
raise_from(PyObject *error, PyObject *cause)
{
    PyException_SetContext(error, Py_NewRef(cause));
    PyException_SetCause(error, Py_NewRef(cause));
    restore_exception(error);
}

/* `cls.__new__(cls)` for a class that keeps object's __new__ (no __init__ runs). */
static PyObject *
bare_instance(PyTypeObject *cls)
{
    return cls->tp_new(cls, reg.empty, NULL);
}

/* StreamPollHandle._of_checked(stream), `probe` being what its _hold() keeps as _fileno. */
static PyObject *
stream_handle(PyObject *stream, PyObject *probe)
{
    PyObject *handle = bare_instance(reg.stream_handle_type);
    if (handle != NULL) {
        set_slot(handle, reg.stream_fileno, probe);
        set_slot(handle, reg.stream, stream);
    }
    return handle;
}

/* self._watcher_type._make(self._self_ref, fd, handle, handle._fileno, events, data) for a
 * StreamPollHandle (kind Event(0)) and plain stream events: Watcher._make() and
 * _set_events(), slot for slot. */
static PyObject *
new_watcher(PyObject *self_ref, PyObject *fd, PyObject *handle, PyObject *probe,
            PyObject *events, long bits, PyObject *data)
{
    PyObject *watcher = bare_instance(slots.watcher_type);
    if (watcher == NULL) {
        return NULL;
    }
    int oneshot = (bits & reg.oneshot_bit) != 0; /* registers_oneshot() of a stream's events */
    set_slot(watcher, reg.context, self_ref);
    set_slot(watcher, reg.fd, fd);
    set_slot(watcher, reg.handle, handle);
    set_slot(watcher, slots.probe, probe);
    set_slot(watcher, slots.data, data);
    set_slot(watcher, reg.kind, reg.no_events);
    set_slot(watcher, slots.events, events);
    set_slot(watcher, reg.oneshot, oneshot ? Py_True : Py_False);
    set_slot(watcher, slots.plain, oneshot ? Py_False : Py_True);
    set_slot(watcher, reg.armed, Py_True);
    set_slot(watcher, slots.triggered, reg.no_events);
    set_slot(watcher, reg.state, reg.active);
    return watcher;
}

/* ContextState._remember(watcher) for an fd inside _by_fd, an exact list (try_add() leaves
 * the table's growth to Python): its entries in _watchers and _by_fd; both, or (MemoryError)
 * neither.  A table that a call on the way (the mechanism's) cut short keeps it in
 * _watchers alone, as Python keeps an fd the table does not reach. */
static int
remember(PyObject *watchers, PyObject *by_fd, PyObject *fd, long fd_value, PyObject *watcher)
{
    if (PyDict_SetItem(watchers, fd, watcher) < 0) {
        return -1;
    }
    if (fd_value < PyList_GET_SIZE(by_fd)) {
        PyList_SetItem(by_fd, fd_value, Py_NewRef(watcher)); /* allocates nothing */
    }
    return 0;
}

/* `except BaseException: self._unadd(fd, None); raise`, for an add() that failed once the
 * mechanism took fd: the error stays the one raised, unless undoing raises its own. */
static void
unadd(PyObject *self, PyObject *fd)
{
    PyObject *raised = fetch_exception();
    PyObject *args[3] = {self, fd, Py_None};
    PyObject *done = PyObject_VectorcallMethod(reg.str_unadd, args,
                                               3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (done == NULL) {
        PyObject *own = fetch_exception();
        PyException_SetContext(own, raised); /* as Python chains it; takes `raised` */
        restore_exception(own);
        return;
    }
    Py_DECREF(done);
    restore_exception(raised);
}

/* try_add()'s answer when the call is the Python method's: nothing was changed. */
#define NOT_TAKEN 0
#define TAKEN 1

/* The fast add of `handle`, an exact int or socket.socket, for `events`, an exact Event:
 * NOT_TAKEN, or TAKEN with the new watcher in *added (NULL with an error set). */
static int
try_add(PyObject *self, PyObject *handle, PyObject *events, PyObject *data, PyObject **added)
{
    *added = NULL;
    long bits = PyLong_AsLong(events);
    if (bits == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* bits no Event member has: the Python path refuses them */
        return NOT_TAKEN;
    }
    if (bits < 1 || (bits & ~reg.plain_stream_bits)) {
        return NOT_TAKEN;
    }
    PyObject *mechanism = peek(self, slots.usable);
    if (mechanism == NULL || mechanism == Py_None) {
        /* closed, or a fork child: the Python path says which */
        return mechanism == NULL ? TAKEN : NOT_TAKEN;
    }
    int is_int = Py_IS_TYPE(handle, &PyLong_Type);
    /* `fd = handle if kind is int else handle.fileno()`; the probe is what _hold() keeps. */
    PyObject *probe = PyObject_GetAttr(handle, is_int ? reg.str_index : reg.str_fileno);
    if (probe == NULL) {
        return TAKEN;
    }
    PyObject *fd = is_int ? Py_NewRef(handle) : PyObject_CallNoArgs(probe);
    PyObject *watchers = NULL, *by_fd = NULL, *stream = NULL;
    int taken = TAKEN;
    if (fd == NULL) {
        goto finally;
    }
    int overflow;
    long fd_value = PyLong_CheckExact(fd) ? PyLong_AsLongAndOverflow(fd, &overflow) : -1;
    if (fd_value < 0 || fd_value > reg.max_fd) {
        taken = NOT_TAKEN; /* a closed socket's -1, or a number no OS call takes */
        goto finally;
    }
    watchers = get_slot(self, slots.watchers);
    by_fd = watchers == NULL ? NULL : get_slot(self, slots.by_fd);
    PyObject *stale = by_fd == NULL ? NULL : peek(self, reg.stale_fds);
    if (stale == NULL) {
        goto finally;
    }
    /* An fd past the end of _by_fd: Python grows the table, or decides not to. */
    if (!PyDict_CheckExact(watchers) || !PyList_CheckExact(by_fd) || !PyAnySet_CheckExact(stale)
        || fd_value >= PyList_GET_SIZE(by_fd)
        || _PyType_Lookup(slots.context_type, reg.str_watcher_type)
               != (PyObject *)slots.watcher_type) {
        taken = NOT_TAKEN;
        goto finally;
    }
    int known = PyDict_Contains(watchers, fd);
    if (known == 0) {
        known = PySet_Contains(stale, fd);
    }
    if (known != 0) {
        taken = known < 0 ? TAKEN : NOT_TAKEN; /* watched already, or stale: Python decides */
        goto finally;
    }
    if ((stream = stream_handle(handle, probe)) == NULL) {
        goto finally;
    }
    Py_INCREF(mechanism); /* the call may run code that drops it from the Context */
    PyObject *register_args[3] = {mechanism, fd, events};
    PyObject *done = PyObject_VectorcallMethod(reg.str_register, register_args,
                                               3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(mechanism);
    if (done == NULL) {
        if (PyErr_ExceptionMatches(PyExc_OSError) || PyErr_ExceptionMatches(reg.refusal)) {
            PyObject *exc = fetch_exception();
            PyObject *failure_args[4] = {self, reg.failed_add, reg.what_failed, exc};
            PyObject *error = PyObject_VectorcallMethod(
                reg.str_failure, failure_args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (error != NULL) {
                raise_from(error, exc);
            }
            Py_DECREF(exc);
        }
        goto finally;
    }
    Py_DECREF(done);
    PyObject *self_ref = peek(self, reg.self_ref);
    *added = self_ref == NULL ? NULL
                              : new_watcher(self_ref, fd, stream, probe, events, bits, data);
    if (*added != NULL && remember(watchers, by_fd, fd, fd_value, *added) < 0) {
        Py_CLEAR(*added);
    }
    if (*added == NULL) {
        unadd(self, fd);
    }

finally:
    Py_XDECREF(stream);
    Py_XDECREF(by_fd);
    Py_XDECREF(watchers);
    Py_XDECREF(fd);
    Py_DECREF(probe);
    return taken;
}

/* function(self, *args, **kwargs) for a vectorcall method's arguments. */
static PyObject *
call_python(PyObject *function, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    PyObject *stack[8];
    Py_ssize_t total = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    if (total >= 8) { /* more than any signature here takes: its TypeError, from Python */
        PyObject *bound = PyMethod_New(function, self);
        PyObject *result = bound == NULL ? NULL : PyObject_Vectorcall(bound, args, nargs, kwnames);
        Py_XDECREF(bound);
        return result;
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) {
        stack[i + 1] = args[i];
    }
    return PyObject_Vectorcall(function, stack, nargs + 1, kwnames);
}

/* Context.add(handle, events, data=None) */
static PyObject *
fast_add(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames == NULL && (nargs == 2 || nargs == 3) && Py_IS_TYPE(self, slots.context_type)
        && (Py_IS_TYPE(args[0], &PyLong_Type) || Py_IS_TYPE(args[0], reg.socket_type))
        && Py_IS_TYPE(args[1], reg.event_type)) {
        PyObject *watcher;
        if (try_add(self, args[0], args[1], nargs == 3 ? args[2] : Py_None, &watcher)) {
            return watcher;
        }
    }
    return call_python(reg.python_add, self, args, nargs, kwnames);
}

/* 1: `watcher` may be removed here (the checks of Watcher.remove(), _remove(), _check_alive()
 * and _forget() all pass, and each record to change is of the type written); 0: the Python
 * method's; -1: error.  Its context is put in *context (a new reference) on 1. */
static int
removable(PyObject *watcher, PyObject **context)
{
    PyObject *state = peek(watcher, reg.state), *ref = peek(watcher, reg.context);
    PyObject *handle = peek(watcher, reg.handle), *fd = peek(watcher, reg.fd);
    if (state == NULL || ref == NULL || handle == NULL || fd == NULL) {
        return -1;
    }
    /* Active (ACTIVE is 0), on a socket or an int fd (a StreamPollHandle's watcher, whose
     * kind is Event(0), never a timer's): its probe, called here and maybe again by the
     * Python method, has no side effect. */
    if (state != reg.active || !Py_IS_TYPE(handle, reg.stream_handle_type)
        || !PyLong_CheckExact(fd)) {
        return 0;
    }
    PyObject *stream = peek(handle, reg.stream);
    if (stream == NULL) {
        return -1;
    }
    if (!Py_IS_TYPE(stream, &PyLong_Type) && !Py_IS_TYPE(stream, reg.socket_type)) {
        return 0;
    }
    PyObject *self = PyWeakref_Check(ref) ? PyObject_CallNoArgs(ref) : NULL;
    if (self == NULL) {
        return PyWeakref_Check(ref) ? -1 : 0;
    }
    int fit = Py_IS_TYPE(self, slots.context_type);
    PyObject *mechanism = fit ? peek(self, slots.usable) : Py_None;
    PyObject *watchers = fit ? peek(self, slots.watchers) : NULL;
    PyObject *by_fd = fit ? peek(self, slots.by_fd) : NULL;
    PyObject *buffered = fit ? peek(self, reg.buffered) : NULL;
    PyObject *leftovers = fit ? peek(self, reg.leftovers) : NULL;
    PyObject *releases = fit ? peek(self, reg.releases) : NULL;
    if (fit && (mechanism == NULL || watchers == NULL || by_fd == NULL || buffered == NULL
                || leftovers == NULL || releases == NULL)) {
        Py_DECREF(self);
        return -1;
    }
    int overflow;
    long fd_value = PyLong_AsLongAndOverflow(fd, &overflow); /* an exact int: no error */
    fit = fit && mechanism != Py_None && fd_value >= 0 && PyDict_CheckExact(watchers)
          && PyList_CheckExact(by_fd) && fd_value < PyList_GET_SIZE(by_fd)
          && PyDict_CheckExact(buffered) && PyDict_CheckExact(leftovers)
          && PyDict_CheckExact(releases);
    /* In _watchers (as `del` needs), and in none of the records whose drop runs more code. */
    int in = fit ? PyDict_Contains(watchers, fd) : 0;
    fit = in == 1;
    PyObject *dicts[3] = {buffered, leftovers, releases};
    for (int i = 0; fit && i < 3; i++) {
        in = PyDict_Contains(dicts[i], fd);
        fit = in == 0;
    }
    if (fit) {
        /* _stream_open(): the fd the stream answers with now */
        PyObject *probe = get_slot(watcher, slots.probe);
        PyObject *probed = probe == NULL ? NULL : PyObject_CallNoArgs(probe);
        Py_XDECREF(probe);
        if (probed == NULL) {
            in = PyErr_ExceptionMatches(PyExc_Exception) ? 0 : -1;
            if (in == 0) {
                PyErr_Clear(); /* taken for closed: _remove() retires it */
            }
        }
        fit = probed != NULL && PyLong_CheckExact(probed)
              && PyObject_RichCompareBool(probed, fd, Py_EQ) == 1;
        Py_XDECREF(probed);
    }
    if (in < 0 || !fit) {
        Py_DECREF(self);
        return in < 0 ? -1 : 0;
    }
    *context = self;
    return 1;
}

/* Watcher.remove() */
static PyObject *
fast_remove(PyObject *watcher, PyObject *Py_UNUSED(ignored))
{
    PyObject *self = NULL;
    int fit = Py_IS_TYPE(watcher, slots.watcher_type) ? removable(watcher, &self) : 0;
    if (fit < 0) {
        return NULL;
    }
    if (!fit) {
        return PyObject_CallOneArg(reg.python_remove, watcher);
    }
    /* _remove(): the state first, then _forget(fd) (nothing to pop but the two entries),
     * then _unregister(fd), which reads the mechanism again. */
    PyObject *fd = get_slot(watcher, reg.fd);
    set_slot(watcher, reg.state, reg.removed);
    PyObject *watchers = get_slot(self, slots.watchers);
    PyObject *by_fd = watchers == NULL ? NULL : get_slot(self, slots.by_fd);
    int failed = fd == NULL || by_fd == NULL || PyDict_DelItem(watchers, fd) < 0
                 || PyList_SetItem(by_fd, PyLong_AsSsize_t(fd), Py_NewRef(Py_None)) < 0;
    Py_XDECREF(watchers);
    Py_XDECREF(by_fd);
    PyObject *mechanism = failed ? NULL : get_slot(self, slots.usable);
    if (mechanism != NULL && mechanism != Py_None) {
        PyObject *unregister_args[2] = {mechanism, fd};
        PyObject *done = PyObject_VectorcallMethod(reg.str_unregister, unregister_args,
                                                   2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        int kept = done == NULL ? -1 : PyObject_IsTrue(done);
        Py_XDECREF(done);
        if (kept == 0) { /* the OS could not be told: _stale_fds.add(fd) */
            PyObject *stale = get_slot(self, reg.stale_fds);
            PyObject *added = stale == NULL ? NULL : PyObject_CallMethod(stale, "add", "O", fd);
            kept = added == NULL ? -1 : 1;
            Py_XDECREF(added);
            Py_XDECREF(stale);
        }
        failed = kept < 0;
    }
    failed = failed || mechanism == NULL;
    Py_XDECREF(mechanism);
    Py_XDECREF(fd);
    Py_DECREF(self);
    if (failed) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef add_def = {
    "add",
    (PyCFunction)(void (*)(void))fast_add,
    METH_FASTCALL | METH_KEYWORDS,
    "add($self, /, handle, events, data=None)\n--\n\n"
    "Watch ``handle`` for ``events`` and return the new ``Watcher``.\n\n"
    "``handle`` is a ``Handle`` or anything ``StreamPollHandle`` accepts (wrapped for\n"
    "you).  Raises ``HandleAlreadyWatchedError`` if its fd is already watched here,\n"
    "``InvalidHandleError`` if it has no usable fd, and ``FailedHandleAddError`` if the\n"
    "backend refuses it.\n\n"
    "Runs in C (iopoll._speedups) for a socket or an int fd; the pure-Python method is the\n"
    "reference, and takes every other call.",
};

static PyMethodDef remove_def = {
    "remove",
    (PyCFunction)fast_remove,
    METH_NOARGS,
    "remove($self, /)\n--\n\n"
    "Unregister this watcher; a no-op if its stream was closed.\n\n"
    "Runs in C (iopoll._speedups) for a socket's or an int fd's watcher; the pure-Python\n"
    "method is the reference, and takes every other call.",
};

/* An attribute of a module, by names. */
static PyObject *
imported(const char *module_name, const char *name)
{
    PyObject *module = PyImport_ImportModule(module_name);
    PyObject *value = module == NULL ? NULL : PyObject_GetAttrString(module, name);
    Py_XDECREF(module);
    return value;
}

/* An int's value, the reference dropped: -1 (with an error set) for NULL or a non-int. */
static long
value_of(PyObject *number)
{
    long value = number == NULL ? -1 : PyLong_AsLong(number);
    Py_XDECREF(number);
    return value;
}

/* A class found by name, checked to be one. */
static PyTypeObject *
imported_type(const char *module_name, const char *name)
{
    PyObject *found = imported(module_name, name);
    if (found != NULL && !PyType_Check(found)) {
        PyErr_Format(PyExc_TypeError, "%s.%s must be a class", module_name, name);
        Py_CLEAR(found);
    }
    return (PyTypeObject *)found;
}

int
install_registration(PyTypeObject *context_type, PyTypeObject *watcher_type)
{
    Registration found = {0};
    found.stream_handle_type = imported_type("_iopoll_core.handles", "StreamPollHandle");
    found.socket_type = imported_type("socket", "socket");
    found.event_type = imported_type("_iopoll_core.events", "Event");
    found.no_events = imported("_iopoll_core.events", "NO_EVENTS");
    found.refusal = imported("_iopoll_core.errors", "Refusal");
    found.failed_add = imported("_iopoll_core.errors", "FailedHandleAddError");
    found.active = imported("_iopoll_core.watcher", "ACTIVE");
    found.removed = imported("_iopoll_core.watcher", "REMOVED");
    /* The Python methods, read before install() replaces them. */
    found.python_add = PyObject_GetAttrString((PyObject *)context_type, "add");
    found.python_remove = PyObject_GetAttrString((PyObject *)watcher_type, "remove");
    found.empty = PyTuple_New(0);
    found.str_register = PyUnicode_InternFromString("register");
    found.str_unregister = PyUnicode_InternFromString("unregister");
    found.str_fileno = PyUnicode_InternFromString("fileno");
    found.str_index = PyUnicode_InternFromString("__index__");
    found.str_failure = PyUnicode_InternFromString("_failure");
    found.str_watcher_type = PyUnicode_InternFromString("_watcher_type");
    found.str_unadd = PyUnicode_InternFromString("_unadd");
    found.what_failed = PyUnicode_FromString("Failed to add handle");
    PyObject **objects[] = {
        (PyObject **)&found.stream_handle_type, (PyObject **)&found.socket_type,
        (PyObject **)&found.event_type, &found.no_events, &found.refusal, &found.failed_add,
        &found.active, &found.removed, &found.python_add, &found.python_remove, &found.empty,
        &found.str_register, &found.str_unregister, &found.str_fileno, &found.str_index,
        &found.str_failure, &found.str_watcher_type, &found.str_unadd, &found.what_failed,
    };
    found.plain_stream_bits = value_of(imported("_iopoll_core.context", "_PLAIN_STREAM_BITS"));
    found.max_fd = value_of(imported("_iopoll_core.handles", "MAX_FD"));
    PyObject *oneshot = found.event_type == NULL
                            ? NULL
                            : PyObject_GetAttrString((PyObject *)found.event_type, "ONESHOT");
    found.oneshot_bit = value_of(oneshot);
    size_t count = sizeof(objects) / sizeof(objects[0]);
    int failed = found.plain_stream_bits < 0 || found.oneshot_bit < 0 || found.max_fd < 0;
    for (size_t i = 0; i < count; i++) {
        failed = failed || *objects[i] == NULL;
    }
    if (!failed && !(PyFunction_Check(found.python_add) && PyFunction_Check(found.python_remove))) {
        PyErr_SetString(PyExc_TypeError, "Context.add and Watcher.remove must be Python functions");
        failed = 1;
    }
    if (failed || !(found.stale_fds = member_of(context_type, "_stale_fds"))
        || !(found.self_ref = member_of(context_type, "_self_ref"))
        || !(found.buffered = member_of(context_type, "_buffered"))
        || !(found.leftovers = member_of(context_type, "_leftovers"))
        || !(found.releases = member_of(context_type, "_releases"))
        || !(found.context = member_of(watcher_type, "_context"))
        || !(found.fd = member_of(watcher_type, "_fd"))
        || !(found.handle = member_of(watcher_type, "_handle"))
        || !(found.kind = member_of(watcher_type, "_kind"))
        || !(found.oneshot = member_of(watcher_type, "_oneshot"))
        || !(found.armed = member_of(watcher_type, "_armed"))
        || !(found.state = member_of(watcher_type, "_state"))
        || !(found.stream_fileno = member_of(found.stream_handle_type, "_fileno"))
        || !(found.stream = member_of(found.stream_handle_type, "_stream"))) {
        for (size_t i = 0; i < count; i++) {
            Py_CLEAR(*objects[i]);
        }
        return -1;
    }
    reg = found;
    if (set_attribute(context_type, PyDescr_NewMethod(context_type, &add_def)) < 0
        || set_attribute(watcher_type, PyDescr_NewMethod(watcher_type, &remove_def)) < 0) {
        return -1;
    }
    return 0;
}
