"""T15 of the infinite-width acceptance tests at the spec's full size (docs/specs/paper002_infinite_width.md).

Its own module (the reduced T15 and every other test are in tests/test_infinite_width.py), so the
two pytest workers of ``make test-full`` (``--dist loadscope``: one module per worker) can run it
beside the rest: it is the longest test of the suite (about 140 s for the ReLU case). Marked
``full_size``: ``make test`` runs the reduced T15 only.

Reference: M. Sakai, R. Karakida, M. Imaizumi, "Infinite-Width Limit of a Single Attention Layer:
Analysis via Tensor Programs", arXiv:2506.00846.
"""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from rieszflow.theory.infinite_width import kl_rao_blackwell, sample_finite_reduced, sample_limit
from test_infinite_width import E1_N, T15_REF, rng


@pytest.fixture(autouse=True)
def _one_thread():
    with threadpool_limits(1):
        yield


@pytest.mark.full_size
@pytest.mark.parametrize("name", ["s8", "relu"])
def test_T15_full(name):
    spec, kl_ref, tau_ref, N = T15_REF[name]
    kl = np.zeros((10, 4))
    for t in range(10):
        lim = sample_limit(spec, N, rng(115, len(name), t))["sigma2"]
        for i, n in enumerate(E1_N):
            tau = sample_finite_reduced(spec, n, N, rng(115, len(name), t, n))["tau2"]
            kl[t, i] = kl_rao_blackwell(tau, lim)
            if t == 0:
                assert abs(tau.mean() - tau_ref[i]) < 0.003
    for v, ref in zip(kl.mean(axis=0), kl_ref):
        assert abs(v / ref - 1) < 0.3
