"""Backend enum: availability, AUTO resolution, supports_*() (SPEC 2).

Also the names of SPEC 1: kinds of the public classes, enums and the exception hierarchy.
"""

from __future__ import annotations

import enum
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ..support import Capabilities

_EVENT_NAMES = [
    "READ",
    "WRITE",
    "ERROR",
    "HANGUP",
    "READ_HANGUP",
    "ONESHOT",
    "EDGE_TRIGGERED",
    "PRIORITY",
    "TIMER",
    "NOTIFY",
    "SIGNAL",
    "PROCESS",
]
_BACKEND_NAMES = ["AUTO", "POLL", "EPOLL", "KQUEUE", "EVENT_PORTS", "WSAPOLL", "SELECT"]
_ERROR_CODES = {
    "NONE": 0,
    "SYSTEM": 1,
    "NOMEM": 2,
    "INVALID": 3,
    "EXISTS": 4,
    "NOTFOUND": 5,
    "TIMEOUT": 6,
    "INTERRUPTED": 7,
    "PERMISSION": 8,
    "TOOBIG": 9,
    "AGAIN": 10,
    "NOSUPPORT": 11,
}
_FAILED_OPERATIONS = [
    "FailedContextInitializationError",
    "FailedHandleAddError",
    "FailedWatcherModificationError",
    "FailedPollWaitError",
]
_OTHER_ERRORS = [
    "BackendUnavailableError",
    "InactiveWatcherError",
    "HandleAlreadyWatchedError",
    "InvalidHandleError",
]
_SUPPORTS = [
    "supports_edge_triggering",
    "supports_priority",
    "supports_signal_handles",
    "supports_process_handles",
]


def _resolution_order(api: ModuleType) -> list[Any]:
    """SPEC 2: EVENT_PORTS, KQUEUE, EPOLL, then POLL (POSIX) or WSAPOLL (Windows), SELECT."""
    middle = "WSAPOLL" if sys.platform == "win32" else "POLL"
    return [api.Backend[name] for name in ("EVENT_PORTS", "KQUEUE", "EPOLL", middle, "SELECT")]


class BackendRules:
    """Backend enum: availability, AUTO resolution, supports_*() (SPEC 2)."""

    # -- SPEC 1: names -----------------------------------------------------------------

    def test_spec_1_classes_exist(self, api: ModuleType) -> None:
        """SPEC 1: Context, Watcher, Handle, StreamPollHandle are classes; Handle is abstract."""
        for name in ("Context", "Watcher", "Handle", "StreamPollHandle"):
            assert inspect.isclass(getattr(api, name)), name
        assert inspect.isabstract(api.Handle)
        assert issubclass(api.StreamPollHandle, api.Handle)
        assert not inspect.isabstract(api.StreamPollHandle)

    def test_spec_1_event_is_intflag_in_order(self, api: ModuleType) -> None:
        """SPEC 1: Event is an IntFlag with its members in the documented order, each a flag
        of its own (one bit, shared with no other member)."""
        assert issubclass(api.Event, enum.IntFlag)
        assert list(api.Event.__members__) == _EVENT_NAMES
        values = [api.Event[name].value for name in _EVENT_NAMES]
        assert all(value > 0 and value & (value - 1) == 0 for value in values), values
        assert len(set(values)) == len(values)

    def test_spec_1_backend_members(self, api: ModuleType) -> None:
        """SPEC 1: Backend is an Enum: AUTO, POLL, EPOLL, KQUEUE, EVENT_PORTS, WSAPOLL, SELECT."""
        assert issubclass(api.Backend, enum.Enum)
        assert list(api.Backend.__members__) == _BACKEND_NAMES

    def test_spec_1_error_code_values(self, api: ModuleType) -> None:
        """SPEC 1: ErrorCode is an IntEnum with the values of PHP's ERROR_* constants."""
        assert issubclass(api.ErrorCode, enum.IntEnum)
        assert {m.name: m.value for m in api.ErrorCode} == _ERROR_CODES
        assert list(api.ErrorCode.__members__) == list(_ERROR_CODES)

    def test_spec_1_exception_hierarchy(self, api: ModuleType) -> None:
        """SPEC 1: PollError roots every error; FailedPollOperationError is also an OSError."""
        assert issubclass(api.PollError, Exception)
        assert issubclass(api.FailedPollOperationError, api.PollError)
        assert issubclass(api.FailedPollOperationError, OSError)
        for name in _FAILED_OPERATIONS:
            cls = getattr(api, name)
            assert issubclass(cls, api.FailedPollOperationError), name
        for name in _OTHER_ERRORS:
            assert issubclass(getattr(api, name), api.PollError), name

    def test_spec_1_failed_operation_has_code_and_errno(
        self,
        api: ModuleType,
        backend: Any,
        caps: Capabilities,
        ctx: Any,
        pair: tuple[Any, Any],
        tmp_path: Path,
    ) -> None:
        """SPEC 1: a real FailedPollOperationError carries .code (ErrorCode) and .errno
        (an int or None)."""
        if not backend.supports_edge_triggering():
            # Refused by the implementation itself: no system call.
            with pytest.raises(api.FailedHandleAddError) as info:
                ctx.add(pair[0], api.Event.READ | api.Event.EDGE_TRIGGERED)
        elif not caps.regular_files:
            # Refused by the OS (epoll: EPERM for a regular file).
            with (
                open(tmp_path / "f", "wb") as regular,
                pytest.raises(api.FailedHandleAddError) as info,
            ):
                ctx.add(regular, api.Event.READ)
        else:
            pytest.skip("no refusal to provoke on this backend")
        exc: Any = info.value
        assert isinstance(info.value, OSError)
        assert exc.errno is None or isinstance(exc.errno, int)
        assert isinstance(exc.code, api.ErrorCode)
        assert exc.code == api.ErrorCode.NOSUPPORT

    # -- SPEC 2: availability -------------------------------------------------------------

    def test_poll_backend_getAvailableBackends(self, api: ModuleType) -> None:
        """B.3, php-src poll_backend_getAvailableBackends.phpt: concrete, declaration order."""
        available = api.Backend.available_backends()
        assert isinstance(available, list)
        assert available, "at least one backend must be available"
        assert api.Backend.AUTO not in available
        assert all(isinstance(member, api.Backend) for member in available)
        declared = list(api.Backend)
        assert available == [member for member in declared if member in available]
        assert len(set(available)) == len(available)

    def test_spec_2_is_available_matches_available_backends(self, api: ModuleType) -> None:
        """SPEC 2: is_available() is true exactly for AUTO and the available backends."""
        available = api.Backend.available_backends()
        for member in api.Backend:
            expected = member is api.Backend.AUTO or member in available
            assert member.is_available() is expected, member

    def test_poll_ctx_backend_unix_auto_resolution(self, api: ModuleType) -> None:
        """B.1, php-src poll_ctx_backend_unix.phpt: AUTO picks the first available in order."""
        available = api.Backend.available_backends()
        expected = next(member for member in _resolution_order(api) if member in available)
        with api.Context(api.Backend.AUTO) as ctx:
            assert ctx.backend is expected
        with api.Context() as ctx:
            assert ctx.backend is expected

    def test_poll_stream_backend_name_unix(self, api: ModuleType, backend: Any, ctx: Any) -> None:
        """B.4, php-src poll_stream_backend_name_unix.phpt: ctx.backend is the concrete member."""
        assert ctx.backend is backend
        assert ctx.backend is not api.Backend.AUTO
        assert ctx.backend.name == backend.name

    def test_poll_ctx_backend_unix_unavailable(self, api: ModuleType) -> None:
        """B.2, php-src poll_ctx_backend_unix.phpt: an unavailable backend is refused by name."""
        missing = [m for m in api.Backend if not m.is_available()]
        if not missing:
            pytest.skip("every backend is available here")
        for member in missing:
            with pytest.raises(api.BackendUnavailableError) as info:
                api.Context(member)
            assert member.name in str(info.value), str(info.value)

    # -- SPEC 2: supports_*() -----------------------------------------------------------

    def test_spec_2_supports_return_bool(self, api: ModuleType) -> None:
        """SPEC 2: every supports_*() returns a bool for every member."""
        for member in api.Backend:
            for name in _SUPPORTS:
                assert type(getattr(member, name)()) is bool, (member, name)

    def test_spec_2_supports_false_when_unavailable(self, api: ModuleType) -> None:
        """SPEC 2: every supports_*() is false for a backend not available here."""
        for member in api.Backend:
            if member.is_available():
                continue
            for name in _SUPPORTS:
                assert getattr(member, name)() is False, (member, name)

    def test_spec_2_auto_supports_like_resolved(self, api: ModuleType) -> None:
        """B.6: AUTO's supports_*() answers are those of the backend it resolves to."""
        with api.Context(api.Backend.AUTO) as ctx:
            resolved = ctx.backend
        for name in _SUPPORTS:
            assert getattr(api.Backend.AUTO, name)() is getattr(resolved, name)(), name

    def test_poll_stream_sock_rw_single_edge_support(self, api: ModuleType, backend: Any) -> None:
        """B.5, php-src poll_stream_sock_rw_single_edge.phpt: ET only on EPOLL and KQUEUE."""
        expected = backend.name in ("EPOLL", "KQUEUE")
        assert backend.supports_edge_triggering() is expected

    def test_poll_backend_supportsPriority(self, api: ModuleType, backend: Any) -> None:
        """B.6, php-src poll_backend_supportsPriority.phpt, SPEC 2: never on KQUEUE or WSAPOLL,
        always on EPOLL and EVENT_PORTS, on POLL everywhere but macOS."""
        if backend.name in ("KQUEUE", "WSAPOLL"):
            assert backend.supports_priority() is False
        elif backend.name in ("EPOLL", "EVENT_PORTS"):
            assert backend.supports_priority() is True
        elif backend.name == "POLL":
            assert backend.supports_priority() is (sys.platform != "darwin")

    def test_spec_2_supports_consistent_with_add(
        self, api: ModuleType, backend: Any, ctx: Any, pair: tuple[Any, Any]
    ) -> None:
        """SPEC 2, 6.2, 6.5: add accepts EDGE_TRIGGERED exactly where
        supports_edge_triggering() says so (NOSUPPORT elsewhere), and PRIORITY where
        supports_priority() does."""
        for flag, supported in (
            (api.Event.EDGE_TRIGGERED, backend.supports_edge_triggering()),
            (api.Event.PRIORITY, backend.supports_priority()),
        ):
            if supported:
                watcher = ctx.add(pair[0], api.Event.READ | flag)
                assert watcher.watched_events & flag
                watcher.remove()
            elif flag == api.Event.EDGE_TRIGGERED:
                # PRIORITY where unsupported is a strict extra (SPEC states no refusal).
                with pytest.raises(api.FailedHandleAddError) as info:
                    ctx.add(pair[0], api.Event.READ | flag)
                assert info.value.code == api.ErrorCode.NOSUPPORT
