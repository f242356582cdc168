"""``iopoll`` with ``Backend.KQUEUE`` running on libkqueue: an implementation module for
``python -m iopoll_conformance kqueue_over_libkqueue --backend KQUEUE``.

Importing it loads the libkqueue named by ``IOPOLL_TEST_LIBKQUEUE`` through the test-only
ctypes binding (``tests/libkqueue.py``), installs it as the ``select`` attributes that
iopoll's KQUEUE mechanism reads, and makes ``Backend.KQUEUE`` available, for the rest of the
process: use it in a process of its own (``tests/test_kqueue_libkqueue.py`` runs the suite so).
The shipped backend is untouched: it is iopoll's own ``KqueueMechanism`` that runs.
"""

from __future__ import annotations

import iopoll
import libkqueue
from iopoll import *  # noqa: F403  (every name of SPEC section 1)

_path = libkqueue.library_path()
if _path is None:
    raise ImportError(libkqueue.HOW_TO_GET_IT)

INSTALLATION = libkqueue.Installation(libkqueue.load(_path))

__all__ = [*iopoll.__all__]
