"""The thread policy (engine/threads.py): deterministic counts, results independent of them."""
import subprocess
import sys

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info

from rieszflow.engine import threads
from rieszflow.engine.energy.riesz import riesz_energy_and_grad


@pytest.fixture
def policy(monkeypatch):
    """Restore the module state and the BLAS pools after a test that changes them."""
    saved = dict(threads._state)
    monkeypatch.delenv("RIESZFLOW_THREADS", raising=False)
    monkeypatch.delenv("RIESZFLOW_BLAS_THREADS", raising=False)
    yield threads
    monkeypatch.delenv("RIESZFLOW_THREADS", raising=False)       # before re-applying the policy
    monkeypatch.delenv("RIESZFLOW_BLAS_THREADS", raising=False)
    threads._state.update(saved)
    threads.configure_threads()


def _blas_counts():
    return {i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"}


def test_configure_sets_one_blas_thread_and_the_cap(policy):
    got = policy.configure_threads(2)
    assert policy.thread_cap() == 2
    assert _blas_counts() == {1}
    assert got["thread_cap"] == 2 and got["blas_threads"] == "1"


def test_blas_override_is_capped(policy, monkeypatch):
    monkeypatch.setenv("RIESZFLOW_BLAS_THREADS", "8")
    policy.configure_threads(2)
    assert policy.blas_threads() == 2          # never above the cap
    monkeypatch.setenv("RIESZFLOW_BLAS_THREADS", "1")
    policy.configure_threads(2)
    assert _blas_counts() == {1}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_cap_is_refused(policy, bad):
    with pytest.raises(ValueError, match="threads="):
        policy.configure_threads(bad)


def test_bad_environment_is_named(policy, monkeypatch):
    monkeypatch.setenv("RIESZFLOW_THREADS", "many")
    with pytest.raises(ValueError, match="RIESZFLOW_THREADS='many'"):
        policy.thread_cap()
    monkeypatch.setenv("RIESZFLOW_THREADS", "0")
    with pytest.raises(ValueError, match="must be >= 1"):
        policy.thread_cap()


def test_numba_threads_follow_the_work(policy):
    policy.configure_threads(2)
    rule = policy.THREAD_RULES["riesz"]
    assert policy.numba_threads("riesz", rule.numba_min_work - 1) == 1
    assert policy.numba_threads("riesz", rule.numba_min_work) == min(2, numba.config.NUMBA_NUM_THREADS)
    assert policy.numba_threads("transformer", 1e30) == 1       # no Numba kernel: always one
    with pytest.raises(KeyError, match="operation='nope'"):
        policy.numba_threads("nope", 1.0)


def test_every_rule_states_its_evidence():
    for name, rule in threads.THREAD_RULES.items():
        assert rule.blas >= 1 and rule.evidence, name
        assert (rule.numba_min_work is None) or (rule.numba_min_work > 0 and rule.units), name


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs NUMBA_NUM_THREADS >= 2")
def test_riesz_numba_result_does_not_depend_on_the_thread_count(policy, monkeypatch, rng):
    """The policy may choose 1 or 2 threads per call: the sums must be bit-identical."""
    x = rng.standard_normal((600, 3))
    policy.configure_threads(2)
    before = numba.get_num_threads()
    rule = policy.THREAD_RULES["riesz"]
    e1, g1 = riesz_energy_and_grad(x, 1.0, method="numba")             # below the work: 1 thread
    monkeypatch.setitem(policy.THREAD_RULES, "riesz", policy.ThreadRule(
        blas=1, numba_min_work=10.0, units=rule.units, evidence=rule.evidence))
    assert policy.numba_threads("riesz", 600 * 599) == 2
    e2, g2 = riesz_energy_and_grad(x, 1.0, method="numba")             # 2 threads
    assert e1 == e2 and np.array_equal(g1, g2)
    assert numba.get_num_threads() == before                           # restored after the call


def test_cli_threads_option():
    """`rieszflow --threads 0 ...` is a usage error naming the value (exit 2, no traceback)."""
    r = subprocess.run([sys.executable, "-m", "rieszflow", "--threads", "0", "status", "x.h5"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "'0' must be >= 1" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "rieszflow", "status", "x.h5"], capture_output=True,
                       text=True, env={**__import__("os").environ, "RIESZFLOW_THREADS": "x"})
    assert r.returncode == 2 and "RIESZFLOW_THREADS='x'" in r.stderr


def _blas_after_import(env_extra):
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                                               "BLIS_NUM_THREADS", "OMP_NUM_THREADS")}
    code = ("import json, os, numpy, rieszflow\n"
            "from threadpoolctl import threadpool_info\n"
            "print(json.dumps([[i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'],"
            " os.environ.get('OPENBLAS_NUM_THREADS')]))")
    r = subprocess.run([sys.executable, "-c", code], env={**env, **env_extra}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_import_applies_the_policy_but_keeps_a_users_blas_setting():
    """``import rieszflow`` gives the BLAS pools one thread (and the variable for libraries loaded
    later); a user's OPENBLAS_NUM_THREADS is kept, and so are the pools; RIESZFLOW_THREAD_POLICY=off
    leaves everything alone."""
    pools, env = _blas_after_import({"RIESZFLOW_THREADS": "2"})
    assert pools and set(pools) == {1} and env == "1"
    pools, env = _blas_after_import({"OPENBLAS_NUM_THREADS": "2", "RIESZFLOW_THREADS": "2"})
    assert 2 in pools and env == "2"
    pools, env = _blas_after_import({"RIESZFLOW_THREAD_POLICY": "off"})
    assert env is None
