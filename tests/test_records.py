"""Typed records: one frozen type per kind, version 2, one upgrade of version 1 at read time.

The committed folders are written in version 2 and give exactly the rows they gave in version 1
(`tests/data/rows/` holds `jaxmem capacity DIR --json` of each, taken before the rewrite); a
version-1 folder reads as the same records; a record that is not its kind's type is refused."""

import json
import os
import shutil

import pytest
from helpers import same_json
from jaxmem.cli import main
from jaxmem.study import (
    as_record,
    config_id,
    EnsembleRecord,
    KINDS,
    normal_config,
    RECORD_VERSION,
    Store,
    ThresholdRecord,
    upgrade,
)


ROOT = os.path.join(os.path.dirname(__file__), "..")


def _lines(folder):
    records = os.path.join(folder, "records")
    for name in sorted(os.listdir(records)):
        with open(os.path.join(records, name)) as f:
            yield name, [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize("name", ["scaling", "rank"])
def test_committed_folders_are_version_2_and_give_todays_rows(name, capsys):
    folder = os.path.join(ROOT, "docs", name)
    for _, recs in _lines(folder):
        assert all(r["v"] == RECORD_VERSION == 2 and r["kind"] in KINDS for r in recs)
    assert main(["capacity", folder, "--json"]) == 0
    with open(os.path.join(ROOT, "tests", "data", "rows", f"{name}.json")) as f:
        assert same_json(json.loads(capsys.readouterr().out), json.load(f)), "every row as in version 1"


def test_a_version_1_folder_reads_as_the_same_records(tmp_path, capsys):
    """docs/rank written back in version 1 (its configs were already in today's form, so only
    `v` differs) reads as the same typed records and gives the same rows; `Store.rewrite` writes
    it in version 2 again, byte for byte the committed files."""
    src = os.path.join(ROOT, "docs", "rank")
    dest = tmp_path / "rank"
    shutil.copytree(src, dest)
    for name, recs in _lines(dest):
        with open(dest / "records" / name, "w") as f:
            f.writelines(json.dumps(dict(r, v=1)) + "\n" for r in recs)
    old, new = Store(str(dest)).records(), Store(src).records()
    assert len(old) == len(new) == 496 and old == new
    assert all(type(r) is ThresholdRecord and r.v == 2 for r in old)
    assert main(["capacity", str(dest), "--json"]) == 0
    with open(os.path.join(ROOT, "tests", "data", "rows", "rank.json")) as f:
        assert same_json(json.loads(capsys.readouterr().out), json.load(f))
    assert Store(str(dest)).rewrite() == 31
    for (name, recs), (_, committed) in zip(_lines(dest), _lines(src), strict=True):
        assert recs == committed, name


def _threshold_v1(**over):
    cfg = dict(
        kind="threshold", d=8, problem="op", model="full", kappa=1.0, solver="certified",
        seed0=0, embedding="gaussian", plan=dict(p0=10, p_max=40, step=1.1, pad=8),
        tol=1e-5, max_iter=20_000, memory=50, seeds=[0, 1],
    )  # fmt: skip
    rec = dict(v=1, kind="threshold", id=config_id(cfg), config=cfg, seed=0, p_star=21, p_hi=22)
    return rec | dict(exact=True, undecided=False, decisions=[], seconds=0.5) | over


def test_upgrade_of_an_old_threshold_record():
    """A version-1 record with the old flat settings: its config becomes today's form (and its id
    with it), and `censored`/`p_max` come from its plan."""
    rec = _threshold_v1()
    new = upgrade(rec)
    assert new["v"] == 2 and new["config"] == normal_config(rec["config"]) != rec["config"]
    assert new["id"] == config_id(new["config"]) and "tol" not in new["config"]
    assert new["censored"] is False and new["p_max"] == 40
    assert upgrade(_threshold_v1(p_hi=41))["censored"] is True
    r = as_record(rec)
    assert isinstance(r, ThresholdRecord) and r.p_star == 21 and r["decisions"] == []


def test_an_old_flat_file_is_rewritten_under_its_new_id(tmp_path):
    rec = _threshold_v1()
    store = Store(str(tmp_path))
    os.makedirs(store.records_dir)
    with open(store.path(rec["config"]), "w") as f:
        f.write(json.dumps(rec) + "\n")
    (before,) = store.records()
    assert store.rewrite() == 1
    (name,) = os.listdir(store.records_dir)
    assert name == before.id + ".jsonl" != config_id(rec["config"]) + ".jsonl"
    assert store.records() == [before]


def test_an_ensemble_record_of_version_1_gets_its_kind():
    cfg = dict(d=6, p=10, problem="op", model="full", kappa=1.0, seeds=1, seed0=0)
    fields = dict(accuracy=1.0, all_stored=True, steps_to_store=12, diverged=False, final_loss=0.1)
    rec = dict(v=1, id=config_id(cfg), config=cfg, seed=0, alpha=0.2, **fields)
    rec |= dict(target_score=[1.0], best_score=[0.5], singular_values=[1.0], seconds=0.1)
    r = as_record(rec)
    assert type(r) is EnsembleRecord and r.kind == "ensemble" and r.to_json()["kind"] == "ensemble"
    assert "kind" not in r.config, "the config, and so the unit's id, is unchanged"


@pytest.mark.parametrize(
    "change, word",
    [
        (dict(p_star="21"), "p_star"),
        (dict(exact=1), "exact"),
        (dict(p_hi=None), "p_hi"),
        (dict(surprise=3), "surprise"),
        (dict(v=7), "version 7"),
        (dict(kind="nonsense"), "kind"),
    ],
)
def test_a_record_that_is_not_its_type_is_refused(tmp_path, capsys, change, word):
    """`as_record` raises a `ValueError` naming what is wrong; a file holding such a record is
    skipped by readers with a warning naming the file (and would be rerun by a run)."""
    rec = dict(upgrade(_threshold_v1()), **change)
    with pytest.raises(ValueError, match=word):
        as_record(rec)
    cfg = rec["config"]
    store = Store(str(tmp_path))
    os.makedirs(store.records_dir)
    with open(store.path(cfg), "w") as f:
        f.write(json.dumps(dict(rec, seed=0)) + "\n")
    assert store.records() == [] and not store.done(cfg)
    assert config_id(cfg) in capsys.readouterr().err
    missing = {k: v for k, v in upgrade(_threshold_v1()).items() if k != "decisions"}
    with pytest.raises(ValueError, match="decisions"):
        as_record(missing)


def test_records_are_frozen_and_read_as_mappings():
    r = as_record(_threshold_v1())
    with pytest.raises(AttributeError, match="cannot assign to field .p_star."):
        r.p_star = 3
    assert dict(r) == r.to_json() and r.get("hebbian_target") is None and "p_star" in r
    assert list(r)[:5] == ["v", "kind", "id", "config", "seed"]


def test_where_selects_with_the_defaults_its_kind_ran_with():
    """`where` reads a field a config lacks at its kind's default (an older sweep config has no
    `embedding`: it ran Gaussian), selects by `kind`, names settings with `__`, matches floats to
    1e-6, and a field with no default matches nothing."""
    from jaxmem.study import where

    thr = as_record(_threshold_v1())
    cfg = dict(d=6, p=10, problem="op", model="full", kappa=1.0, seeds=1, seed0=0)
    fields = dict(accuracy=1.0, all_stored=True, steps_to_store=12, diverged=False, final_loss=0.1)
    ens = dict(v=1, id=config_id(cfg), config=cfg, seed=0, alpha=0.2, **fields)
    ens = as_record(ens | dict(target_score=[1.0], best_score=[0.5], singular_values=[1.0], seconds=0.1))
    recs = [thr, ens]
    assert where(recs, embedding="gaussian") == recs
    assert where(recs, embedding="unit") == []
    assert where(recs, kind="ensemble") == [ens] and where(recs, kind="threshold") == [thr]
    assert where(recs, decide__tol=1e-5) == [thr] and where(recs, decide__tol=1e-3) == []
    assert where(recs, kappa=1.0 + 1e-9) == recs and where(recs, kappa=0.5) == []
    assert where(recs, lr=0.05) == [], "a field that neither has nor defaults matches nothing"
    assert where(recs, steps=ens.DEFAULTS["steps"]) == [ens]


def test_rows_are_typed_and_read_as_mappings():
    """The capacity rows of a folder are `ThresholdRow`s (frozen, typed), with `kind` set in a
    folder's tables and absent in `threshold_rows`; their bootstrap samples are never a field."""
    import dataclasses

    from jaxmem.study import read_tables, threshold_rows, ThresholdRow

    tables = read_tables(os.path.join(ROOT, "docs", "rank"), theory=False)
    row = tables.rows[0]
    assert type(row) is ThresholdRow and row["kind"] == "threshold" == row.kind
    assert "boot" not in row and "theory_verdict" not in row, "no theory asked: no verdict field"
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field .p_c."):
        row.p_c = 1.0
    bare = threshold_rows(Store(os.path.join(ROOT, "docs", "rank")).records(), theory=False)[0]
    assert "kind" not in bare and dict(bare) == {k: v for k, v in row.items() if k != "kind"}
    from jaxmem.study import where

    factored = [r for r in tables.rows if r["model"] == "factored" and r["solver"] == "certified"]
    assert factored and where(tables.rows, model="factored", solver="certified", kind="threshold") == factored
