"""Empirical measures, Wasserstein-1 distances and MMD: the one home of all three in rieszflow.

Every study and every theory module that compares measures uses this module:
the particle clouds of the McKean-Vlasov study against the PDE density, the
token clouds of the attention flows, and the measure-theoretic attention of
paper 004.

Measures
--------
:class:`EmpiricalMeasure` is a finitely supported probability measure
:math:`\\mu = \\sum_j w_j \\delta_{y_j}` on :math:`\\mathbb R^d` (NumPy or CuPy arrays);
:class:`AtomicMeasure1D` and :class:`CellMeasure1D` are the two kinds of 1-D
measures whose CDFs are linear between breakpoints (atoms; a piecewise-constant
density on cells).

W1 in any dimension
-------------------
:func:`wasserstein1` is exact optimal transport (``ot.emd2``, network simplex,
``numItermax`` 1e7, non-convergence raises) with the ground cost from
``scipy.spatial.distance.cdist``, so a zero distance costs exactly 0 (POT's
``ot.dist(metric="euclidean")`` expands :math:`|a|^2 + |b|^2 - 2 a\\cdot b` and leaves
~1e-8 there: W1 of a cloud with itself came out 4e-9). In 1-D it uses the
exact CDF formula instead. ``method="sliced"`` is the sliced W1 (a different
metric, always <= W1), ``method="auto"`` switches to it above a problem size.

W1 in 1-D: exact
----------------
:math:`W_1(\\mu, \\nu) = \\int |F_\\mu(x) - F_\\nu(x)|\\,dx` (Vallender 1973). Both
measures here have CDFs that are *linear between breakpoints*: an empirical
measure (atoms, a step CDF) and a piecewise-constant density on cells (a
piecewise-linear CDF). On every interval between consecutive merged
breakpoints the difference :math:`D = F_\\mu - F_\\nu` is therefore linear, from
its right limit at the left end to its left limit at the right end, and
:math:`\\int|D|` has a closed form (with the sign change handled). The result is
exact up to round-off; no binning, no sampling of the PDE density.

W1 on a grid (2-D)
------------------
Particles binned to the cells of a uniform PDE grid and :math:`W_1` with the
Euclidean ground cost between the two histograms on the cell centres
(:func:`wasserstein1_grid`): the exact :math:`W_1` between the two measures
*quantised to the grid*. By the triangle inequality it differs from
:math:`W_1(\\mu_N, \\rho)` by at most twice the quantisation distance (at most
:math:`0.383\\,h` on average for a uniform density on square cells of side h,
:func:`quantisation_bound`), and it cannot resolve sampling fluctuations below
the scale h.

MMD
---
:func:`mmd2` is the unbiased estimate (U-statistic) of the squared maximum mean
discrepancy with a Gaussian kernel between two point clouds, with a two-sample
jackknife standard error; :func:`median_bandwidth` is the median heuristic for its
bandwidth.

References
----------
Gretton et al., "A kernel two-sample test", JMLR 13 (2012) 723-773 (MMD, eq. (3), Lemma 6);
Villani, *Optimal Transport: Old and New* (2009), ch. 6 (W1, Kantorovich-Rubinstein);
Fournier and Guillin, PTRF 162 (2015) 707-738 (rates of empirical measures);
Flamary et al., "POT: Python Optimal Transport", JMLR 22(78) 2021;
paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), section 3.1
(m(X) = (1/N) sum_i delta_{x_i}) and section 4 (W1 with cost |x - y|_1);
docs/specs/particles_pde_reference.md sec. 4.1 (tools and timings).

Modules
-------
:mod:`~rieszflow.engine.measures.empirical`
    :class:`EmpiricalMeasure`, :func:`empirical_measure`, :data:`METRICS`.
:mod:`~rieszflow.engine.measures.wasserstein`
    :func:`wasserstein1`, :class:`W1`, :func:`ground_cost`, :func:`resolve_w1_method`.
:mod:`~rieszflow.engine.measures.line_grid`
    :class:`AtomicMeasure1D`, :class:`CellMeasure1D`, :func:`wasserstein1_1d`,
    :func:`bin_to_grid`, :func:`wasserstein1_points`, :func:`wasserstein1_grid`,
    :func:`quantisation_bound`, :func:`sample_cells`.
:mod:`~rieszflow.engine.measures.mmd`
    :func:`mmd2`, :func:`mmd2_weighted`, :class:`MMD`, :func:`median_bandwidth`.

Every name is importable from ``rieszflow.engine.measures`` itself.
"""
from __future__ import annotations

from rieszflow.engine.measures.empirical import METRICS, EmpiricalMeasure, empirical_measure
from rieszflow.engine.measures.line_grid import (
    AtomicMeasure1D,
    CellMeasure1D,
    bin_to_grid,
    quantisation_bound,
    sample_cells,
    wasserstein1_1d,
    wasserstein1_grid,
    wasserstein1_points,
)
from rieszflow.engine.measures.mmd import MMD, median_bandwidth, mmd2, mmd2_weighted
from rieszflow.engine.measures.wasserstein import W1, ground_cost, resolve_w1_method, wasserstein1

__all__ = [
    "METRICS",
    "EmpiricalMeasure",
    "empirical_measure",
    "W1",
    "ground_cost",
    "wasserstein1",
    "resolve_w1_method",
    "AtomicMeasure1D",
    "CellMeasure1D",
    "wasserstein1_1d",
    "bin_to_grid",
    "wasserstein1_points",
    "wasserstein1_grid",
    "quantisation_bound",
    "sample_cells",
    "MMD",
    "median_bandwidth",
    "mmd2",
    "mmd2_weighted",
]

