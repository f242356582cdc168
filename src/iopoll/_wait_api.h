/* _wait_api.h: what iopoll._speedups offers the other accelerators in C (the loop's
 * dispatch), through the capsule iopoll._speedups._C_API.
 *
 * wait_each(context, timeout, visit, arg) is context.wait(timeout) for an iopoll.Context
 * whose wait() is the C one: the same waiting, bookkeeping and errors, but the watchers it
 * would return are handed to visit(arg, watcher) one by one, in order, once the wait is
 * over, instead of being put in a list.  It returns how many were visited, or -1 with the
 * error set (from the wait, or from a visit, which ends the visits).  An event loop that
 * only walks the result does not have to make and free a list per tick. */

#ifndef IOPOLL_WAIT_API_H
#define IOPOLL_WAIT_API_H

#define IOPOLL_WAIT_API_CAPSULE "iopoll._speedups._C_API"

typedef int (*IopollVisit)(void *arg, PyObject *watcher);

/* Raised whenever the struct below changes: a user of the capsule takes it only when its
 * version is the one it was built with (a stale iopoll/_speedups beside a newer loop). */
#define IOPOLL_WAIT_API_VERSION 1

typedef struct {
    int version; /* IOPOLL_WAIT_API_VERSION */
    /* The C function behind Context.wait (METH_FASTCALL | METH_KEYWORDS): a caller that
     * found Context.wait's C function checks it is this one before it calls either. */
    PyObject *(*wait)(PyObject *context, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames);
    Py_ssize_t (*wait_each)(PyObject *context, PyObject *timeout, IopollVisit visit,
                            void *arg);
} IopollWaitApi;

#endif /* IOPOLL_WAIT_API_H */
