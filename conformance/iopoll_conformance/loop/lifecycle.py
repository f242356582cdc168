"""A callback's life cycle: ``enable()``, ``disable()`` and ``cancel()``, and what each prevents."""

from __future__ import annotations

import pytest

from iopoll.loop import Driver

from .callbacks import nil
from .harness import DriverHarness


class CallbackLifecycleRules(DriverHarness):
    """A callback's life cycle: ``enable()``, ``disable()`` and ``cancel()``, and what each
    prevents.
    """

    def test_reenabled_defer_runs_in_later_tick(self, loop: Driver) -> None:
        calls: list[str] = []
        deferred = loop.disable(loop.defer(lambda cid: calls.append("defer")))
        loop.defer(lambda cid: nil(loop.enable(deferred)))
        loop.run()
        assert calls == ["defer"]

    @pytest.mark.parametrize("kind", ["defer", "delay", "repeat", "writable", "readable", "signal"])
    def test_disable_then_cancel(self, loop: Driver, kind: str) -> None:
        calls: list[str] = []
        callback_id = self.registrations(loop)[kind](loop, lambda cid, *r: calls.append(cid))
        loop.disable(callback_id)
        loop.cancel(callback_id)
        loop.run()
        assert calls == [] and loop.get_identifiers() == []

    def test_disable_prevents_and_enable_allows_invocation(self, loop: Driver) -> None:
        calls: list[str] = []
        delay_id = loop.disable(loop.delay(0.001, lambda cid: calls.append("delay")))
        loop.run()
        assert calls == []
        loop.enable(delay_id)
        loop.run()
        assert calls == ["delay"]

    def test_disable_in_same_tick_prevents_later_callback(self, loop: Driver) -> None:
        calls: list[str] = []
        later: list[str] = []

        def first(cid: str) -> None:
            calls.append("first")
            loop.disable(later[0])

        loop.defer(first)
        later.append(loop.defer(lambda cid: calls.append("second")))
        loop.run()
        assert calls == ["first"]

    def test_cancel_removes_pending_timer(self, loop: Driver) -> None:
        calls: list[str] = []
        delay_id = loop.delay(0.01, calls.append)
        loop.cancel(delay_id)
        loop.run()
        assert calls == [] and delay_id not in loop.get_identifiers()
