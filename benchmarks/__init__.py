"""The kit's benchmark commands (a regular package, so that a dependency's own top-level ``benchmarks`` package, which
pysbd installs, cannot shadow ``python -m benchmarks.perf``)."""
