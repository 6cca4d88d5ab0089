"""Array backend: selection, errors, namespaces, and NumPy/CuPy parity (skipped without a GPU)."""
import numpy as np
import pytest

from rieszflow.engine.backend import cupy_available, get_backend, namespace, to_numpy

gpu = pytest.mark.skipif(not cupy_available(), reason="CuPy with a CUDA device is not available")


def test_numpy_backend_defaults():
    b = get_backend()
    assert b.name == "numpy" and b.xp is np and b.dtype == np.float64
    x = b.asarray([1, 2, 3])
    assert x.dtype == np.float64 and namespace(x) is np
    assert get_backend("numpy", "float32").asarray([1.0]).dtype == np.float32


def test_bad_backend_and_dtype():
    with pytest.raises(ValueError, match="backend='torch'"):
        get_backend("torch")
    with pytest.raises(ValueError, match="dtype='int32'"):
        get_backend("numpy", "int32")
    if not cupy_available():
        with pytest.raises(RuntimeError, match="CuPy"):
            get_backend("cupy")


def test_noise_is_drawn_on_the_host():
    """The same seed gives the same noise whatever the backend (drawn by NumPy, then moved)."""
    b = get_backend()
    a = b.normal(np.random.default_rng(5), (3, 2))
    np.testing.assert_array_equal(a, np.random.default_rng(5).standard_normal((3, 2)))
    np.testing.assert_array_equal(to_numpy(a), a)


def test_cpu_results_do_not_import_cupy():
    """Only engine/backend.py may import CuPy (checked on the source tree)."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parent.parent / "src" / "rieszflow"
    offenders = []
    for p in list((root / "engine").rglob("*.py")) + list((root / "solvers").rglob("*.py")) + \
            list((root / "studies").rglob("*.py")):
        if p.name == "backend.py" and p.parent.name == "engine":
            continue
        if re.search(r"^\s*(import cupy|from cupy)", p.read_text(), flags=re.M):
            offenders.append(str(p.relative_to(root)))
    assert offenders == []


@gpu
def test_numpy_cupy_parity_phase_a_step():
    """One Phase A Langevin step of a head: same seed, same result on NumPy and CuPy."""
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad
    from rieszflow.engine.simulate import projected_langevin
    from rieszflow.engine.space import Ball

    out = {}
    for name in ("numpy", "cupy"):
        b = get_backend(name)
        rng = np.random.default_rng(0)
        om = b.asarray(Ball(1.5).project(0.5 * rng.standard_normal((64, 8))))

        def grad(x):
            return riesz_energy_and_grad(x, 0.0, method="numpy")[1]

        init, step = projected_langevin(grad, Ball(1.5), eta=2e-3, beta=50.0, clip_norm=10.0)
        st = step(init(om), b.normal(rng, om.shape))
        out[name] = to_numpy(st.omega)
    np.testing.assert_allclose(out["numpy"], out["cupy"], rtol=1e-10, atol=1e-12)
