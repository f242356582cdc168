"""Callback ids: introspection (``is_enabled()``, ``get_type()``, ``get_identifiers()``,
``debug_info()``) and ids that are unknown or no longer valid.
"""

from __future__ import annotations

import pytest

from iopoll.loop import CallbackType, Driver, InvalidCallbackError

from .harness import DriverHarness


class IdentifierRules(DriverHarness):
    """Callback ids: introspection (``is_enabled()``, ``get_type()``, ``get_identifiers()``,
    ``debug_info()``) and ids that are unknown or no longer valid.
    """

    # -- introspection ------------------------------------------------------------------------

    @pytest.mark.parametrize("kind", ["defer", "delay", "repeat", "writable", "readable", "signal"])
    def test_is_referenced_and_is_enabled(self, loop: Driver, kind: str) -> None:
        callback_id = self.registrations(loop)[kind](loop, lambda cid, *r: None)
        assert loop.is_enabled(callback_id) and loop.is_referenced(callback_id)
        loop.unreference(callback_id)
        assert not loop.is_referenced(callback_id)
        loop.reference(callback_id)
        assert loop.is_referenced(callback_id)
        loop.disable(callback_id)
        assert not loop.is_enabled(callback_id)
        loop.disable(callback_id)  # twice: no side effect
        loop.enable(callback_id)
        loop.enable(callback_id)  # already enabled: no side effect
        assert loop.is_enabled(callback_id)
        assert (
            loop.get_type(callback_id)
            is {
                "defer": CallbackType.DEFER,
                "delay": CallbackType.DELAY,
                "repeat": CallbackType.REPEAT,
                "writable": CallbackType.WRITABLE,
                "readable": CallbackType.READABLE,
                "signal": CallbackType.SIGNAL,
            }[kind]
        )
        loop.cancel(callback_id)
        with pytest.raises(InvalidCallbackError):
            loop.is_enabled(callback_id)

    def test_get_identifiers(self, loop: Driver) -> None:
        first = loop.defer(lambda cid: None)
        second = loop.disable(loop.delay(1, lambda cid: None))
        assert loop.get_identifiers() == [first, second]
        loop.cancel(first)
        assert loop.get_identifiers() == [second]
        third = loop.defer(lambda cid: None)
        assert loop.get_identifiers() == [second, third]
        assert all(isinstance(cid, str) for cid in loop.get_identifiers())
        assert len({first, second, third}) == 3

    def test_get_identifiers_keeps_the_order_of_registration(self, loop: Driver) -> None:
        """Every kind, with calls by id in between and a defer enabled again: the order in
        which the callbacks were registered, whatever the driver indexes when."""
        registrations = self.registrations(loop)
        made = []
        kinds = ["defer", "readable", "delay", "signal", "defer", "repeat", "writable", "delay"]
        for number, kind in enumerate(kinds):
            made.append(registrations[kind](loop, lambda cid, *rest: None))
            if number == 2:
                assert loop.is_enabled(made[0])
        assert loop.get_identifiers() == made
        loop.enable(loop.disable(made[0]))  # a defer enabled again keeps its place
        made.append(loop.defer(lambda cid: None))
        assert loop.get_identifiers() == made
        for callback_id in made:
            loop.cancel(callback_id)
        assert loop.get_identifiers() == []

    def test_get_identifiers_leaves_out_what_ran(self, loop: Driver) -> None:
        """A defer's or a delay's id is gone from the list from its own call on, among
        hundreds that ran before it in the same tick (the defers run before the timers)."""
        seen: list[list[str]] = []
        delays = []
        for _ in range(300):
            loop.defer(lambda cid: None)
            delays.append(loop.delay(0, lambda cid: None))
        loop.defer(lambda cid: seen.append(loop.get_identifiers()))
        timer = loop.delay(0, lambda cid: seen.append(loop.get_identifiers()))
        pending = loop.unreference(loop.delay(60, lambda cid: None))
        loop.run()
        assert seen == [[*delays, timer, pending], [pending]]

    def test_debug_info(self, loop: Driver) -> None:
        callback_id = loop.unreference(loop.delay(1, lambda cid: None))
        assert loop.debug_info() == {
            callback_id: {"type": CallbackType.DELAY, "enabled": True, "referenced": False}
        }

    # -- invalid ids ----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "method", ["enable", "reference", "get_type", "is_enabled", "is_referenced"]
    )
    def test_unknown_id_raises(self, loop: Driver, method: str) -> None:
        with pytest.raises(InvalidCallbackError, match="nope") as info:
            getattr(loop, method)("nope")
        assert info.value.callback_id == "nope"
        assert info.value.code == InvalidCallbackError.INVALID_IDENTIFIER

    def test_unknown_id_is_ignored(self, loop: Driver) -> None:
        assert loop.disable("nope") == "nope"
        assert loop.unreference("nope") == "nope"
        assert loop.cancel("nope") is None

    @pytest.mark.parametrize("kind", ["defer", "delay"])
    def test_one_shot_id_is_dead_in_its_callback(self, loop: Driver, kind: str) -> None:
        errors: list[InvalidCallbackError] = []

        def fn(cid: str) -> None:
            assert cid not in loop.get_identifiers()
            try:
                loop.enable(cid)
            except InvalidCallbackError as error:
                errors.append(error)

        self.registrations(loop)[kind](loop, fn)
        loop.run()
        assert len(errors) == 1

    def test_the_ids_of_many_live_callbacks_are_distinct(self, loop: Driver) -> None:
        ids = [loop.defer(lambda cid: None) for _ in range(2000)]
        assert len(set(ids)) == len(ids)
        assert loop.get_identifiers() == ids
