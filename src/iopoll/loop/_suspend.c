/* _suspend.c: a suspension's round trip in C (part of iopoll.loop._speedups).
 *
 * A callback that suspends and is resumed runs, in pure Python, eight methods of
 * _suspension.py: get_suspension(), LoopRunner.suspension(), Suspension.suspend(),
 * LoopRunner.hand_over(), the successor greenlet's LoopRunner._loop_main(), then
 * Suspension.resume() and _wake(), and the microtask Suspension._switch_in().  Each is a
 * frame of the interpreter around a few slot reads and greenlet calls.  These are the same
 * methods, line for line, put by install_suspensions() on two private subclasses
 * (_native_dispatch.py's NativeLoopRunner and NativeSuspension) that the accelerated drivers
 * make; the classes of _suspension.py keep the Python methods, which are the reference.
 *
 * What is not on that path stays in Python and is called from here: the main greenlet's
 * suspend() (it runs the loop), LoopRunner.suspension() past its first check (a greenlet's
 * first suspension), throw().  Greenlets are driven through their Python API (switch(),
 * parent, dead), as the Python methods drive them; the state is the classes' __slots__.
 */

#include "_dispatch.h"

/* The slots and names install_suspensions() finds, once. */
static struct {
    /* Suspension */
    PyMemberDef *runner, *greenlet, *getcurrent, *main, *pending, *queued, *value, *error,
        *dead;
    /* LoopRunner */
    PyMemberDef *loop, *r_getcurrent, *last, *run_loop, *interrupt, *queue;
    PyTypeObject *suspension_type; /* whose instances the Suspension slots are read from */
    PyTypeObject *runner_type;     /* and the LoopRunner slots */
    PyObject *main_suspend;    /* Suspension.suspend: the main greenlet's suspend() */
    PyObject *slow_suspension; /* LoopRunner.suspension: past its first check */
    PyObject *hand_over;       /* _suspension._HAND_OVER, sent to it by hand_over() */
    PyObject *not_another_loop; /* _suspension._not_another_loop(owner, runner) */
    PyObject *raise_if_exited;  /* _suspension._raise_if_exited(result) */
    PyObject *exited;           /* _suspension._Exited */
    PyObject *exit_type;        /* greenlet.GreenletExit, found by the first loop greenlet */
    PyObject *superseded;      /* _suspension.Superseded */
    PyObject *no_args;         /* (): a microtask's arguments */
    PyObject *s_switch, *s_parent, *s_dead, *s_hand_over, *s_switch_in, *s_forward;
    PyObject *s_value;
    int made;
} G;

/* owner is getcurrent(): the greenlet of a suspension (None: gone) is the one running;
 * -1 on error. */
static int
is_current(PyObject *owner, PyObject *getcurrent)
{
    if (owner == Py_None) {
        return 0;
    }
    PyObject *current = PyObject_CallNoArgs(getcurrent);
    int found = current == NULL ? -1 : current == owner;
    Py_XDECREF(current);
    return found;
}

/* None for a call whose result is not wanted, or NULL if it failed: steals `done`. */
static inline PyObject *
discarded(PyObject *done)
{
    if (done == NULL) {
        return NULL;
    }
    Py_DECREF(done);
    Py_RETURN_NONE;
}

/* runner.<member>, a new reference, for a suspension's private _runner (a LoopRunner, or
 * anything else put there). */
static inline PyObject *
runner_slot(PyObject *runner, PyMemberDef *member)
{
    return slot_or_attribute(runner, of_class(runner, G.runner_type), member);
}

/* -- Suspension ------------------------------------------------------------------------ */

/* Suspension.suspend: the greenlet's own suspend(); the main greenlet's is Python's. */
static PyObject *
suspension_suspend(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    int main = truth(self, G.main);
    if (main != 0) {
        /* Every check below is also that method's first: it may run them itself. */
        return main < 0 ? NULL : PyObject_CallOneArg(G.main_suspend, self);
    }
    int pending = truth(self, G.pending);
    if (pending != 0) {
        if (pending > 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Must call resume() or throw() before calling suspend() again");
        }
        return NULL;
    }
    PyObject *ref = peek(self, G.greenlet);
    PyObject *getcurrent = peek(self, G.getcurrent);
    if (ref == NULL || getcurrent == NULL) {
        return NULL;
    }
    PyObject *owner = PyObject_CallNoArgs(ref);
    if (owner == NULL) {
        return NULL;
    }
    int mine = is_current(owner, getcurrent);
    if (mine <= 0) {
        if (mine == 0) {
            PyErr_SetString(PyExc_RuntimeError, "Must not call suspend() from another greenlet");
        }
        Py_DECREF(owner);
        return NULL;
    }
    int dead = truth(self, G.dead);
    if (dead != 0) {
        if (dead > 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Suspension is dead: the event loop ended without resuming it");
        }
        Py_DECREF(owner);
        return NULL;
    }
    put_bool(self, G.pending, 1);
    PyObject *runner = get_slot(self, G.runner);
    PyObject *loop = runner == NULL ? NULL : runner_slot(runner, G.loop);
    PyObject *sent = NULL;
    if (loop == owner) {
        sent = call0(runner, G.s_hand_over); /* the loop goes on in a successor */
    }
    else if (loop != NULL) {
        PyObject *args[2] = {owner, runner};
        PyObject *checked = PyObject_Vectorcall(G.not_another_loop, args, 2, NULL);
        PyObject *parent = checked == NULL ? NULL : PyObject_GetAttr(owner, G.s_parent);
        Py_XDECREF(checked);
        if (parent != NULL) {
            sent = call1(parent, G.s_switch, Py_None); /* what the starter's switch() returns */
            Py_DECREF(parent);
        }
    }
    Py_XDECREF(loop);
    Py_DECREF(owner);
    /* Not a resume (that clears _pending first): a greenlet whose parent is this one ended
     * or suspended (_suspension.py, the note above LoopRunner.forward). */
    int waiting;
    while (sent != NULL && (waiting = truth(self, G.pending)) != 0) {
        Py_SETREF(sent, waiting < 0 ? NULL : call1(runner, G.s_forward, sent));
    }
    Py_XDECREF(runner);
    if (sent == NULL) {
        put_bool(self, G.pending, 0); /* it waits no more */
        return NULL;
    }
    Py_DECREF(sent);
    PyObject *error = get_slot(self, G.error);
    PyObject *value = get_slot(self, G.value);
    if (error == NULL || value == NULL) {
        Py_XDECREF(error);
        Py_XDECREF(value);
        return NULL;
    }
    put(self, G.error, Py_None);
    put(self, G.value, Py_None);
    if (error != Py_None) {
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_DECREF(error);
        Py_DECREF(value);
        return NULL;
    }
    Py_DECREF(error);
    return value;
}

/* Suspension.resume, with Suspension._wake(value, None) in it. */
static PyObject *
suspension_resume(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *value = Py_None;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 1) {
        PyErr_Format(PyExc_TypeError, "resume() takes at most 1 argument (%zd given)",
                     nargs + nkw);
        return NULL;
    }
    if (nargs == 1) {
        value = args[0];
    }
    else if (nkw == 1) {
        if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), G.s_value) != 0) {
            PyErr_Format(PyExc_TypeError, "resume() got an unexpected keyword argument '%U'",
                         PyTuple_GET_ITEM(kwnames, 0));
            return NULL;
        }
        value = args[0];
    }
    int pending = truth(self, G.pending);
    if (pending <= 0) {
        if (pending < 0) {
            return NULL;
        }
        int dead = truth(self, G.dead);
        if (dead != 0) {
            if (dead < 0) {
                return NULL;
            }
            Py_RETURN_NONE; /* the loop gave up on it: ignored, as Revolt does */
        }
        PyErr_SetString(PyExc_RuntimeError, "Must call suspend() before calling resume()");
        return NULL;
    }
    put_bool(self, G.pending, 0);
    put(self, G.value, value);
    put(self, G.error, Py_None);
    int main = truth(self, G.main);
    PyObject *runner = main < 0 ? NULL : get_slot(self, G.runner);
    if (runner == NULL) {
        return NULL;
    }
    PyObject *done = NULL;
    /* What is called is held through the call: the code it runs may replace it. */
    if (main) {
        PyObject *interrupt = runner_slot(runner, G.interrupt);
        done = interrupt == NULL ? NULL : PyObject_CallOneArg(interrupt, self);
        Py_XDECREF(interrupt);
    }
    else {
        put_bool(self, G.queued, 1);
        PyObject *queue = runner_slot(runner, G.queue);
        PyObject *switch_in = queue == NULL ? NULL : PyObject_GetAttr(self, G.s_switch_in);
        if (switch_in != NULL) {
            PyObject *task = PyTuple_Pack(2, switch_in, G.no_args);
            Py_DECREF(switch_in);
            if (task != NULL) {
                done = PyObject_CallOneArg(queue, task);
                Py_DECREF(task);
            }
        }
        Py_XDECREF(queue);
    }
    Py_DECREF(runner);
    return discarded(done);
}

/* Suspension._switch_in: the microtask that resume() queued. */
static PyObject *
suspension_switch_in(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    put_bool(self, G.queued, 0);
    PyObject *ref = peek(self, G.greenlet);
    PyObject *owner = ref == NULL ? NULL : PyObject_CallNoArgs(ref);
    if (owner == NULL) {
        return NULL;
    }
    PyObject *done = NULL;
    PyObject *dead = owner == Py_None ? NULL : PyObject_GetAttr(owner, G.s_dead);
    int gone = owner == Py_None ? 1 : dead == NULL ? -1 : PyObject_IsTrue(dead);
    Py_XDECREF(dead);
    if (gone > 0) {
        done = Py_NewRef(Py_None);
    }
    else if (gone == 0) {
        PyObject *getcurrent = peek(self, G.getcurrent);
        PyObject *current = getcurrent == NULL ? NULL : PyObject_CallNoArgs(getcurrent);
        PyObject *parent = current == NULL ? NULL : PyObject_GetAttr(owner, G.s_parent);
        int moved = parent == NULL ? -1 : parent != current;
        Py_XDECREF(parent);
        if (moved > 0) {
            /* come back here when it suspends or ends */
            moved = PyObject_SetAttr(owner, G.s_parent, current) < 0 ? -1 : 0;
        }
        Py_XDECREF(current);
        if (moved == 0) {
            done = call0(owner, G.s_switch);
        }
        if (done != NULL && done != Py_None) { /* None: it suspended again, or ended */
            Py_SETREF(done, PyObject_CallOneArg(G.raise_if_exited, done));
        }
    }
    Py_DECREF(owner);
    return discarded(done);
}

/* -- LoopRunner ------------------------------------------------------------------------ */

/* LoopRunner.suspension: its first check here, the rest in Python. */
static PyObject *
runner_suspension(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    /* The last one handed out, while its greenlet asks again; held while its greenlet is
     * asked for (getcurrent() may run code that drops it). */
    PyObject *last = get_slot(self, G.last);
    if (last == NULL) {
        return NULL;
    }
    /* Read by offset only from a suspension of the class whose slots these are; anything
     * else put in the private _last goes to the Python method, which reads it by name. */
    if (last != Py_None && of_class(last, G.suspension_type)) {
        PyObject *ref = get_slot(last, G.greenlet);
        PyObject *getcurrent = ref == NULL ? NULL : get_slot(self, G.r_getcurrent);
        PyObject *owner = getcurrent == NULL ? NULL : PyObject_CallNoArgs(ref);
        int mine = owner == NULL ? -1 : is_current(owner, getcurrent);
        Py_XDECREF(owner);
        Py_XDECREF(getcurrent);
        Py_XDECREF(ref);
        int dead = mine > 0 ? truth(last, G.dead) : 0;
        if (mine < 0 || dead < 0) {
            Py_DECREF(last);
            return NULL;
        }
        if (mine && !dead) {
            return last;
        }
    }
    Py_DECREF(last);
    return PyObject_CallOneArg(G.slow_suspension, self);
}

/* LoopRunner.hand_over: the loop greenlet's callback suspends; the greenlet that entered the
 * loop starts a successor to run it (LoopRunner.enter, which explains why there). */
static PyObject *
runner_hand_over(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *current = get_slot(self, G.loop);
    if (current == NULL) {
        return NULL;
    }
    PyObject *parent = PyObject_GetAttr(current, G.s_parent);
    Py_DECREF(current);
    if (parent == NULL) {
        return NULL;
    }
    PyObject *sent = call1(parent, G.s_switch, G.hand_over);
    Py_DECREF(parent);
    return sent; /* () from the resumption, or what forward() takes */
}

/* LoopRunner._loop_main: what a loop greenlet runs. */
static PyObject *
runner_loop_main(PyObject *self, PyObject *fresh)
{
    if (G.exit_type == NULL) {
        /* A loop greenlet runs this: greenlet is imported. */
        PyObject *greenlet = PyImport_ImportModule("greenlet");
        G.exit_type = greenlet == NULL ? NULL : PyObject_GetAttrString(greenlet, "GreenletExit");
        Py_XDECREF(greenlet);
        if (G.exit_type == NULL) {
            return NULL;
        }
    }
    PyObject *run_loop = get_slot(self, G.run_loop);
    PyObject *done = run_loop == NULL ? NULL : PyObject_CallOneArg(run_loop, fresh);
    Py_XDECREF(run_loop);
    if (done == NULL && PyErr_ExceptionMatches(G.superseded)) {
        /* back to whoever resumed this greenlet's suspended callback */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (done == NULL && PyErr_ExceptionMatches(G.exit_type)) {
        /* a callback's, which greenlet would take for this greenlet's quiet end */
        PyObject *error = fetch_exception();
        done = error == NULL ? NULL : PyObject_CallOneArg(G.exited, error);
        Py_XDECREF(error);
    }
    return done;
}

/* -- the driver ------------------------------------------------------------------------ */

/* AbstractDriver.get_suspension (one of install()'s methods). */
PyObject *
loop_get_suspension(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *runner = get_slot(self, S.runner); /* held through its method */
    PyObject *suspension = runner == NULL ? NULL : call0(runner, S.s_suspension);
    Py_XDECREF(runner);
    return suspension;
}

/* -- install_suspensions() ------------------------------------------------------------- */

static PyMethodDef suspension_methods[] = {
    {"suspend", (PyCFunction)suspension_suspend, METH_NOARGS,
     "Wait until resumed; return the resume() value or raise the throw() error." C_NOTE},
    {"resume", (PyCFunction)(void (*)(void))suspension_resume, METH_FASTCALL | METH_KEYWORDS,
     "resume($self, /, value=None)\n--\n\n"
     "Resume the suspended greenlet with ``value`` (after the current callback)." C_NOTE},
    {"_switch_in", (PyCFunction)suspension_switch_in, METH_NOARGS,
     "Switch into the resumed greenlet (a microtask)." C_NOTE},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef runner_methods[] = {
    {"suspension", (PyCFunction)runner_suspension, METH_NOARGS,
     "The suspension of the current greenlet, one per greenlet." C_NOTE},
    {"hand_over", (PyCFunction)runner_hand_over, METH_NOARGS,
     "The loop greenlet's callback suspends: a successor greenlet continues the loop." C_NOTE},
    {"_loop_main", (PyCFunction)runner_loop_main, METH_O,
     "Run the loop in a loop greenlet; a superseded one just ends." C_NOTE},
    {NULL, NULL, 0, NULL},
};

static int
find_suspension_slots(PyTypeObject *runner_type, PyTypeObject *suspension_type)
{
    PyTypeObject *r = runner_type, *s = suspension_type;
    if (!(G.runner = member_of(s, "_runner")) || !(G.greenlet = member_of(s, "_greenlet"))
        || !(G.getcurrent = member_of(s, "_getcurrent")) || !(G.main = member_of(s, "_main"))
        || !(G.pending = member_of(s, "_pending")) || !(G.queued = member_of(s, "_queued"))
        || !(G.value = member_of(s, "_value"))
        || !(G.error = member_of(s, "_error")) || !(G.dead = member_of(s, "_dead"))
        || !(G.loop = member_of(r, "loop")) || !(G.r_getcurrent = member_of(r, "getcurrent"))
        || !(G.last = member_of(r, "_last")) || !(G.run_loop = member_of(r, "_run_loop"))
        || !(G.interrupt = member_of(r, "interrupt")) || !(G.queue = member_of(r, "queue"))) {
        return -1;
    }
    G.suspension_type = (PyTypeObject *)Py_NewRef(s);
    G.runner_type = (PyTypeObject *)Py_NewRef(r);
    /* The parents' Python methods, which the C ones fall back on. */
    G.main_suspend = PyObject_GetAttrString((PyObject *)s->tp_base, "suspend");
    G.slow_suspension = PyObject_GetAttrString((PyObject *)r->tp_base, "suspension");
    PyObject *module = PyImport_ImportModule("iopoll.loop._suspension");
    if (module == NULL || G.main_suspend == NULL || G.slow_suspension == NULL) {
        Py_XDECREF(module);
        return -1;
    }
    G.hand_over = PyObject_GetAttrString(module, "_HAND_OVER");
    G.superseded = PyObject_GetAttrString(module, "Superseded");
    G.not_another_loop = PyObject_GetAttrString(module, "_not_another_loop");
    G.raise_if_exited = PyObject_GetAttrString(module, "_raise_if_exited");
    G.exited = PyObject_GetAttrString(module, "_Exited");
    Py_DECREF(module);
    G.no_args = PyTuple_New(0);
    if (G.hand_over == NULL || G.superseded == NULL || G.not_another_loop == NULL
        || G.raise_if_exited == NULL || G.exited == NULL || G.no_args == NULL) {
        return -1;
    }
    struct {
        PyObject **target;
        const char *text;
    } names[] = {
        {&G.s_switch, "switch"},         {&G.s_parent, "parent"},
        {&G.s_dead, "dead"},             {&G.s_hand_over, "hand_over"},
        {&G.s_switch_in, "_switch_in"},  {&G.s_value, "value"},
        {&G.s_forward, "forward"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((*names[i].target = PyUnicode_InternFromString(names[i].text)) == NULL) {
            return -1;
        }
    }
    G.made = 1;
    return 0;
}

/* install_suspensions(runner_cls, suspension_cls): the module function. */
PyObject *
install_suspensions(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "install_suspensions(runner_cls, suspension_cls) takes two classes");
        return NULL;
    }
    PyTypeObject *runner_type = (PyTypeObject *)args[0];
    PyTypeObject *suspension_type = (PyTypeObject *)args[1];
    if (runner_type->tp_base == NULL || suspension_type->tp_base == NULL) {
        PyErr_SetString(PyExc_TypeError, "install_suspensions() takes two subclasses");
        return NULL;
    }
    if (!G.made && find_suspension_slots(runner_type, suspension_type) < 0) {
        return NULL;
    }
    struct {
        PyTypeObject *type;
        PyMethodDef *methods;
    } targets[] = {{suspension_type, suspension_methods}, {runner_type, runner_methods}};
    for (size_t i = 0; i < 2; i++) {
        for (PyMethodDef *def = targets[i].methods; def->ml_name != NULL; def++) {
            if (set_attribute(targets[i].type, PyDescr_NewMethod(targets[i].type, def)) < 0) {
                return NULL;
            }
        }
    }
    Py_RETURN_NONE;
}
