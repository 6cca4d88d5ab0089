r"""
Reading, comparing and plotting run files
=========================================

Every rieszflow run writes one HDF5 file (netCDF4 data model) whose variables have named
dimensions, ``long_name`` and ``units``, and whose root attributes hold the full configuration,
the seed, the package versions, the git commit and the wall time. :func:`rieszflow.open_run` opens
one as an :class:`xarray.Dataset`; :func:`rieszflow.open_runs` stacks several along a new dimension,
so runs that differ in one setting compare with one line of xarray.

The runs here are three token flows on the sphere (as in the clustering example) that differ only
in the inverse temperature :math:`\beta` of the softmax kernel, each written to its own file by
:func:`rieszflow.run_flow`. The same calls open the files of ``rieszflow run`` and of every study.
"""
import functools
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import rieszflow as rf
import rieszflow.engine.tokenflow.observables as obs

out = Path(tempfile.mkdtemp())
x0 = np.random.default_rng(1).standard_normal((32, 3))
x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
paths = []
for beta in (0.5, 2.0, 8.0):
    field = rf.sphere_attention_flow(rf.engine.tokenflow.SoftmaxKernel(beta=beta), "SA")
    path = out / f"flow-beta{beta:g}.h5"
    rf.run_flow(field, x0, dt=0.05, t_end=20.0, record_every=4, path=path,
                config={"beta": beta, "n": 32, "d": 3}, attrs={"seed": 1},
                observables={"diameter": obs.diameter,
                             "clustered": functools.partial(obs.fraction_clustered_pairs, threshold=0.999)})
    paths.append(path)

one = rf.open_run(paths[0])
print(one["diameter"].attrs, "\n", {k: one.attrs[k] for k in ("kind", "config_beta", "status")})
one.close()

runs = rf.open_runs(paths)                                  # stacked along a new dimension "run"
print(dict(runs.sizes))
final = runs.isel(time=-1)
for i, p in enumerate(paths):
    beta = rf.open_run(p).attrs["config_beta"]           # the configuration travels with the file
    print(f"{p.name}: beta = {beta:g}: "
          f"diameter {float(final['diameter'][i]):.4f}, clustered pairs {float(final['clustered'][i]):.3f}")

fig, (l, r) = plt.subplots(1, 2, figsize=(9, 3.5))
for i, p in enumerate(paths):
    runs["diameter"].isel(run=i).plot(ax=l, label=p.stem)
    runs["clustered"].isel(run=i).plot(ax=r, label=p.stem)
l.legend()
r.legend()
fig.tight_layout()
plt.show()
runs.close()
