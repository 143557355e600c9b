"""Bad invocations of every subcommand: each exits 2 with exactly one line on stderr that names
the argument, and writes nothing. Every case runs through `main` in this process; one case per
subcommand also runs through the real console script (no traceback, no C++ abort)."""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from jaxmem.cli import main


# (the argument the message must name, the command line)
BAD = [
    ("--seeds", "train --d 8 --p 10 --seeds 0"),
    ("--seeds", "train --d 8 --p 10 --seeds 1000000000"),
    ("d, p", "train --d 1000000000 --p 2"),
    ("--lr", "train --d 8 --p 10 --model hebbian --lr -5"),
    ("--steps", "train --d 8 --p 10 --model hebbian --steps -3"),
    ("--lr", "train --d 8 --p 10 --lr a"),
    ("kappa", "train --d 8 --p 10 --kappa 0.5"),
    ("alpha", "train --d 8 --alpha 1e-12"),
    ("--d", "train --d 1 --p 3"),
    ("--p", "sweep --d 8 --p inf --out X"),
    ("--p", "sweep --d 8 --p 1e300 --out X"),
    ("--p", "sweep --d 8 --p 2.7 --out X"),
    ("--p", "sweep --d 8 --p a --out X"),
    ("--p", "sweep --d 8 --p a:20:3 --out X"),
    ("--alpha", "sweep --d 8 --alpha 0:1:3 --out X"),
    ("--kappa", "sweep --d 8 --p 10 --model hebbian --kappa 1.5 --out X"),
    ("--kappa", "sweep --d 8 --p 10 --model hebbian --kappa nan --out X"),
    ("kappa", "sweep --d 8 --p 10 --model hebbian --kappa 0.5 --out X"),
    ("--alpha", "sweep --d 8 --alpha 0.1:1:100000000 --out X"),
    ("--alpha", "sweep --d 8 --alpha 0.1:1 --out X"),
    ("--shard", "sweep --d 8 --p 10 --shard 3/2 --out X"),
    ("--shard", "sweep --d 8 --p 10 --shard x --out X"),
    ("--seeds", "sweep --d 8 --p 10 --seeds 0 --out X"),
    ("--lr", "sweep --d 8 --p 10 --lr 0 --out X"),
    ("--init-scale", "sweep --d 8 --p 10 --init-scale 0 --out X"),
    ("--seed0", "sweep --d 8 --p 10 --seed0 4294967296 --out X"),
    ("--out", "demo --out"),
    ("--quick", "demo --quick=3 --out X"),
    ("--d", "capacity --d 1"),
    ("--seeds", "capacity --d 16 --seeds 0 --out X"),
    ("--tol", "capacity --d 16 --tol -1 --out X"),
    ("--kappa", "capacity --d 16 --model factored --out X"),
    ("kappa = 0.01", "capacity --d 8 --model factored --kappa 0.01 --seeds 2 --out X"),
    ("kappa", "capacity --d 16 --kappa 0.5 --out X"),
    ("--shard", "capacity --d 16 --shard 2/2 --out X"),
    ("--criterion", "capacity --d 16 --solver adam --criterion accuracy:1.5 --out X"),
    ("--criterion", "capacity --d 16 --solver adam --criterion most --out X"),
    ("--criterion", "capacity --d 16 --criterion accuracy:0.99 --out X"),
    ("dir", "capacity missing"),
    ("dir", "capacity"),
    ("dir", "report missing"),
    ("dir", "report missing --json"),
    ("--p", "theory saddle --alpha 0.3 --p inf"),
    ("--p", "theory saddle --alpha 0.3 --p 1.5"),
    ("--max-samples", "theory saddle --alpha 0.3 --p 100 --max-samples 100000000"),
    ("--max-samples", "theory saddle --alpha 0.3 --p 100 --max-samples -1"),
    ("--se-target", "theory saddle --alpha 0.3 --p 100 --se-target 0"),
    ("--alpha", "theory saddle --alpha 0 --p 100"),
    ("--d", "theory transition --d 1"),
    ("--kappa", "theory transition --d 16 --kappa 0"),
    ("--se-target", "theory capacity --p 100 --se-target -1"),
    ("--se-target", "theory capacity --p 100 --se-target 0"),
    ("--se-target", "theory capacity --p 100 --se-target nan"),
    ("--p", "theory capacity --p 1"),
    ("--kappa", "theory capacity --p 100 --kappa 0"),
    ("--r", "theory listwise --r 2"),
    ("--d", "theory hebbian --d 0 --p 10"),
    ("--problem", "theory hebbian --d 8 --p 10 --problem xp"),
    ("--shard", "capacity --d 8 --plan --shard 5/2"),
    ("--seeds", "capacity missing --seeds 4"),
    ("--tol", "capacity --d 8 --out X --tol 0.3"),
    ("d must be >= 3", "capacity --d 2 --solver hebbian --out X"),
    ("d, seeds and group", "capacity --d 4096 --seeds 16 --out X"),
    ("p", "theory capacity --p 1e308"),
]


def _script():
    exe = os.path.join(os.path.dirname(sys.executable), "jaxmem")
    return exe if os.path.exists(exe) else shutil.which("jaxmem")


def _run(case, root):
    name, args = case
    cwd = os.path.join(root, f"case{BAD.index(case)}")
    os.makedirs(cwd)
    r = subprocess.run([_script(), *args.split()], cwd=cwd, capture_output=True, text=True, timeout=120)
    return r, os.listdir(cwd)


def _verdict(case, rc, stderr, written):
    name, args = case
    lines = stderr.strip().splitlines()
    # one line, with the one prefix every subcommand uses, naming the argument
    one = len(lines) == 1 and re.match(r"^jaxmem( [a-z]+)*: error: ", lines[0]) is not None
    ok = rc == 2 and one and name in lines[0] and not written
    return None if ok else f"jaxmem {args}: rc={rc}, stderr={lines[:3]}, wrote={written}"


def test_bad_invocations_exit_2_with_one_line_naming_the_argument(tmp_path, monkeypatch, capsys):
    bad = []
    for k, case in enumerate(BAD):
        cwd = tmp_path / f"case{k}"
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        rc = main(case[1].split())
        bad.append(_verdict(case, rc, capsys.readouterr().err, os.listdir(cwd)))
    assert not any(bad), "\n".join(b for b in bad if b)


def test_bad_invocations_through_the_console_script(tmp_path):
    if _script() is None:
        pytest.skip("the jaxmem console script is not installed")
    # the first case of each subcommand (and of each theory command)
    seen, cases = set(), []
    for case in BAD:
        words = case[1].split()
        head = tuple(words[:2]) if words[0] == "theory" else words[0]
        if head not in seen:
            seen.add(head)
            cases.append(case)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: _run(c, str(tmp_path)), cases))
    bad = [_verdict(case, r.returncode, r.stderr, written) for case, (r, written) in zip(cases, results)]
    assert len(cases) >= 10 and not any(bad), "\n".join(b for b in bad if b)
