"""Benchmarks for iopoll: ``python -m benchmarks.roundtrip`` and ``python -m benchmarks.memory``.

See ``docs/benchmarks.md`` for what each one measures and how to read its table.
"""
