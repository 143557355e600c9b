"""A folder's tables in Python: the rows `jaxmem capacity DIR` prints, read from its records.

`read_tables(DIR)` gives the typed tables (capacity rows, OP against DP, Adam against
certified, and the logistic estimates of fixed-`p` sweeps); `load(DIR)` gives the capacity rows
as one flat pandas DataFrame (pandas is the optional extra `jaxmem[pandas]`).
"""

from __future__ import annotations

import dataclasses
import os

from .._validate import InvalidArgument
from ._analysis import (
    adam_vs_certified,
    CapacityRow,
    check_records,
    compare,
    compare_op_dp,
    estimate,
    setting_text,
    setup,
    threshold_rows,
)
from ._records import ENSEMBLE_KIND, KIND, kind_of, Store


@dataclasses.dataclass(frozen=True)
class Tables:
    """What a folder's records give, as `jaxmem capacity DIR --json` prints it.

    **Fields:**
    - `rows`: one `ThresholdRow` per measurement point (threshold records), then one
      `SweepRow` per sweep point (logistic estimates), each with `kind` `"threshold"` or
      `"sweep"`;
    - `op_vs_dp`: OP minus DP per `d` (and setup), with its 95% CI and verdict;
    - `adam_vs_certified`: per point, the fraction of seeds where Adam's threshold lies below
      the certified one, and the capacity lost."""

    rows: tuple[CapacityRow, ...]
    op_vs_dp: tuple[dict, ...]
    adam_vs_certified: tuple[dict, ...]

    def to_json(self) -> dict:
        return dict(
            rows=[r.to_json() for r in self.rows],
            op_vs_dp=list(self.op_vs_dp),
            adam_vs_certified=list(self.adam_vs_certified),
        )

    def flat_rows(self) -> list[dict]:
        """The capacity rows as flat dicts: every field, the `settings` spread into columns
        (`settings.decide.tol`, ...), `setup` as text; nested fields left out."""
        out = []
        for r in self.rows:
            flat = {k: v for k, v in r.items() if not isinstance(v, dict | list | tuple)}
            flat["setup"] = setup(r)
            flat.update(
                {
                    f"settings.{k}": setting_text(v) if isinstance(v, dict) else v
                    for k, v in r.get("settings", {}).items()
                }
            )
            out.append(flat)
        return out

    def to_pandas(self):
        """The capacity rows as a pandas DataFrame, one row per measurement point.

        **Returns:** a `pandas.DataFrame` with the columns of `flat_rows`."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "jaxmem.load needs pandas: pip install 'jaxmem[pandas]' (or pip install pandas)"
            ) from None
        return pd.DataFrame(self.flat_rows())


def tables_of(records: list[dict], *, theory: bool = True, log=None) -> Tables:
    """The tables of a list of records (threshold and sweep records; others are ignored).

    **Arguments:** `records` as `Store.records()` gives them; `theory`: add the theory's
    `alpha_c(p_c)` and its verdict to each row; `log`: a file told, once the records are
    checked, that the tables are being computed (a first theory call compiles).

    **Returns:** `Tables`; `InvalidArgument` where two records of one seed disagree."""
    recs = [r for r in records if kind_of(r) == KIND]
    sweep = [r for r in records if kind_of(r) == ENSEMBLE_KIND]
    check_records(recs)
    if log is not None:
        print(f"computing the tables of {len(recs) + len(sweep)} records", file=log, flush=True)
    rows = [dataclasses.replace(r, kind="threshold") for r in threshold_rows(recs, theory=theory)]
    sweep_rows = estimate(sweep, theory=theory) if sweep else []
    op_dp = [
        dict(c, kind="threshold", model="full", solver=solver)
        for solver in ("certified", "adam")
        for c in compare(
            recs,
            dict(problem="op", model="full", solver=solver),
            dict(problem="dp", model="full", solver=solver),
        )
    ]
    op_dp += [dict(c, kind="sweep") for c in compare_op_dp(sweep_rows)] if sweep_rows else []
    rows += [dataclasses.replace(r, kind="sweep") for r in sweep_rows]
    return Tables(tuple(rows), tuple(op_dp), tuple(adam_vs_certified(recs)))


def read_tables(folder: str, *, theory: bool = True, log=None) -> Tables:
    """The tables of a folder that jaxmem wrote (`--out DIR`, `jaxmem demo`, a study), read
    from its records alone; nothing is measured or written.

    **Arguments:** `folder`: the folder; `theory`, `log`: as in `tables_of`.

    **Returns:** `Tables`; `InvalidArgument` if the folder does not exist or holds no
    threshold or sweep records."""
    if not isinstance(folder, str | os.PathLike) or not os.path.isdir(folder):
        raise InvalidArgument(f"folder: no such folder: {folder!r}")
    records = Store(os.fspath(folder)).records()
    if not any(kind_of(r) in (KIND, ENSEMBLE_KIND) for r in records):
        raise InvalidArgument(f"folder: no threshold or sweep records under {os.fspath(folder)!r}")
    return tables_of(records, theory=theory, log=log)


def load(folder: str, *, theory: bool = True):
    """A folder's capacity rows as a flat pandas DataFrame (`read_tables(folder).to_pandas()`).

    **Arguments:** as `read_tables`.

    **Returns:** a `pandas.DataFrame`, one row per measurement point (`d`, `problem`, `model`,
    `kappa`, `solver`, `p_c`, `alpha_c`, `ci_low`, `ci_high`, ..., and every setting)."""
    return read_tables(folder, theory=theory).to_pandas()
