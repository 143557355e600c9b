"""The study: the Hebbian threshold against a numpy recount, the pipeline end to end at toy
size (records, report, figures, and `jaxmem capacity DIR` reproducing the report's table), and
the figures' tables apart from their drawing."""

import json
import math
import os

import jax
import jax.numpy as jnp
import jaxmem as jm
import jaxmem.theory as th
import numpy as np
import pytest
from jaxmem import search_thresholds, SearchPlan
from jaxmem.cli import main
from jaxmem.study import Demo, run, StudySpec, write


def test_hebbian_threshold_is_the_last_p_before_the_first_failure():
    d, P = 8, 30
    tasks = jax.tree.map(
        lambda *x: jnp.stack(x), *[jm.make_task(jax.random.key(s), d=d, p=P) for s in range(6)]
    )
    th = search_thresholds(tasks, plan=SearchPlan(p0=2, p_max=P), solver="hebbian")
    for j in range(6):
        E = np.asarray(tasks.inputs[j], np.float64)
        U = np.asarray(tasks.targets[j], np.float64)
        fail = next((p for p in range(2, P + 1) if not _all_stored(E[:p], U[:p])), P + 1)
        assert th.lo[j] == min(fail - 1, P) and th.hi[j] == (fail if fail <= P else P + 1)


def _all_stored(E, U):
    S = (E @ (U.T @ E).T) @ U.T  # s[mu, rho] = u_rho . W e_mu
    return bool(np.all(np.argmax(S, axis=1) == np.arange(len(E))))


def test_bad_study_spec_names_the_argument():
    with pytest.raises(ValueError, match="certified"):
        _tiny(certified=((1, 4),))
    with pytest.raises(ValueError, match="spectra_kappa"):
        _tiny(spectra_kappa=1.5)


def _tiny(**kw):
    base = dict(
        certified=((8, 4),),
        adam=((8, 2),),
        hebbian=((8, 8),),
        factored_d=8,
        kappas=(0.5,),
        factored_seeds=2,
        factored_adam_seeds=0,
        spectra_seeds=2,
        spectra_kappa=0.5,
        peer=(8,),
        peer_seeds=2,
        steps=300,
        factored_max_iter=100,
        group=4,
    )
    return StudySpec(**dict(base, **kw))


@pytest.mark.slow
def test_study_end_to_end_and_capacity_reproduces_the_table(tmp_path, capsys):
    out = str(tmp_path / "study")
    run(Demo(), _tiny(), out)
    before = sorted(os.listdir(os.path.join(out, "records")))
    path, tables = write(Demo(), out)
    rows = tables["rows"]
    assert sorted(os.listdir(os.path.join(out, "records"))) == before, "the report measures nothing"
    for name in ("transition", "finite_size", "spectra", "scores", "rank", "adam", "peer"):
        assert any(f.endswith(f"_{name}.png") for f in os.listdir(out)), name
    with open(path) as f:
        text = f.read()
    for section in (
        "## Capacity",
        "## OP against DP",
        "## Adam against certified",
        "## Spectra",
        "## Rank",
        "peer's protocol",
    ):
        assert section in text, section
    assert main(["capacity", out, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["rows"]
    key = lambda r: (r["d"], r["problem"], r["model"], r["solver"], r["embedding"], r["criterion"])
    num = lambda r: tuple(
        None if x is None or not math.isfinite(x) else x for x in (r["p_c"], r["ci_low"], r["ci_high"])
    )
    assert {key(r): num(r) for r in got} == {key(r): num(r) for r in rows}
    assert {"certified", "adam", "hebbian"} <= {r["solver"] for r in rows}
    assert any(r["embedding"] == "unit" and r["criterion"] == 0.99 for r in rows)
    # resumable: a second run reads every unit and writes nothing
    stamp = {f: os.path.getmtime(os.path.join(out, "records", f)) for f in before}
    run(Demo(), _tiny(), out)
    assert {f: os.path.getmtime(os.path.join(out, "records", f)) for f in before} == stamp


def test_records_do_not_depend_on_the_number_of_worker_processes(tmp_path):
    """Worker processes (`jobs=2`) write the same records as the serial run, each unit once."""
    from jaxmem import TrainConfig
    from jaxmem.study import measure, point_configs, Store

    points = point_configs(d=6, problem="op", seeds=4, group=2) + point_configs(
        d=6, problem="op", seeds=2, solver="adam", adam_config=TrainConfig(steps=300, lr=0.05)
    )
    strip = lambda recs: sorted(
        json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True) for r in recs
    )
    serial = measure(points, store=Store(str(tmp_path / "serial")))
    parallel = measure(points, store=Store(str(tmp_path / "parallel")), jobs=2)
    assert strip(parallel) == strip(serial)
    assert len(os.listdir(tmp_path / "parallel" / "records")) == len(points)
    with pytest.raises(ValueError, match="jobs"):
        measure(points, jobs=0)


def test_the_spectra_table_samples_its_three_laws_from_independent_keys(monkeypatch):
    from jaxmem.study import _panels

    seen = []
    for name in ("qc_sample", "init_spectrum", "product_spectrum"):
        real = getattr(th, name)

        def spy(key, *a, _real=real, **k):
            seen.append(jax.random.key_data(key).tobytes())
            return _real(key, *a, **k)

        monkeypatch.setattr(_panels.th, name, spy)
    rec = dict(config=dict(problem="op", model="full", kappa=1.0, d=8), p=20, singular_values=[1.0, 1.5, 0.5])
    rec.update(margin=0.1, margin_bound=0.2)
    (table,) = _panels.spectra([rec], jax.random.key(0))
    assert len(seen) == 3 and len(set(seen)) == 3
    assert table["note"].startswith("full OP (d=8")


def test_the_figures_only_draw_the_panels_tables():
    """`_figures` imports neither the theory nor jax, nor selects records: every number it
    draws is in a `ReportData`."""
    import ast
    import pathlib

    from jaxmem.study import _figures

    tree = ast.parse(pathlib.Path(_figures.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {
        f"{n.module}.{a.name}" if n.module else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert not {x for x in imported if x.startswith("jax") or "theory" in x or x.endswith("select")}, imported
    assert imported & {"_panels.ReportData"}, imported


def _synthetic(d, problem, p_stars):
    cfg = dict(
        d=d, problem=problem, model="full", kappa=1.0, solver="certified", embedding="gaussian", seed0=0
    )
    return [dict(config=cfg, seed=s, p_star=int(p), p_hi=int(p) + 1) for s, p in enumerate(p_stars)]


def test_a_scaling_point_may_set_its_own_group_and_bad_points_are_refused():
    """`(d, seeds, group)` splits that point's seeds into groups of its own; the others keep the
    spec's `group`. Malformed points raise `ValueError` naming the field."""
    from jaxmem.study import scaling_points, ScalingSpec

    units = scaling_points(ScalingSpec(op=((8, 16),), dp=((8, 10, 4),), group=8))
    seeds = {p: [u["seeds"] for u in units if u["problem"] == p] for p in ("op", "dp")}
    assert seeds == {"op": [[0, 8], [8, 16]], "dp": [[0, 4], [4, 8], [8, 10]]}
    for bad in (((8,),), ((8, 16, 4, 1),), ((8, 16, 0),), "8"):
        with pytest.raises(ValueError, match="dp"):
            ScalingSpec(op=((8, 16),), dp=bad)


def test_a_point_may_set_its_resolution_and_an_exact_plan_keeps_its_identity():
    from jaxmem.study import point_configs

    exact = point_configs(d=8, problem="op", seeds=2)[0]
    assert (
        "resolution" not in exact["plan"]
        and point_configs(d=8, problem="op", seeds=2, resolution=1)[0] == exact
    )
    assert point_configs(d=8, problem="op", seeds=2, resolution=3)[0]["plan"]["resolution"] == 3
    assert point_configs(d=192, problem="op", seeds=2)[0]["plan"]["resolution"] == 4
    with pytest.raises(ValueError, match="resolution"):
        point_configs(d=8, problem="op", seeds=2, resolution=0)


def test_scaling_gaps_are_differences_of_medians_with_the_theory_at_the_same_p():
    from jaxmem._tasks import alpha_of
    from jaxmem.study import gap_samples

    rng = np.random.default_rng(1)
    op, dp = rng.integers(500, 540, 33), rng.integers(490, 530, 33)
    recs = _synthetic(64, "op", op) + _synthetic(64, "dp", dp)
    est, _ = gap_samples(recs, 64, "op-dp", np.random.default_rng(0), 200)
    assert est == pytest.approx(alpha_of(64, np.median(op)) - alpha_of(64, np.median(dp)))
    est, boot = gap_samples(recs, 64, "op-theory", np.random.default_rng(0), 200)
    m = float(np.median(op))
    assert est == pytest.approx(alpha_of(64, m) - float(th.alpha_c(m)), abs=1e-4)
    # each bootstrap sample: the theory at its own median (the function's draws), plus the
    # theory's Monte Carlo error (about 1.5e-3)
    med = np.median(np.random.default_rng(0).choice(op, (200, op.size)), axis=1)
    assert boot.shape == (2, 200) and np.array_equal(boot[0], boot[1])  # exact: both ends alike
    theory = {x: float(th.alpha_c(float(x))) for x in np.unique(med)}
    resid = boot[0] - np.array([alpha_of(64, x) - theory[x] for x in med])
    from jaxmem.theory._capacity import DEFAULT_SE as se

    assert abs(resid.mean()) < 4 * se / np.sqrt(200) and 0.5 < resid.std() / se < 1.2
    assert gap_samples(_synthetic(64, "op", [500]), 64, "op-theory", rng) is None


def test_a_rows_interval_depends_on_its_own_records_alone(monkeypatch):
    """Each row's bootstrap draws come from its own generator (`point_rng`): more seeds at
    another `d` leave a row's OP - DP interval as it is, and a trend's ends are the rows'."""
    from jaxmem.study import compare, gap_samples
    from jaxmem.study._stats import point_rng

    rng = np.random.default_rng(3)
    at96 = _synthetic(96, "op", rng.integers(1100, 1140, 33)) + _synthetic(
        96, "dp", rng.integers(1090, 1130, 33)
    )
    few, many = (
        [r for pr in ("op", "dp") for r in _synthetic(64, pr, rng.integers(500, 540, n))] for n in (17, 40)
    )
    row = lambda recs: next(
        r for r in compare(recs, {"problem": "op"}, {"problem": "dp"}, n_boot=300) if r["d"] == 96
    )
    assert row(few + at96) == row(many + at96) == row(at96)
    import jaxmem.study._analysis as analysis

    drawn = []
    real = analysis.gap_samples

    def spy(records, d, gap, rng, n_boot):
        drawn.append((d, real(records, d, gap, rng, n_boot)[1]))
        return real(records, d, gap, point_rng(0, "gap", d, gap), n_boot)

    monkeypatch.setattr(analysis, "gap_samples", spy)
    analysis.gap_trend(few + at96, "op-dp", 64, 96, n_boot=300)
    monkeypatch.undo()
    for d, samples in drawn:  # each end drew what the table's row at its `d` draws
        assert np.array_equal(
            samples, gap_samples(few + at96, d, "op-dp", point_rng(0, "gap", d, "op-dp"), 300)[1]
        )
    assert [d for d, _ in drawn] == [64, 96]


def test_bracketed_thresholds_widen_every_interval_around_the_exact_one():
    """Seeds whose thresholds are only bracketed (a search at `resolution > 1`) enter each end of
    a CI with the end of their bracket: with the same resamples, the CIs of the capacity, of
    OP - DP and OP - theory, and of a trend contain those of the exact thresholds inside the
    brackets, and equal them where every bracket is closed."""
    from jaxmem import median_capacity
    from jaxmem.study import compare, gap_samples, gap_trend
    from jaxmem.study._analysis import _ci_verdict

    rng = np.random.default_rng(2)
    exact = {
        (d, pr): rng.integers(base - 20, base + 20, 33) + (4 if pr == "op" else 0)
        for d, base in ((64, 520), (96, 1120))
        for pr in ("op", "dp")
    }

    def recs(widen):
        out = []
        for (d, pr), ps in exact.items():
            for r, p in zip(_synthetic(d, pr, ps), ps):
                below, above = (rng.integers(0, 4), rng.integers(0, 4)) if widen else (0, 0)
                lo, hi = int(p - below), int(p + above + 1)
                out.append(dict(r, p_star=lo, p_hi=hi))
        return out

    sharp, wide = recs(False), recs(True)
    contains = lambda a, b: a["ci_low"] <= b["ci_low"] and b["ci_high"] <= a["ci_high"]
    for gap in ("op-dp", "op-theory"):
        a, b = (
            _ci_verdict(*gap_samples(x, 96, gap, np.random.default_rng(0), 300), "", "", 33)
            for x in (wide, sharp)
        )
        assert contains(a, b) and a["ci_high"] - a["ci_low"] > b["ci_high"] - b["ci_low"]
        t_wide, t_sharp = (gap_trend(x, gap, 64, 96, n_boot=300) for x in (wide, sharp))
        assert contains(t_wide, t_sharp)
    cmp = [compare(x, {"problem": "op"}, {"problem": "dp"}, n_boot=300)[0] for x in (wide, sharp)]
    assert contains(*cmp)
    for d, pr in exact:
        a, b = (
            median_capacity([r["p_star"] for r in x if sel(r)], [r["p_hi"] for r in x if sel(r)], d)
            for x in (wide, sharp)
            for sel in [lambda r: (r["config"]["d"], r["config"]["problem"]) == (d, pr)]
        )
        assert contains(a, b)
    again = compare(sharp, {"problem": "op"}, {"problem": "dp"}, n_boot=300)[0]
    assert again == cmp[1]


def test_the_scaling_trend_verdict_is_what_its_ci_decides():
    from jaxmem.study import gap_trend, trend_note

    def recs(gap16, gap64, n=40, spread=0):
        rng = np.random.default_rng(0)
        jitter = lambda: rng.integers(-spread, spread + 1, n)
        return (
            _synthetic(16, "op", 60 + gap16 + jitter())
            + _synthetic(16, "dp", 60 + jitter())
            + _synthetic(64, "op", 520 + gap64 + jitter())
            + _synthetic(64, "dp", 520 + jitter())
        )

    shrinks = gap_trend(recs(3, 0), "op-dp", 16, 64, n_boot=200)
    assert shrinks["verdict"] == "shrinks" and shrinks["ci_low"] > 0
    grows = gap_trend(recs(0, 3), "op-dp", 16, 64, n_boot=200)
    assert grows["verdict"] == "does not shrink" and grows["ci_high"] < 0
    # the size counts: a negative gap that closes shrinks; one that overshoots to the other
    # side by more does not
    assert gap_trend(recs(-3, 0), "op-dp", 16, 64, n_boot=200)["verdict"] == "shrinks"
    assert gap_trend(recs(2, -40), "op-dp", 16, 64, n_boot=200)["verdict"] == "does not shrink"
    # a gap at d1 whose own CI holds 0 decides nothing
    spread = 60 + np.arange(-12, 13, 3)  # OP and DP alike: a gap of 0 with a wide CI
    same = _synthetic(16, "op", spread) + _synthetic(16, "dp", spread)
    noisy = gap_trend(same + recs(0, 3)[-80:], "op-dp", 16, 64, n_boot=200)
    assert noisy["verdict"] == "undecided" and noisy["seeds_to_decide"] > 8
    assert "**undecided** (about" in trend_note(noisy)
    assert gap_trend(recs(1, 0), "op-dp", 16, 128) is None


def test_scaling_report_from_records_alone(tmp_path, capsys):
    """The scaling study's `write` reads a folder's records and writes only its three files; its capacities
    are those of `jaxmem capacity DIR`."""
    from jaxmem.study import measure, point_configs, Scaling, Store, write

    out = str(tmp_path / "scaling")
    units = [c for pr in ("op", "dp") for c in point_configs(d=6, problem=pr, seeds=6, group=6)]
    measure(units, store=Store(out))
    before = sorted(os.listdir(out))
    study = Scaling(band_samples=64)
    path, tables = write(study, out)
    summary = study.summary(tables)
    assert sorted(set(os.listdir(out)) - set(before)) == [
        "scaling.json",
        "scaling.md",
        "scaling.pdf",
        "scaling.png",
    ]
    (row,) = summary["table"]
    assert set(row["gaps"]) == {"op-dp", "op-theory", "dp-theory"}
    assert main(["capacity", out, "--json"]) == 0
    got = {r["problem"]: r["alpha_c"] for r in json.loads(capsys.readouterr().out)["rows"]}
    assert got == {"op": row["op"]["alpha_c"], "dp": row["dp"]["alpha_c"]}
    with open(path) as f:
        assert "| 6 | 6/6 |" in f.read()


def test_rank_report_from_records_alone(tmp_path, capsys):
    """The rank study's `write` reads a rank study's records and writes only its four files: per `kappa` and
    problem the lower-bound row of `jaxmem capacity DIR`, its uncertified gap against the
    full-rank thresholds of the same tasks, and Adam against it seed by seed."""
    from jaxmem.study import measure, Rank, rank_points, RankSpec, Store, write

    out = str(tmp_path / "rank")
    spec = RankSpec(points=((6, (0.5,), 6),), adam=((6, 4),), steps=300, group=6)
    units = rank_points(spec)
    assert [(u["model"], u["solver"], u["problem"]) for u in units] == [
        ("full", "certified", "op"),
        ("full", "certified", "dp"),
        ("factored", "certified", "op"),
        ("factored", "adam", "op"),
        ("factored", "certified", "dp"),
    ]
    measure(units, store=Store(out))
    before = sorted(os.listdir(out))
    path, table = write(Rank(), out)
    summary = Rank().summary(table)
    assert sorted(set(os.listdir(out)) - set(before)) == ["rank.json", "rank.md", "rank.pdf", "rank.png"]
    assert [(r["kappa"], r["problem"]) for r in summary["rows"]] == [(0.5, "op"), (0.5, "dp")]
    assert main(["capacity", out, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    for r in summary["rows"]:
        (same,) = [
            x
            for x in rows
            if x["model"] == "factored" and x["solver"] == "certified" and x["problem"] == r["problem"]
        ]
        assert same["lower_bound"] and r["certified"]["alpha_c"] == same["alpha_c"]
        assert r["certified"]["gap_paired"] == 6 and r["adam_paired"] == (4 if r["problem"] == "op" else None)
        # a rank-m memory stores nothing that full rank does not: the gap is never negative
        assert r["certified"]["gap_alpha"] >= 0
    (diff,) = summary["op_dp"]
    assert diff["kappa"] == 0.5 and diff["ci_low"] <= diff["diff"] <= diff["ci_high"]
    with open(path) as f:
        text = f.read()
    assert "| 6 | 0.50 | OP | 6 |" in text and "lower bound" in text


def test_the_committed_scaling_study_is_what_its_records_give(capsys):
    """docs/scaling holds the scaling study's records; its `scaling.json` and `scaling.md` are what
    they give (capacities and CIs re-read here, and by `jaxmem capacity DIR --json`), and the
    table of docs/results/scaling.md is `scaling.md`'s."""
    from jaxmem.study import Store, threshold_rows

    root = os.path.join(os.path.dirname(__file__), "..")
    folder = os.path.join(root, "docs", "scaling")
    with open(os.path.join(folder, "scaling.json")) as f:
        summary = json.load(f)
    records = [r for r in Store(folder).records() if r.get("kind") == "threshold"]
    rows = threshold_rows(records, theory=False)
    got = {(r["d"], r["problem"]): (r["p_c"], r["alpha_c"], r["ci_low"], r["ci_high"]) for r in rows}
    want = {
        (t["d"], pr): tuple(t[pr][k] for k in ("p_c", "alpha_c", "ci_low", "ci_high"))
        for t in summary["table"]
        for pr in ("op", "dp")
        if t[pr] is not None
    }
    assert got == want
    assert main(["capacity", folder, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert {
        (r["d"], r["problem"]): (r["p_c"], r["alpha_c"], r["ci_low"], r["ci_high"]) for r in cli["rows"]
    } == want
    with open(os.path.join(folder, "scaling.md")) as f:
        table = [line for line in f if line.startswith("| ") and line[2].isdigit()]
    with open(os.path.join(root, "docs", "results", "scaling.md")) as f:
        page = f.read()
    assert len(table) == len(summary["table"]) and all(line in page for line in table)


def test_the_committed_rank_study_is_what_its_records_give(capsys):
    """docs/rank holds the rank study's records; `rank.json` holds the lower bounds (and their
    uncertified gaps) that `jaxmem capacity DIR --json` gives from them, and the table of docs/results/rank.md
    is `rank.md`'s."""
    root = os.path.join(os.path.dirname(__file__), "..")
    folder = os.path.join(root, "docs", "rank")
    with open(os.path.join(folder, "rank.json")) as f:
        summary = json.load(f)
    fields = ("p_c", "alpha_c", "ci_low", "ci_high", "gap_seeds", "gap_paired")
    want = {(r["kappa"], r["problem"]): tuple(r["certified"][k] for k in fields) for r in summary["rows"]}
    assert main(["capacity", folder, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["rows"]
    got = {
        (r["kappa"], r["problem"]): tuple(r[k] for k in fields)
        for r in cli
        if r["model"] == "factored" and r["solver"] == "certified"
    }
    assert got == want and all(r["lower_bound"] for r in summary["rows"] for r in [r["certified"]])
    with open(os.path.join(folder, "rank.md")) as f:
        table = [line for line in f if line.startswith("| ") and line[2].isdigit()]
    with open(os.path.join(root, "docs", "results", "rank.md")) as f:
        page = f.read()
    assert len(table) == len(summary["rows"]) and all(line in page for line in table)


def test_the_readmes_headline_table_is_the_scaling_studys():
    """Each row of the README's results table repeats its `d`'s cells of `docs/scaling/scaling.md`
    (d, seeds, OP, DP, theory)."""
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "docs", "scaling", "scaling.md")) as f:
        study = {
            c[0]: c for line in f if line.startswith("| ") and line[2].isdigit() for c in [line.split(" | ")]
        }
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    start = text.index("| d | seeds OP/DP | OP | DP | theory OP/DP |")
    rows = [line.split(" | ") for line in text[start:].splitlines()[2:] if line.startswith("| ")]
    assert len(rows) >= 4
    for cells in rows:
        want = study[cells[0]]
        assert cells[1:4] == want[1:4] and cells[4].rstrip(" |") == want[4], cells
