"""The study layer: capacity measurements as units of work, run into a folder of records, and
the tables, figures and report read back from those records alone.

Layers, each importing only those above it in this list:

- `_records`: one record envelope, the `Store` (a folder of record files), the normal form of
  a config and `where`;
- `_mechanism`: a memory's spectrum and scores per instance, and Student-t intervals over seeds
  (pure);
- `_units`: the registry of unit kinds (threshold, max-margin, fixed-`p` ensemble) and their
  configs;
- `_runner`: one loop that runs units, serially or by worker processes, per shard, skipping
  finished ones;
- `_analysis`: records to tables (pure functions): capacity rows, verdicts, OP against DP, Adam
  against certified;
- `_spec`: one capacity point (`capacity`);
- `_panels`: the tables the figures draw (records and theory to arrays and notes; pure);
- `_figures`: draw those tables on figures of their own (no pyplot), nothing else;
- `_report`: the markdown sections the studies' pages share;
- `_tables`: a folder's tables in Python (`read_tables`, `load` to pandas);
- `_study`: `AbstractStudy`, the registry `STUDIES`, `run`, `write`, `studies_of`;
- `studies/`: one file per study (demo, scaling, rank, sweep, peer), each registering itself.
"""

from .._files import atomic_write
from .._provenance import device_info, versions
from .._validate import InvalidArgument
from ._analysis import (
    adam_vs_certified,
    CapacityRow,
    compare,
    compare_op_dp,
    estimate,
    fmt,
    gap_note,
    gap_samples,
    gap_trend,
    GAPS,
    public,
    scaling_table,
    setup,
    SweepRow,
    theory_verdict,
    threshold_rows,
    ThresholdRow,
    trend_note,
    verdict,
)
from ._figures import FIGURES, save_figure
from ._mechanism import (
    ci_verdict,
    memory_summary,
    normalised_spectrum,
    paired_rows,
    SCORE_STATS,
    score_table,
    SPECTRUM_STATS,
)
from ._panels import panels, ReportData
from ._records import (
    as_record,
    config_id,
    criterion,
    decide_fields,
    EnsembleRecord,
    envelope,
    expected_seeds,
    flat_settings,
    KINDS,
    MaxMarginRecord,
    MechanismRecord,
    normal_config,
    normal_records,
    point_key,
    PointKey,
    Record,
    RECORD_VERSION,
    Store,
    ThresholdRecord,
    train_fields,
    unit_settings,
    upgrade,
    where,
)
from ._runner import check_jobs, default_jobs, distinct_units, measure, run_units, shard_units
from ._spec import capacity, CapacityEstimate
from ._stats import judge, ks_distance, mean_ci, seeds_to_decide, t975, Verdict
from ._study import (
    AbstractStudy,
    by_kind,
    copy_report,
    mark,
    plan,
    preset_of,
    register,
    run,
    STUDIES,
    studies_of,
    study_of,
    write,
)
from ._tables import load, read_tables, Tables, tables_of
from ._units import Knobs, make_config, point_configs, run_margin_unit, run_one, run_records, run_unit, UNITS
from .studies.demo import DEMO, Demo, margin_configs, PAPER, QUICK, study_points, StudySpec
from .studies.mechanism import MECHANISM, Mechanism, mechanism_configs, MECHANISM_QUICK, MechanismSpec
from .studies.peer import PEER, Peer, peer_points, PEER_QUICK, PeerSpec
from .studies.rank import RANK, Rank, RANK_LARGE, rank_points, RANK_QUICK, RankSpec
from .studies.scaling import (
    SCALING,
    Scaling,
    SCALING_ACCELERATOR,
    SCALING_MORE,
    scaling_points,
    SCALING_QUICK,
    ScalingSpec,
)
from .studies.sweep import Sweep, SweepSpec
