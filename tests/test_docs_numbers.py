"""Docs that cannot drift: the measured ldp table of docs/studies_mean_field.md is checked against a
fresh, deterministic run of the command that produced it (``rieszflow ldp --quick``, seed 0), to
the digits the page prints."""
import re
from pathlib import Path

import numpy as np
import pytest

from rieszflow.engine.storage import open_run
from rieszflow.studies.cli import main as cli_main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "studies_mean_field.md"


def _value(cell):
    """(value, se, decimals of the value) from '0.4320±0.0046', '0.3000', '5.42e-3', '—', ..."""
    cell = cell.strip()
    m = re.match(r"^([0-9.e+-]+)(?:±([0-9.e+-]+))?$", cell)
    if not m:
        return None
    digits = len(m.group(1).split(".")[1]) if "." in m.group(1) and "e" not in m.group(1) else None
    return float(m.group(1)), (float(m.group(2)) if m.group(2) else None), digits


def _close(printed, value):
    v, _, digits = printed
    tol = 0.5 * 10.0 ** -digits + 1e-12 if digits is not None else 5e-3 * abs(v)
    return abs(v - value) <= tol


@pytest.mark.slow
def test_ldp_quick_table_in_the_docs_is_what_the_command_prints(tmp_path):
    out = tmp_path / "ldp.h5"
    assert cli_main(["ldp", "--quick", "--no-plots", "--quiet", "--seed", "0", "--out", str(out)]) == 0
    ds = open_run(out, "ldp_study")
    rows = [ln for ln in PAGE.read_text().splitlines() if ln.startswith("| speed_N")]
    assert len(rows) == 8
    checked = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        regime, n = cells[0], int(cells[1])
        sel = ds.sel(regime=regime, N=n)
        for col, var in ((4, "rate_direct"), (5, "rate_is"), (6, "rate_chernoff"), (7, "rate_bahadur_rao")):
            printed = _value(cells[col])
            if printed is None:                       # '—' or '0 (a <= E M)': nothing measured to print
                continue
            assert _close(printed, float(sel[var])), (regime, n, var, cells[col], float(sel[var]))
            if printed[1] is not None:
                assert _close((printed[1], None, printed[2]), float(sel[f"{var}_se"])), (regime, n, var)
            checked += 1
        assert _close(_value(cells[8]), float(ds["rate_limit"].sel(regime=regime)))
    assert checked >= 25
    assert np.isfinite(ds["rate_is"].values).all()
