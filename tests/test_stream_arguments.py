"""What ``add()`` and ``StreamPollHandle`` take as a stream, beyond the suite's rules.

The conformance suite checks that an object without ``fileno`` is refused (SPEC 3-4).  The
test is ``has_fileno()``, one ``getattr`` where a runtime-checkable ``isinstance()`` cost about
10 us on CPython 3.10 and 3.11; these pin the cases where the two could differ.
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import Any

import pytest

import iopoll
import iopoll_polyfill.fallback

APIS = [iopoll, iopoll_polyfill.fallback]


class FilenoIsNone:
    """A class that blocks ``fileno`` the way ``__hash__ = None`` blocks hashing."""

    fileno = None


class Proxy:
    """A wrapper that hands every attribute on to the object it wraps."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class FilenoIsAnInt:
    """A class whose ``fileno`` is a number, not a method: calling it would be a TypeError
    that names no argument."""

    fileno = 3


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.__name__)
@pytest.mark.parametrize("kind", [FilenoIsNone, FilenoIsAnInt], ids=lambda kind: kind.__name__)
def test_a_fileno_that_cannot_be_called_is_refused_and_nothing_is_added(
    api: ModuleType, kind: type
) -> None:
    name = kind.__name__
    ctx = api.Context()
    with pytest.raises(TypeError, match=rf"^handle must be .*not {name}$"):
        ctx.add(kind(), api.Event.READ)
    with pytest.raises(TypeError, match=rf"^stream must be .*not {name}$"):
        api.StreamPollHandle(kind())
    with pytest.raises(TypeError, match=rf"^stream must be .*not {name}$"):
        api.StreamPollWeakHandle.create(kind())
    assert len(ctx) == 0


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.__name__)
def test_a_proxy_whose_fileno_comes_from_getattr_is_watched(api: ModuleType) -> None:
    left, right = socket.socketpair()
    with left, right:
        ctx = api.Context()
        proxy = Proxy(left)
        watcher = ctx.add(proxy, api.Event.READ, data="proxied")
        assert watcher.handle.stream is proxy
        right.send(b"x")
        ready = ctx.wait(1)
        assert [(w.data, w.triggered_events) for w in ready] == [("proxied", api.Event.READ)]


@pytest.mark.parametrize("kind", [FilenoIsNone, FilenoIsAnInt], ids=lambda kind: kind.__name__)
def test_the_loop_refuses_a_fileno_that_cannot_be_called_by_name(kind: type) -> None:
    from iopoll.loop import IoPollDriver, SelectorsDriver
    from iopoll.loop._iopoll_driver import PyIoPollDriver

    for make in (IoPollDriver, PyIoPollDriver, SelectorsDriver):
        driver = make()
        try:
            for watch in (driver.on_readable, driver.on_writable):
                with pytest.raises(TypeError, match=rf"^stream must .*not {kind.__name__}$"):
                    watch(kind(), lambda callback_id, stream: None)
            assert driver.get_identifiers() == []
        finally:
            driver.close()  # type: ignore[attr-defined]


def test_the_loop_refuses_an_unhashable_callback_id_by_name() -> None:
    # Ids are strings (SPEC 9.1): an unknown one is InvalidCallbackError, and one that no
    # id can be (unhashable) a TypeError that names callback_id, not "unhashable type".
    from iopoll.loop import IoPollDriver, SelectorsDriver, TracingDriver
    from iopoll.loop._iopoll_driver import PyIoPollDriver

    drivers = (IoPollDriver(), PyIoPollDriver(), SelectorsDriver(), TracingDriver(IoPollDriver()))
    methods = ("enable", "disable", "cancel", "reference", "unreference", "get_type")
    for driver in drivers:
        kept = driver.defer(lambda callback_id: None)
        for method in (*methods, "is_enabled", "is_referenced"):
            with pytest.raises(TypeError, match=r"^callback_id must be a str, not list$"):
                getattr(driver, method)([])
        assert driver.get_identifiers() == [kept]
        driver.cancel(kept)
        driver.close()  # type: ignore[attr-defined]
