"""Soak tests of iopoll: long seeded random walks over real OS objects, checked all the way.

    python -m benchmarks.soak                      # the Context, every impl and backend, 20 s each
    python -m benchmarks.soak loop --seconds 30    # iopoll.loop: every driver
    python -m benchmarks.soak aio                  # iopoll.aio: Loop, IoPollSelector per backend
    python -m benchmarks.soak all

``context`` (:mod:`.context`, model in :mod:`.model`) walks a ``Context`` through adds,
modifies, removes, sends, drains, closes, fd reuse, dups, signals and forks, and checks every
``wait()`` against a model of what must, may and must not be reported.  ``loop`` and ``aio``
(:mod:`.loops`) stream bytes over hundreds of loopback TCP connections that open, reset,
half-close and speak TLS, and check that every byte arrives and every callback ran or was
cancelled.  See ``docs/reliability.md``.
"""
