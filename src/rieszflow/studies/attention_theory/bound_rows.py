"""The result container of the attention-theory experiments: :class:`BoundRow` (per-trial measured
W1 ratios next to the paper's and the corrected constants) and the violation tolerance :data:`RTOL`."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

__all__ = ["RTOL", "BoundRow"]


#: Relative tolerance above which a measured ratio counts as violating a bound.
RTOL = 1e-9


@dataclasses.dataclass
class BoundRow:
    """One statement of paper 004 evaluated on a set of trials.

    Parameters
    ----------
    bound_id : str
        Short identifier (HDF5 coordinate of the ``bound`` dimension).
    statement : str
        The statement and the token sets it was evaluated on.
    token_sets : {"random", "adversarial", "construction", "family"}
    ratio : ndarray, shape (T,), float64
        Measured ratio per trial (W1(out)/W1(in) or the statement's analogue).
    paper : ndarray, shape (T,), float64
        The paper's constant per trial (NaN where the paper states none).
    corrected : ndarray, shape (T,), float64
        The corrected constant per trial (NaN where none is certified).
    sharpened : ndarray, shape (T,), float64
        The spec's sharpened constant per trial (NaN where none).
    beta, dim, n_tokens, k_ell : ndarray, shape (T,), float64
        Instance parameters (NaN where not applicable).
    reference : str, default ""
        Paper and spec references.
    note : str, default ""
        What the row shows beyond the numbers (constructions, caveats).
    """

    bound_id: str
    statement: str
    token_sets: str
    ratio: np.ndarray
    paper: np.ndarray
    corrected: np.ndarray
    sharpened: np.ndarray
    beta: np.ndarray
    dim: np.ndarray
    n_tokens: np.ndarray
    k_ell: np.ndarray
    reference: str = ""
    note: str = ""

    @property
    def n_trials(self) -> int:
        """Number of trials T."""
        return int(self.ratio.shape[0])

    @staticmethod
    def _violations(ratio, bound):
        ok = np.isfinite(bound)
        return int(np.sum(ratio[ok] > bound[ok] * (1 + RTOL))), int(ok.sum())

    def summary(self) -> dict:
        """Aggregates: violations, worst ratios and the constants at the worst instance.

        Returns
        -------
        dict
            ``max_ratio``; ``worst`` (trial index maximising ratio/paper, or the max ratio when
            the paper states no constant); ``paper_constant``, ``corrected_constant`` and
            ``ratio_at_worst`` at that trial; ``max_ratio_over_paper``,
            ``max_ratio_over_corrected``, ``max_ratio_over_sharpened``; ``paper_violations``,
            ``corrected_violations``, ``sharpened_violations`` and the trial counts where the
            constant exists; ``paper_holds``, ``corrected_holds`` (1 holds, 0 fails, -1 no
            constant).
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            rp = self.ratio / self.paper
            rc = self.ratio / self.corrected
            rs = self.ratio / self.sharpened
        out = {"max_ratio": float(np.nanmax(self.ratio))}
        if np.any(np.isfinite(rp)):
            worst = int(np.nanargmax(np.where(np.isfinite(rp), rp, -np.inf)))
        else:
            worst = int(np.nanargmax(self.ratio))
        out["worst"] = worst
        out["paper_constant"] = float(self.paper[worst])
        out["corrected_constant"] = float(self.corrected[worst])
        out["sharpened_constant"] = float(self.sharpened[worst])
        out["ratio_at_worst"] = float(self.ratio[worst])
        for name, r in (("paper", rp), ("corrected", rc), ("sharpened", rs)):
            fin = r[np.isfinite(r)]
            out[f"max_ratio_over_{name}"] = float(fin.max()) if fin.size else math.nan
        for name, b in (("paper", self.paper), ("corrected", self.corrected),
                        ("sharpened", self.sharpened)):
            v, n = self._violations(self.ratio, b)
            out[f"{name}_violations"], out[f"{name}_checked"] = v, n
            out[f"{name}_holds"] = -1 if n == 0 else int(v == 0)
        return out

    def counterexample(self) -> str:
        """A one-line description of the worst violation of the paper's constant ('' if none).

        Returns
        -------
        str
            ``"<bound_id>: measured <ratio> > paper <constant> (<instance parameters>; <failing>/<checked>
            trials fail)"``, followed by ``"; <note>"`` when the row has a note; ``""`` when the paper's
            constant holds on every trial or is never stated.
        """
        s = self.summary()
        if s["paper_holds"] != 0:
            return ""
        i = s["worst"]
        parts = []
        for label, arr in (("d", self.dim), ("N", self.n_tokens), ("beta", self.beta),
                           ("K_l", self.k_ell)):
            v = arr[i]
            if not np.isfinite(v):
                continue
            if label == "N" and v > 1e6:
                parts.append(f"ln N={math.log(v):.4g}")
            elif label in ("beta", "K_l"):
                parts.append(f"{label}={v:.4g}")
            else:
                parts.append(f"{label}={int(v)}")
        text = (f"{self.bound_id}: measured {self.ratio[i]:.4g} > paper {self.paper[i]:.4g} "
                f"({', '.join(parts)}; {s['paper_violations']}/{s['paper_checked']} trials fail)")
        if self.note:
            text += f"; {self.note}"
        return text


def _row(bound_id, statement, token_sets, trials, reference="", note="") -> BoundRow:
    """Assemble a :class:`BoundRow` from a list of per-trial dicts."""
    def col(key):
        return np.array([float(t.get(key, math.nan)) for t in trials], dtype=float)

    return BoundRow(bound_id, statement, token_sets, col("ratio"), col("paper"), col("corrected"),
                    col("sharpened"), col("beta"), col("dim"), col("n_tokens"), col("k_ell"),
                    reference, note)


def _trial(ratio, bound, **info) -> dict:
    return {"ratio": ratio, "paper": bound.paper, "corrected": bound.corrected,
            "sharpened": bound.sharpened, **info}
