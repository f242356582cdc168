"""Deliberately broken implementations of the iopoll API, to prove the conformance suite fails.

Each module is a thin wrapper over :mod:`iopoll`: it re-exports every name of SPEC section 1
and replaces ``Context`` with a subclass that breaks exactly one rule (its docstring says
which).  ``unbroken`` wraps without breaking anything: the suite must pass on it.
``tests/test_conformance_catches_broken.py`` runs the suite against each one.
"""
