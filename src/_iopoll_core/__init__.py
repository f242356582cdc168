"""The backend-independent engine shared by :mod:`iopoll` and :mod:`iopoll_polyfill`.

Private: import the public names from ``iopoll`` or ``iopoll_polyfill``.  This package is
pure standard library so that the polyfill works where ``iopoll`` is absent.
"""
