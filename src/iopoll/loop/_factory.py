"""``DriverFactory``: picks the driver, honouring ``IOPOLL_LOOP_DRIVER`` and ``..._DEBUG_TRACE``."""

from __future__ import annotations

import importlib
import inspect
import os

from ._interface import Driver

__all__ = ["DriverFactory"]

DRIVER_VARIABLE = "IOPOLL_LOOP_DRIVER"
TRACE_VARIABLE = "IOPOLL_LOOP_DEBUG_TRACE"


class DriverFactory:
    """Makes the driver a thread gets from ``get_driver()``.

    ``IOPOLL_LOOP_DRIVER=package.module:Class`` names the class to use (a ``Driver``
    subclass, made without arguments); otherwise ``IoPollDriver``, on the best backend
    here, the select one included (``SelectorsDriver``, the standard library's selectors,
    never sees bytes an ``ssl.SSLSocket`` holds).  ``IOPOLL_LOOP_DEBUG_TRACE=1`` wraps the
    driver in ``TracingDriver`` (empty, ``0``, ``false``, ``no`` or ``off``, in any case,
    leave it off).  Spaces around either value are ignored.
    """

    def create(self) -> Driver:
        """A new driver, as the environment asks."""
        name = os.environ.get(DRIVER_VARIABLE, "").strip()
        driver = self._named(name) if name else self._default()
        trace = os.environ.get(TRACE_VARIABLE, "").strip().lower()
        if trace not in ("", "0", "false", "no", "off"):
            from ._tracing import TracingDriver

            driver = TracingDriver(driver)
        return driver

    @staticmethod
    def _default() -> Driver:
        from ._iopoll_driver import IoPollDriver

        return IoPollDriver()

    @staticmethod
    def _named(name: str) -> Driver:
        module_name, colon, class_name = name.partition(":")
        if not colon or not module_name or not class_name:
            raise ValueError(
                f"{DRIVER_VARIABLE}={name!r} must have the form package.module:Class"
            )
        try:
            module = importlib.import_module(module_name)
            cls = getattr(module, class_name)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"{DRIVER_VARIABLE}={name!r} does not name a class: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Driver)) or inspect.isabstract(cls):
            raise ValueError(
                f"{DRIVER_VARIABLE}={name!r} does not name a concrete Driver subclass"
            )
        try:
            inspect.signature(cls).bind()
        except TypeError as exc:  # a class that needs arguments (TracingDriver: a driver)
            raise ValueError(
                f"{DRIVER_VARIABLE}={name!r} names a class that cannot be made without "
                f"arguments: {exc}"
            ) from exc
        except ValueError:
            pass  # no signature to read (a class made in C): its constructor will say
        driver: Driver = cls()  # its own errors, a TypeError among them, are its own
        return driver
