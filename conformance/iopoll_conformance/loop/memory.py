"""Memory: registering and cancelling callbacks, over and over, leaks nothing."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable

import pytest

from iopoll.loop import Driver

from .harness import DriverHarness


class MemoryRules(DriverHarness):
    """Memory: registering and cancelling callbacks, over and over, leaks nothing."""

    @staticmethod
    def _cancelling(loop: Driver, callback_id: str) -> Callable[[str], None]:
        return lambda cid: loop.cancel(callback_id)

    @pytest.mark.parametrize("kind", ["defer", "delay", "repeat", "writable", "readable", "signal"])
    def test_no_memory_leak(self, loop: Driver, kind: str) -> None:
        if not self.leaks:
            pytest.skip("this driver keeps a record of every callback on purpose")
        register = self.registrations(loop)[kind]

        def cycle() -> None:
            for _ in range(2000):
                callback_id = register(loop, lambda cid, *r: None)
                loop.cancel(callback_id)
            for _ in range(200):
                callback_id = register(loop, lambda cid, *r: None)
                loop.defer(self._cancelling(loop, callback_id))
            loop.run()

        tracemalloc.start()
        try:
            cycle()
            gc.collect()  # garbage the collector has not reached yet is no leak
            before = tracemalloc.get_traced_memory()[0]
            cycle()
            cycle()
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert after - before < 32768  # a leak would be >= 4400 callbacks
