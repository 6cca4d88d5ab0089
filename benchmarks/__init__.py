"""rieszflow's benchmarks: timed comparisons with peers, reported as ratios measured in one run.

Not part of the installed package (``pyproject.toml`` ships ``rieszflow`` only); importable as
``benchmarks`` from a source checkout. ``python -m benchmarks`` (or ``rieszflow bench``) runs the
suite of :mod:`benchmarks.suite`; each ``bench_*.py`` also runs alone as a script.
"""
