import json
import subprocess
import sys

import jaxmem as jm
import pytest
from jaxmem.cli import main


def _run(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_train_json_keys(capsys):
    rc, out, err = _run(["train", "--d", "8", "--p", "12", "--seeds", "2", "--steps", "50", "--json"], capsys)
    assert rc == 0
    obj = json.loads(out)
    for k in (
        "d",
        "p",
        "alpha",
        "problem",
        "model",
        "kappa",
        "seeds",
        "accuracy",
        "all_stored",
        "steps_to_store",
        "fraction_all_stored",
        "seconds",
    ):
        assert k in obj
    assert len(obj["accuracy"]) == 2 and obj["d"] == 8 and obj["p"] == 12
    assert obj["train"] == jm.TrainConfig(steps=50).identity()  # every setting it ran with


def test_train_hebbian_and_factored(capsys):
    rc, out, _ = _run(
        ["train", "--d", "8", "--alpha", "0.3", "--model", "hebbian", "--seeds", "2", "--json"], capsys
    )
    assert rc == 0 and json.loads(out)["model"] == "hebbian"
    rc, out, _ = _run(
        [
            "train",
            "--d",
            "8",
            "--alpha",
            "0.3",
            "--model",
            "factored",
            "--kappa",
            "0.5",
            "--seeds",
            "2",
            "--steps",
            "20",
            "--json",
        ],
        capsys,
    )
    assert rc == 0 and json.loads(out)["kappa"] == 0.5


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--d", "1", "--p", "5"],
        ["train", "--d", "8", "--p", "1"],
        ["train", "--d", "8", "--alpha", "0"],
        ["train", "--d", "8", "--alpha", "-1"],
        ["train", "--d", "8", "--p", "5", "--model", "factored", "--kappa", "1.5"],
        ["train", "--d", "8", "--p", "5", "--model", "factored", "--kappa", "0"],
        ["train", "--d", "8", "--p", "5", "--lr", "0"],
        ["train", "--d", "8", "--p", "5", "--problem", "xp"],
        ["train", "--d", "8", "--p", "5", "--model", "mlp"],
        ["train", "--d", "8"],
        ["theory", "capacity", "--p", "1"],
        ["theory", "capacity", "--p", "100", "--kappa", "2"],
        ["theory", "saddle", "--alpha", "-0.1", "--p", "100"],
        ["theory", "hebbian", "--d", "1", "--p", "10"],
        ["theory", "listwise", "--r", "0"],
        ["nonsense"],
    ],
)
def test_bad_arguments_exit_2_one_line(args, capsys):
    rc, out, err = _run(args, capsys)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_console_script_exit_code():
    r = subprocess.run(
        [sys.executable, "-m", "jaxmem.cli", "train", "--d", "1", "--p", "3"], capture_output=True, text=True
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args,keys",
    [
        (
            ["theory", "capacity", "--p", "1000", "--se-target", "0.01"],
            ["p", "kappa", "alpha_c", "alpha_c_se", "E_dist2"],
        ),
        (["theory", "capacity", "--p", "inf", "--kappa", "0.5"], ["alpha_c"]),
        (
            ["theory", "saddle", "--alpha", "0.3", "--p", "100"],
            ["alpha", "p", "q", "q_se", "free_entropy", "free_entropy_se", "status", "steps", "samples"],
        ),
        (["theory", "hebbian", "--d", "32", "--p", "72", "--problem", "dp"], ["accuracy", "p_all_stored"]),
        pytest.param(
            ["theory", "transition", "--d", "64"],
            [
                "d",
                "kappa",
                "p_50",
                "p_50_se",
                "alpha_50",
                "alpha_50_se",
                "alpha_p75",
                "alpha_p25",
                "alpha_p75_se",
            ],
            marks=pytest.mark.slow,
        ),
        (["theory", "listwise", "--r", "0.1"], ["alpha_G_c"]),
    ],
)
def test_theory_json(args, keys, capsys):
    rc, out, _ = _run(args + ["--json"], capsys)
    assert rc == 0
    obj = json.loads(out)
    for k in keys:
        assert k in obj


@pytest.mark.parametrize("p", ["1e12", "1e6"])
def test_theory_saddle_at_huge_p(p, capsys):
    """`jaxmem theory saddle --alpha 0.5 --p 1e12 --json`: success, q in (0, 1) with its error
    (the cost does not grow with p; timings in benchmarks/README.md)."""
    rc, out, _ = _run(["theory", "saddle", "--alpha", "0.5", "--p", p, "--json"], capsys)
    obj = json.loads(out)
    assert rc == 0 and obj["status"] == "success"
    assert 0 < obj["q"] < 1 and 0 < obj["q_se"] <= 0.003


def test_version_names_the_commit_of_a_checkout(capsys):
    import os

    import jaxmem

    with pytest.raises(SystemExit, match="0"):
        main(["--version"])
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"jaxmem {jaxmem.__version__}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(jaxmem.__file__)))
    if os.path.isdir(os.path.join(root, ".git")):
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
        assert f"(git {head.stdout.strip()}" in out


def test_a_folders_rows_as_json_csv_and_a_data_frame(tmp_path, capsys):
    """`--json` keeps its progress on stderr; `capacity DIR --csv` and `jm.load(DIR)` give the
    rows that `capacity DIR --json` gives, one per point."""
    import csv
    import io

    out = str(tmp_path / "c")
    rc, text, err = _run(
        ["capacity", "--d", "6", "--problem", "op", "dp", "--seeds", "8", "--out", out, "--json"], capsys
    )
    assert rc == 0 and "done in" in err  # progress, on stderr
    measured = json.loads(text)["rows"]
    rc, text, _ = _run(["capacity", out, "--json", "--quiet"], capsys)
    rows = json.loads(text)["rows"]
    assert rc == 0 and [(r["problem"], r["p_c"], r["ci_low"]) for r in rows] == [
        (r["problem"], r["p_c"], r["ci_low"]) for r in measured
    ]
    rc, text, err = _run(["capacity", out, "--csv", "--quiet"], capsys)
    table = list(csv.DictReader(io.StringIO(text)))
    assert rc == 0 and err == "" and len(table) == len(rows) == 2
    assert [(t["problem"], float(t["p_c"]), float(t["alpha_c"])) for t in table] == [
        (r["problem"], r["p_c"], r["alpha_c"]) for r in rows
    ]
    df = jm.load(out)
    assert list(df.problem) == [r["problem"] for r in rows] and list(df.p_c) == [r["p_c"] for r in rows]
    assert "settings.decide.tol" in df.columns and (df["settings.decide.tol"] == 1e-5).all()
    typed = jm.read_tables(out)
    assert [r["p_c"] for r in typed.rows] == list(df.p_c)
    assert [(r["ci_low"], r["ci_high"], r["theory_verdict"]) for r in typed.to_json()["rows"]] == [
        (r["ci_low"], r["ci_high"], r["theory_verdict"]) for r in rows
    ]
    with pytest.raises(jm.InvalidArgument, match="folder"):
        jm.read_tables(str(tmp_path / "missing"))


def test_load_without_pandas_names_the_extra(monkeypatch):
    from jaxmem.study import Tables

    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"jaxmem\[pandas\]"):
        Tables(rows=(), op_vs_dp=(), adam_vs_certified=()).to_pandas()
