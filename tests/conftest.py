"""Test configuration: pin BLAS and Numba threads so results do not depend on a noisy machine."""
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "2")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("FIPY_SOLVERS", "scipy")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

try:  # limit BLAS pools that were already created by an earlier import
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
except ImportError:  # pragma: no cover
    pass


@pytest.fixture
def rng():
    """A seeded NumPy generator; every stochastic test starts from it."""
    return np.random.default_rng(20261122)
