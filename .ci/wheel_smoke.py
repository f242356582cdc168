"""Check an installed iopoll wheel: the C accelerator is in it, and a wait works.

Run by cibuildwheel after each wheel is built (.github/workflows/ci.yml), from a directory
outside the checkout, so that the installed package is the one imported.
"""

from __future__ import annotations

import socket

import iopoll
import iopoll._native


def main() -> None:
    """Fail unless the wheel's ``wait()`` runs in C and reports a ready socket."""
    assert iopoll._native.ACCELERATED, "the wheel has no iopoll._speedups (C accelerator)"
    a, b = socket.socketpair()
    with a, b, iopoll.Context() as ctx:
        watcher = ctx.add(b, iopoll.Event.READ, "b")
        a.send(b"x")
        assert ctx.wait(5) == [watcher], "the ready socket was not reported"
        print(f"iopoll {iopoll.__version__} from {iopoll.__file__}: {ctx.backend.name}, C wait()")


if __name__ == "__main__":
    main()
