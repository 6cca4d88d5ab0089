r"""
Tokens clustering on the sphere
===============================

Self-attention moves tokens as interacting particles. On the sphere :math:`S^{d-1}` the pure
attention dynamics (Geshkovski, Letrouit, Polyanskiy, Rigollet; paper 004's measure view)

.. math::

    \dot x_i = P^\perp_{x_i}\Big(\frac{\sum_j e^{\beta\langle x_i, x_j\rangle} x_j}
    {\sum_j e^{\beta\langle x_i, x_j\rangle}}\Big)

makes the tokens cluster: for small :math:`\beta` they collapse to a single point, for larger
:math:`\beta` they linger in several clusters for a long time (metastability). The script integrates
the flow with :func:`rieszflow.run_flow` (RK4 with retraction to the sphere) for two values of
:math:`\beta` and records the number of clusters and the interaction energy
:math:`\frac{1}{2\beta n^2}\sum_{ij} e^{\beta\langle x_i, x_j\rangle}`, which the flow increases.
"""
import functools

import matplotlib.pyplot as plt
import numpy as np

import rieszflow as rf
import rieszflow.engine.tokenflow.observables as obs        # clustering observables (public module)

n, d = 48, 3
x0 = np.random.default_rng(0).standard_normal((n, d))
x0 /= np.linalg.norm(x0, axis=1, keepdims=True)

fig = plt.figure(figsize=(10, 3.6))
results = {}
for k, beta in enumerate((1.0, 9.0)):
    field = rf.sphere_attention_flow(rf.engine.tokenflow.SoftmaxKernel(beta=beta), "SA")
    res = rf.run_flow(field, x0, dt=0.05, t_end=30.0, record_every=10, observables={
        "clusters": functools.partial(obs.count_clusters, eps=1e-2),
        "energy": functools.partial(obs.interaction_energy, beta=beta)})
    results[beta] = res
    c = res.observables["clusters"]
    print(f"beta = {beta:g}: clusters {int(c[0])} at t = 0 -> {int(c[-1])} at t = {res.times[-1]:g}; "
          f"energy {res.observables['energy'][0]:.4f} -> {res.observables['energy'][-1]:.4f}")
    ax = fig.add_subplot(1, 3, k + 1, projection="3d")
    ax.scatter(*x0.T, s=8, alpha=0.3, label="t = 0")
    ax.scatter(*res.x[-1].T, s=30, color="C3", label=f"t = {res.times[-1]:g}")
    ax.set_title(f"beta = {beta:g}")
    ax.legend(fontsize=7)
ax = fig.add_subplot(1, 3, 3)
for beta, res in results.items():
    ax.plot(res.times, res.observables["clusters"], label=f"beta = {beta:g}")
ax.set_xlabel("t")
ax.set_ylabel("clusters (eps = 1e-2)")
ax.legend()
fig.tight_layout()
plt.show()
