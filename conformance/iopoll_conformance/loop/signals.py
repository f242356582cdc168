"""``on_signal()``: delivery, several callbacks per signal, and the process's signal state (this
module's rules send ``SIGUSR1`` and ``SIGUSR2`` to the process).
"""

from __future__ import annotations

import os
import signal
import threading
import time

from iopoll.loop import Driver

from .callbacks import appending, nil
from .harness import DriverHarness


class SignalRules(DriverHarness):
    """``on_signal()``: delivery, several callbacks per signal, and the process's signal
    state (this module's rules send ``SIGUSR1`` and ``SIGUSR2`` to the process).
    """

    def test_signal_callback(self, loop: Driver) -> None:
        got: list[tuple[str, int]] = []

        def on_signal(cid: str, signum: int) -> None:
            got.append((cid, signum))
            loop.cancel(cid)

        callback_id = loop.on_signal(signal.SIGUSR1, on_signal)
        loop.delay(0.01, lambda cid: os.kill(os.getpid(), signal.SIGUSR1))
        loop.run()
        assert got == [(callback_id, signal.SIGUSR1)]

    def test_several_callbacks_per_signal_and_disabled_ones(self, loop: Driver) -> None:
        got: list[str] = []
        ids: list[str] = []
        for name in ("a", "b", "c"):
            ids.append(loop.on_signal(signal.SIGUSR2, appending(got, name)))
        loop.disable(ids[1])
        loop.cancel(ids[2])

        def finish(cid: str) -> None:
            for callback_id in ids:
                loop.cancel(callback_id)

        loop.delay(0.01, lambda cid: os.kill(os.getpid(), signal.SIGUSR2))
        loop.delay(0.1, finish)
        loop.run()
        assert got == ["a"]

    def test_signal_callback_created_disabled_then_enabled(self, loop: Driver) -> None:
        got: list[int] = []
        callback_id = loop.disable(loop.on_signal(signal.SIGUSR1, lambda cid, s: got.append(s)))
        loop.defer(lambda cid: nil(loop.enable(callback_id)))
        loop.delay(0.02, lambda cid: os.kill(os.getpid(), signal.SIGUSR1))
        loop.delay(0.1, lambda cid: loop.cancel(callback_id))
        loop.run()
        assert got == [signal.SIGUSR1]

    def test_signal_state_installed_with_first_restored_with_last(self, loop: Driver) -> None:
        # A driver takes a signal over either with a handler and the wakeup fd, or (SPEC
        # 9.1, IoPollDriver where the backend supports_signal_handles()) by blocking it for
        # a SignalHandle; either way the last cancel restores what was there.
        def previous(signum: int, frame: object) -> None:
            pass

        def taken_over() -> bool:
            wakeup = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(wakeup)
            if signal.getsignal(signal.SIGUSR1) is not previous:
                return wakeup != -1  # a handler of the driver's, woken through the fd
            return signal.SIGUSR1 in signal.pthread_sigmask(signal.SIG_BLOCK, [])

        old = signal.signal(signal.SIGUSR1, previous)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        try:
            assert signal.set_wakeup_fd(-1) == -1
            assert signal.SIGUSR1 not in mask
            first = loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
            second = loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
            assert taken_over()
            loop.cancel(first)
            assert taken_over()
            loop.cancel(second)
            assert signal.getsignal(signal.SIGUSR1) is previous
            assert signal.set_wakeup_fd(-1) == -1
            assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
        finally:
            signal.signal(signal.SIGUSR1, old)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def test_creating_a_driver_changes_no_signal_state(self) -> None:
        before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGINT)
        driver = self.make()
        assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGINT)) == before
        assert signal.set_wakeup_fd(-1) == -1
        getattr(driver, "close", lambda: None)()

    def test_signal_outside_main_thread_is_unsupported(self, loop: Driver) -> None:
        import threading

        from iopoll.loop import UnsupportedFeatureError

        errors: list[BaseException] = []
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])

        def worker() -> None:
            try:
                loop.on_signal(signal.SIGUSR1, lambda cid, s: None)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert len(errors) == 1 and isinstance(errors[0], UnsupportedFeatureError)
        assert loop.get_identifiers() == []
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask  # nothing blocked

    def test_a_signal_runs_only_its_own_callbacks(self, loop: Driver) -> None:
        got: list[tuple[str, int]] = []
        usr1 = loop.on_signal(signal.SIGUSR1, lambda cid, s: got.append(("usr1", s)))
        usr2 = loop.on_signal(signal.SIGUSR2, lambda cid, s: got.append(("usr2", s)))
        loop.defer(lambda cid: os.kill(os.getpid(), signal.SIGUSR2))
        loop.delay(0.1, lambda cid: nil(loop.cancel(usr1), loop.cancel(usr2)))
        loop.run()
        assert got == [("usr2", signal.SIGUSR2)]

    def test_signals_run_before_io_in_a_tick(self, loop: Driver) -> None:
        # SPEC 9.1: within a tick, deferred callbacks, then signals, I/O and due timers.
        reader, writer = self.pair()
        writer.send(b"x")
        log: list[str] = []
        io = loop.on_readable(reader, lambda cid, s: log.append("io"))

        def on_signal(cid: str, signum: int) -> None:
            log.append("signal")
            loop.cancel(cid)
            loop.cancel(io)

        loop.on_signal(signal.SIGUSR1, on_signal)
        loop.defer(lambda cid: os.kill(os.getpid(), signal.SIGUSR1))
        loop.run()
        assert log == ["io", "signal"]  # tick 1: the I/O; tick 2: the signal, then nothing

    def test_a_signal_from_another_thread_wakes_a_blocking_wait(self, loop: Driver) -> None:
        # SPEC 9.1: a signal wakes a blocking wait at once.  Every other rule sends its
        # signal from a callback, before the wait.
        got: list[float] = []
        started = time.monotonic()

        def on_signal(cid: str, signum: int) -> None:
            got.append(time.monotonic() - started)
            loop.cancel(cid)
            loop.stop()

        loop.on_signal(signal.SIGUSR1, on_signal)
        loop.delay(5.0, lambda cid: loop.stop())
        sender = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
        sender.start()
        try:
            loop.run()
        finally:
            sender.join()
        assert got and got[0] < 2.5, got

    def test_a_signal_reaches_its_callback_while_another_thread_runs(self, loop: Driver) -> None:
        # Signals work in every driver: a thread that does not block the signal must not
        # take it away from the callback (the kernel gives it to any such thread).
        got: list[str] = []
        previous = signal.signal(signal.SIGUSR1, lambda signum, frame: got.append("handler"))
        done = threading.Event()
        other = threading.Thread(target=done.wait)
        other.start()
        try:

            def on_signal(cid: str, signum: int) -> None:
                got.append("callback")
                loop.cancel(cid)

            loop.on_signal(signal.SIGUSR1, on_signal)

            def send(cid: str) -> None:
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.05)  # the loop is busy: a thread that can take it does

            loop.defer(send)
            barked = self.watchdog(loop, 2.0)
            loop.run()
        finally:
            done.set()
            other.join()
            for callback_id in loop.get_identifiers():
                loop.cancel(callback_id)
            signal.signal(signal.SIGUSR1, previous)
        assert (got, barked) == (["callback"], [])
