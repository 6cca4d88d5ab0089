"""rieszflow: particle and mean-field simulation engine for learned attention kernels.

The package has three layers, imported in one direction only
(``studies -> solvers -> engine``):

``rieszflow.engine``
    backend (NumPy/CuPy), spaces, energies, integrators, feature maps, the bundled
    Transformer, empirical measures, HDF5 storage.
``rieszflow.solvers``
    the reflected McKean-Vlasov PDE (FiPy), Gibbs equilibria and rate functions.
``rieszflow.studies``
    the main job and every study, one ``rieszflow`` subcommand each.

Source: "Random features as interacting particles" (paper 000 of this project) and
the companion papers cited in ``docs/``.
"""
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("rieszflow")
except _metadata.PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "open_runs"]


def open_runs(paths, dim: str = "run"):
    """Several rieszflow files as one dataset along ``dim``; see
    :func:`rieszflow.studies.runs.inspect.open_runs`.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
    dim : str, default "run"

    Returns
    -------
    xarray.Dataset
    """
    from rieszflow.studies.runs.inspect import open_runs as _open_runs

    return _open_runs(paths, dim=dim)
