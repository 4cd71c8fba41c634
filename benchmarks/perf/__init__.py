"""Performance benchmarks, one module per subcommand (``overhead``, ``indexing``, ``sparse``, ``concurrency``,
``startup``, ``add``), each documenting its method in its docstring; run ``python -m benchmarks.perf COMMAND``
(the command line is in ``__main__``)."""
