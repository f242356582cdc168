"""What keeps ``run()`` going: referenced, enabled callbacks, and only those."""

from __future__ import annotations

import time

import pytest

from iopoll.loop import Driver

from .harness import DriverHarness


class LivenessRules(DriverHarness):
    """What keeps ``run()`` going: referenced, enabled callbacks, and only those."""

    @pytest.mark.parametrize("kind", ["defer", "delay", "repeat", "writable", "readable", "signal"])
    def test_unreferenced_callback_does_not_keep_loop_alive(self, loop: Driver, kind: str) -> None:
        register = self.registrations(loop)[kind]
        calls: list[str] = []
        callback_id = register(loop, lambda cid, *rest: calls.append(cid))
        loop.unreference(callback_id)
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < 0.5
        assert calls == []

    @pytest.mark.parametrize("kind", ["delay", "writable"])
    def test_unreference_then_reference_restores_liveness(self, loop: Driver, kind: str) -> None:
        register = self.registrations(loop)[kind]
        calls: list[str] = []

        def fn(cid: str, *rest: object) -> None:
            calls.append(cid)
            loop.cancel(cid)

        callback_id = register(loop, fn)
        loop.unreference(callback_id)
        loop.reference(callback_id)
        loop.run()
        assert calls == [callback_id]

    def test_unreferenced_defer_runs_while_loop_is_alive(self, loop: Driver) -> None:
        calls: list[str] = []
        deferred = loop.unreference(loop.defer(lambda cid: calls.append("defer")))
        loop.delay(0.01, lambda cid: calls.append("delay"))
        loop.run()
        assert calls == ["defer", "delay"]
        assert deferred not in loop.get_identifiers()

    def test_loop_ends_with_only_unreferenced_callbacks(self, loop: Driver) -> None:
        loop.unreference(loop.repeat(0.001, lambda cid: None))
        loop.unreference(loop.on_writable(self.pair()[0], lambda cid, s: None))
        ran: list[int] = []
        loop.delay(0.02, lambda cid: ran.append(1))
        loop.run()
        assert ran == [1]
        assert len(loop.get_identifiers()) == 2

    def test_run_with_nothing_returns_at_once(self, loop: Driver) -> None:
        started = time.monotonic()
        loop.run()
        assert time.monotonic() - started < 0.1

    def test_enabling_an_enabled_callback_changes_nothing(self, loop: Driver) -> None:
        ran: list[str] = []
        delay_id = loop.delay(0.02, ran.append)
        assert loop.enable(delay_id) == delay_id
        barked = self.watchdog(loop, 2.0)
        loop.run()
        assert (ran, barked) == ([delay_id], [])

    def test_referencing_a_disabled_callback_keeps_nothing_going(self, loop: Driver) -> None:
        # run() returns when no enabled, referenced callback is left (SPEC 9.1).
        delay_id = loop.disable(loop.delay(0.02, lambda cid: None))
        loop.reference(loop.unreference(delay_id))
        barked = self.watchdog(loop, 2.0)
        loop.run()
        assert barked == []
        assert loop.is_referenced(delay_id) and not loop.is_enabled(delay_id)
