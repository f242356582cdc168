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

typedef struct {
    Py_ssize_t (*wait_each)(PyObject *context, PyObject *timeout, IopollVisit visit,
                            void *arg);
} IopollWaitApi;

#endif /* IOPOLL_WAIT_API_H */
