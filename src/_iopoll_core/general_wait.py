"""``GeneralWait``: ``wait()`` in every form its fast path leaves to it.

Every timeout form, ``max_events`` and its leftovers, bytes a TLS stream holds, due timers,
and every report that needs care (no watcher, a closed stream, POLLNVAL, a one-shot) come
here.  ``Context.wait`` (and the C accelerator's) calls ``_wait`` for a call it does not
serve, and ``_finish_wait`` with reports it will not decode; ``_poll_failed`` says what a
failed poll raises; ``_poll_forever`` polls with no timeout, and ``_can_be_woken`` (in
``ContextState``) says whether such a poll may block.  Those names and signatures are the C
code's interface.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn

from .arguments import FOREVER, MAX_EVENTS_LIMIT, check_max_events, timeout_seconds
from .context_state import ContextState
from .errors import FailedPollWaitError, Refusal, raised_by_backend
from .events import Event, decode_bits, os_events
from .mechanism import Mechanism
from .watcher import Watcher

__all__ = ["GeneralWait"]


class GeneralWait(ContextState):
    """The general path of ``wait()`` (see the module doc)."""

    __slots__ = ()

    def _wait(
        self,
        timeout: float | timedelta | None,
        microseconds: int,
        max_events: int | None,
    ) -> list[Watcher]:
        """``wait()`` in general: every timeout form, ``max_events``, buffered bytes."""
        self._usable_mechanism(FailedPollWaitError)
        seconds = timeout_seconds(timeout, microseconds)
        limit = MAX_EVENTS_LIMIT if max_events is None else check_max_events(max_events)
        if self._lost or self._removed:
            self._report_removed()
        return self._wait_for(seconds, limit, None)

    def _finish_wait(
        self, raw: list[tuple[int, int]], seconds: float, started: float
    ) -> list[Watcher]:
        """The fast path's reports, when one needs care: ``_collect`` decodes them all, and
        if none was about a live watcher the wait goes on for what is left of ``seconds``."""
        mechanism = self._usable_mechanism(FailedPollWaitError)
        ready = self._collect_all(mechanism, raw, MAX_EVENTS_LIMIT)
        if not ready and seconds > 0:
            seconds = max(seconds - (time.monotonic() - started), 0.0)
        return self._wait_for(seconds, MAX_EVENTS_LIMIT, ready)

    def _wait_for(self, seconds: float, limit: int, ready: list[Watcher] | None) -> list[Watcher]:
        """Poll until a watcher is ready or ``seconds`` (``FOREVER``: no limit) have passed.

        ``ready`` is what a poll already made of its reports, or None.  A poll whose every
        report was about a retired watcher (a closed stream seen through a dup, a reused fd
        number, select()'s EBADF) is no reason to return early: the loop polls again for
        the time that is left.  It is the one loop over the clock in the Context; a timeout
        longer than one OS call can wait goes round it too.
        """
        deadline = time.monotonic() + seconds if seconds > 0 else 0.0
        while True:
            if ready is None:
                ready = self._poll_once(self._usable_mechanism(FailedPollWaitError), seconds, limit)
            if ready or seconds == 0:
                break
            if seconds > 0:
                seconds = deadline - time.monotonic()
                if seconds <= 0:
                    if not self._timers:
                        break
                    seconds = 0.0  # one last look, for a timer due at the deadline
            elif not self._watchers and not self._timers:
                break  # FOREVER with nothing to wait for
            ready = None
        # Leftovers and buffered watchers come and go above: the fast path may apply again.
        self._refresh_fast_path()
        return ready or []

    def _poll_once(self, mechanism: Mechanism, seconds: float, limit: int) -> list[Watcher]:
        """Due timers, then one poll of the OS for at most ``seconds``, as watchers.

        Due timers come first and take their ``max_events`` slots before any fd (SPEC 10):
        the OS is then asked, without waiting, for what fits in the rest.  With none due,
        the OS wait ends at the first deadline.

        Except after a wait whose due timers took every slot: the next one asks the OS
        first, and timers get what is left.  Otherwise periodic timers due at every wait
        would keep ready fds out of every result, which SPEC 4 forbids ("no left-out watcher
        loses its turn").  A timer left out comes first at the next wait (php-src's
        poll_timer_handle_with_stream.phpt), so a wait that left timers out puts fds first
        only after one more wait of timers alone: fds then get one wait in three at worst.
        """
        timers = self._timers
        fds_first, self._fds_first = self._fds_first, False
        timers_took_all, self._timers_took_all = self._timers_took_all, False
        if timers:
            if fds_first:
                ready = self._poll_watchers(mechanism, 0.0, limit) if self._watchers else []
                if len(ready) < limit:
                    ready += timers.take_due(limit - len(ready))
                if ready:
                    return ready
            due = timers.take_due(limit)
            if due:
                if len(due) < limit:
                    if self._watchers:
                        taken = timers.taken
                        try:
                            due += self._poll_watchers(mechanism, 0.0, limit - len(due))
                        except BaseException:  # a stream's pending(), a probe, a handler
                            timers.give_back(due, taken)
                            self._refresh_fast_path()  # the first deadline moved back
                            raise
                elif self._watchers:  # every slot went to timers
                    if timers_took_all or timers.seconds_to_next() != 0.0:  # or none left out
                        self._fds_first = True
                    else:
                        self._timers_took_all = True  # the left-out timers go first next
                return due
            first = timers.seconds_to_next()
            if first is not None and (seconds < 0 or first < seconds):
                seconds = first
        if not self._watchers:
            # Nothing else can become ready: PHP returns at once for "no timeout", and sleeps
            # out a finite one (in chunks: time.sleep() overflows on absurd values).
            if seconds > 0:
                time.sleep(min(seconds, mechanism.max_timeout))
            return []
        return self._poll_watchers(mechanism, seconds, limit)

    def _poll_watchers(self, mechanism: Mechanism, seconds: float, limit: int) -> list[Watcher]:
        """One poll of the OS, merged with what is ready without it, as watchers.

        Watchers whose stream holds buffered bytes and reports left over from the last
        ``max_events`` cut are ready already: the OS is then only asked what else is.
        """
        buffered = self._buffered_watchers() if self._buffered else []
        leftovers = self._leftovers
        if buffered or any(leftovers.values()):
            seconds = 0.0
        raw = self._poll(mechanism, seconds)
        if buffered:
            return self._merge_buffered(mechanism, raw, buffered, limit)
        if leftovers:
            raw = self._leftovers_first(raw)
        return self._collect_all(mechanism, raw, limit) if raw else []

    def _poll(self, mechanism: Mechanism, seconds: float) -> list[tuple[int, int]]:
        """Ask the OS once, for every ready fd, for no longer than one call of it can wait.

        Every poll of the OS but the fast path's goes through here.  The batch has room for
        every registration, the stale kernel entries included (they report like the watchers
        they were), so the ``max_events`` cut is always the Context's, never the OS's: the
        Context can only give a left-out watcher its turn (SPEC 4) if it saw it left out.
        epoll's own rotation does not do it: a level fd stays on its ready list until a later
        epoll_wait() scans it, so an fd that was ready once and drained in between keeps its
        place ahead of one a short batch left out, and a batch of ``limit`` can pass over a
        left-out fd altogether.
        """
        # epoll and kqueue allocate their result array per call: ask for no more than can be
        # ready.  (-1 would mean epoll's default of FD_SETSIZE - 1, not "as many as ready".)
        batch = max(len(self._watchers) + len(self._stale_fds), 1)
        try:
            if seconds < 0:
                raw = self._poll_forever(mechanism.poll, batch)
            else:
                raw = mechanism.poll(min(seconds, mechanism.max_timeout), batch)
        except OSError as exc:
            if self._usable is mechanism or not raised_by_backend(exc, type(mechanism)):
                self._poll_failed(exc)  # a handler's own exception leaves as it is
            raw = []  # the retry on an object a handler closed failed: as below
        if self._usable is not mechanism:
            # A signal handler closed the Context, or made it replace its OS object, while
            # the poll waited (poll and select retry with what they were given, or fail on
            # it closed): closed, that is what the wait says; else the caller's loop waits
            # on the new object for the time that is left, as PEP 475 would.
            self._usable_mechanism(FailedPollWaitError)
            return []
        return raw

    def _poll_forever(
        self, poll: Callable[[float, int], list[tuple[int, int]]], batch: int
    ) -> list[tuple[int, int]]:
        """``poll`` with no timeout, unless nothing is left that could end it.

        What is ready now is asked first, without blocking; only when nothing is does the
        Context check that a watcher can still wake it (``_can_be_woken``) before the OS
        wait that blocks.  An event loop mostly finds something ready: that first call is
        then the whole wait.  (An int 0, which CPython's select objects convert for less
        than a float: about half of what asking first costs in pure Python.)
        """
        return poll(0, batch) or (poll(FOREVER, batch) if self._can_be_woken() else [])

    def _poll_failed(self, exc: OSError) -> NoReturn:
        """Raise what ``wait()`` raises for ``exc``, which the mechanism's poll raised."""
        mechanism = self._mechanism
        # Closed meanwhile (by a signal handler), the Context has no mechanism: its class
        # is the backend's.
        kind = type(mechanism) if mechanism is not None else self._backend._mechanism_class()
        if not raised_by_backend(exc, kind):
            raise exc  # a signal handler's exception leaves wait() unchanged (PEP 475)
        if self._usable is None:
            # A signal handler closed the Context while the poll waited, or forked, and the
            # retry failed on the closed OS object, or in the child on one it did not
            # inherit (a kqueue): the wait is a closed Context's, or a child's (SPEC 4).
            self._raise_unusable(FailedPollWaitError, exc)
        raise self._failure(FailedPollWaitError, "Poll wait failed", exc) from exc

    def _collect_all(
        self, mechanism: Mechanism, raw: list[tuple[int, int]], limit: int
    ) -> list[Watcher]:
        """``_collect``, then as many more polls as reports about no live watcher cost.

        A stale kernel entry or a closed stream's report takes a slot of the batch the OS
        was asked for, and is dropped here: the watchers it crowded out are still ready and
        must come out of this same wait (SPEC 4).  So the OS is asked again, at once, for
        the room that is left.  Each round drops a dead watcher or rebuilds away a stale
        entry, so the loop ends (it stops as soon as a round changed neither); it runs only
        after a stream was closed without remove().
        """
        ready: list[Watcher] = []
        while True:
            watching = len(self._watchers)
            try:
                found = self._collect(mechanism, raw, limit - len(ready))
            except FailedPollWaitError:
                if ready:
                    return ready  # a rebuild was refused: the next wait tries it again
                # Refused, and the batch (the fast path's: one slot per watcher) held only
                # stale reports.  One more poll, with room for them, finds what they hid;
                # with nothing there either, the refusal is the answer.
                return self._collect(mechanism, self._poll(mechanism, 0.0), limit)
            ready += found
            if len(found) == len(raw) or len(ready) >= limit:
                return ready  # nothing was dropped, or there is no room left
            usable = self._usable  # _collect may have rebuilt the OS object
            if usable is None or (usable is mechanism and len(self._watchers) == watching):
                return ready
            mechanism = usable
            reported = {watcher._fd for watcher in ready}
            more = self._poll(mechanism, 0.0)
            if self._leftovers:  # a rebuild kept what the old object held: it goes first
                more = self._leftovers_first(more)
            raw = [pair for pair in more if pair[0] not in reported]
            if not raw:
                return ready

    def _collect(
        self, mechanism: Mechanism, raw: list[tuple[int, int]], limit: int
    ) -> list[Watcher]:
        """Turn the OS's ``(fd, bits)`` pairs into watchers, updating their state.

        Every case is handled here: registrations with no watcher, closed streams, POLLNVAL,
        one-shots and the ``max_events`` cut.  ``wait()`` inlines the common case and falls
        back to this.  It allocates only the list it returns.
        """
        watchers = self._watchers
        decode = mechanism.decode
        invalid_fd_bit = mechanism.invalid_fd_bit
        # The OS was asked for every ready fd (_poll; the fast path has no limit): the
        # max_events cut is made here.
        cut = len(raw) > limit
        ready: list[Watcher] = []
        found_stale = False
        for fd, bits in raw:
            try:
                watcher = watchers[fd]
            except KeyError:
                # No watcher, yet the OS reports it: a registration we could not delete.
                found_stale = True
                continue
            if not watcher._stream_open():
                # Its stream was closed; the report came from a dup or a reused fd number.
                self._retire(watcher)
                found_stale = found_stale or fd in self._stale_fds
                continue
            if cut and len(ready) == limit:
                self._leftovers[fd] = self._kept_bits(mechanism, watcher, bits)
                continue
            if bits & invalid_fd_bit:
                # Closed behind the handle's back (POLLNVAL): report it this once only.
                watcher._triggered = Event.ERROR
                self._retire(watcher)
            else:
                if not watcher._kind:
                    watcher._triggered = decode_bits(decode, bits)
                elif watcher._handle._take():  # type: ignore[attr-defined]
                    # A handle that is not a stream: its own event alone (SPEC 10).
                    watcher._triggered = watcher._kind
                else:
                    # Nothing after all (another handle took the signal first).
                    if watcher._oneshot and mechanism.disarms_reported_oneshots:
                        self._rearm(mechanism, watcher)  # the OS disarmed it for nothing
                    continue
                if watcher._oneshot:
                    watcher._armed = False
                    if not mechanism.disarms_reported_oneshots:
                        mechanism.disarm(fd)
            ready.append(watcher)
        if found_stale:
            try:
                self._rebuild()
            except OSError as exc:  # no fd left for a new epoll object (EMFILE)
                if not ready:
                    raise self._failure(FailedPollWaitError, "Poll wait failed", exc) from exc
                # What is ready goes out now; the stale entry reports again, and the next
                # wait tries the rebuild again.
        return ready

    @staticmethod
    def _rearm(mechanism: Mechanism, watcher: Watcher) -> None:
        try:
            mechanism.modify(watcher._fd, os_events(watcher._events))
        except (OSError, Refusal):
            pass  # it stays disarmed; a modify() by its owner re-arms it

    @staticmethod
    def _kept_bits(mechanism: Mechanism, watcher: Watcher, bits: int) -> int:
        # A level report comes back from the OS by itself; an edge, a one-shot the OS
        # already disarmed, or an invalid fd (reported once) would be lost: keep their bits.
        if (
            watcher._events & Event.EDGE_TRIGGERED
            or bits & mechanism.invalid_fd_bit
            or (watcher._oneshot and mechanism.disarms_reported_oneshots)
        ):
            return bits
        return 0

    def _merge_buffered(
        self, mechanism: Mechanism, raw: list[tuple[int, int]], buffered: list[Watcher], limit: int
    ) -> list[Watcher]:
        """Merge the OS's reports with buffered watchers (READ without the OS).

        One entry per watcher.  Both kinds share the ``max_events`` slots, and what was
        left out last time goes first, in the order it was left out, so nothing starves.
        """
        previous = list(self._leftovers)
        if self._leftovers:
            raw = self._leftovers_first(raw)
        bits_of = dict(raw)
        pending = {watcher._fd: watcher for watcher in buffered}
        order = [fd for fd in previous if fd in bits_of or fd in pending]
        seen = set(order)
        order += [fd for fd, _ in raw if fd not in seen]
        order += [fd for fd in pending if fd not in seen and fd not in bits_of]
        # Reports with no live watcher take no slot: _collect drops them (and rebuilds).
        watchers = self._watchers
        dead = {
            fd
            for fd in bits_of
            if fd not in pending and (fd not in watchers or not watchers[fd]._stream_open())
        }
        if dead:
            order = [fd for fd in order if fd not in dead]
        chosen, cut = order[:limit], order[limit:]
        chosen_raw = [(fd, bits_of[fd]) for fd in chosen if fd in bits_of]
        cut_raw = [(fd, bits_of[fd]) for fd in cut if fd in bits_of]
        dead_raw = [(fd, bits_of[fd]) for fd in dead]
        ready = (
            self._collect(mechanism, dead_raw + chosen_raw + cut_raw, len(chosen_raw))
            if raw
            else []
        )
        kept = self._leftovers
        self._leftovers = {fd: kept.get(fd, 0) for fd in cut if fd in kept or fd in pending}
        read = Event.READ
        for watcher in ready:
            if pending.get(watcher._fd) is watcher:
                watcher._triggered |= read
        for fd in chosen:
            if fd in bits_of:
                continue
            watcher = pending[fd]
            watcher._triggered = read
            if watcher._oneshot:
                watcher._armed = False
                usable = self._usable  # _collect above may have rebuilt the OS object
                if usable is not None:
                    usable.disarm(fd)
            ready.append(watcher)
        return ready

    def _buffered_watchers(self) -> list[Watcher]:
        """Level ``READ`` watchers whose stream holds bytes the fd no longer shows."""
        found = []
        for watcher in list(self._buffered.values()):
            if not watcher._armed or watcher._events & Event.EDGE_TRIGGERED:
                continue
            if not watcher._events & Event.READ:
                continue
            if not watcher._stream_open():
                self._retire(watcher)
                continue
            stream: Any = getattr(watcher._handle, "stream", None)
            try:
                pending = stream.pending()
            except (OSError, ValueError):
                continue
            if pending > 0:
                found.append(watcher)
        return found

    def _leftovers_first(self, raw: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Put what ``max_events`` cut last time ahead of the rest, so nothing starves."""
        reported = dict(raw)
        ordered = []
        for fd, kept in self._leftovers.items():
            bits = reported.pop(fd, 0) | kept
            if bits:
                ordered.append((fd, bits))
        self._leftovers = {}
        ordered.extend(reported.items())
        return ordered

