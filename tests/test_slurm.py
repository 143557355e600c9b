"""The SLURM recipe against a real SLURM: a single-node cluster (munged, slurmctld, slurmd from
Debian's slurm-wlm and munge, a minimal slurm.conf in a temporary folder, no systemd, no
cgroups) started for this module and stopped after it, leaving nothing running.

Through it, with the repo's own scripts/slurm_submit.sh and scripts/slurm_array.sbatch: an
array's merged table equals a one-process run row by row and seed by seed; a task requeued while
it runs loses and duplicates nothing; a second array into the same folder with other settings
stays apart. Marked `slurm` (`python -m pytest -m slurm`; `.ci/run` installs the packages and
runs it); skipped with the reason where the daemons or root are missing."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest


pytestmark = pytest.mark.slurm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBMIT = os.path.join(ROOT, "scripts", "slurm_submit.sh")
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
# 4 units: d = 8 and 12, OP and DP, one group of 8 seeds each
COMMAND = "jaxmem capacity --d 8 12 --problem op dp --seeds 8 --group 8 --quiet"
OTHER = "jaxmem capacity --d 8 --problem op --seeds 8 --group 8 --embedding unit --quiet"
WAIT = 600  # seconds any array may take, at most


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(tmp: str, host: str) -> str:
    ctld, d = _free_port(), _free_port()
    plugins = next(
        (
            p
            for p in ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm")
            if os.path.isdir(p)
        ),
        None,
    )
    lines = [
        "ClusterName=jaxmemtest",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld}",
        f"SlurmdPort={d}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={tmp}/munge/munge.socket",
        "CredType=cred/munge",
        f"StateSaveLocation={tmp}/state",
        f"SlurmdSpoolDir={tmp}/spool",
        f"SlurmctldPidFile={tmp}/slurmctld.pid",
        f"SlurmdPidFile={tmp}/slurmd.pid",
        f"SlurmctldLogFile={tmp}/log/slurmctld.log",
        f"SlurmdLogFile={tmp}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "MinJobAge=600",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 RealMemory=4000 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]
    if plugins:
        lines.append(f"PluginDir={plugins}")
    path = os.path.join(tmp, "slurm.conf")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _until(what: str, ok, timeout: float, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = ok()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node SLURM: yields the environment that reaches it (`SLURM_CONF`, and
    `PATH` with this interpreter's scripts first); stops every daemon it started afterwards."""
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(
            f"SLURM is not installed ({', '.join(missing)} missing): apt-get install slurmctld slurmd "
            "slurm-client munge, as .ci/run does"
        )
    if os.geteuid() != 0:
        pytest.skip("the test cluster runs its daemons as root")
    tmp = str(tmp_path_factory.mktemp("slurm"))
    os.chmod(tmp, 0o755)
    for sub in ("munge", "state", "spool", "log", "work"):
        os.makedirs(os.path.join(tmp, sub))
    os.chmod(os.path.join(tmp, "munge"), 0o700)
    key = os.path.join(tmp, "munge", "munge.key")
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    os.chmod(key, 0o400)
    host = socket.gethostname().split(".")[0]
    conf = _conf(tmp, host)
    env = dict(
        os.environ, SLURM_CONF=conf, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    )
    log = open(os.path.join(tmp, "log", "daemons.out"), "w")
    m = os.path.join(tmp, "munge")
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [
                    "munged",
                    "--force",
                    "--foreground",
                    f"--key-file={key}",
                    f"--socket={m}/munge.socket",
                    f"--pid-file={m}/munged.pid",
                    f"--log-file={m}/munged.log",
                    f"--seed-file={m}/munged.seed",
                ],
                stdout=log,
                stderr=log,
            )
        )
        _until("munged's socket", lambda: os.path.exists(f"{m}/munge.socket"), 30)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", conf], stdout=log, stderr=log, env=env))
        procs.append(subprocess.Popen(["slurmd", "-D", "-f", conf], stdout=log, stderr=log, env=env))

        def idle():
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env)
            return r.returncode == 0 and r.stdout.strip() == "idle"

        _until("the node to be idle", idle, 60)
        yield dict(env=env, work=os.path.join(tmp, "work"), procs=procs)
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
    # nothing this fixture started runs on (every daemon names the folder in its arguments)
    left = subprocess.run(["pgrep", "-af", tmp], capture_output=True, text=True).stdout.strip()
    assert not left, f"left running: {left}"


def _squeue(env, job: str) -> list[tuple[str, str, str]]:
    r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %t %r"], capture_output=True, text=True, env=env)
    return [tuple(x.split()) for x in r.stdout.strip().splitlines()]


def _submit(env, cwd: str, out: str, command: str) -> tuple[str, str]:
    r = subprocess.run(
        [SUBMIT, out, *command.split()], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )
    assert r.returncode == 0, r.stderr
    array, merge = r.stdout.split()
    return array, merge


def _wait(env, *jobs: str) -> None:
    _until(f"jobs {', '.join(jobs)} to end", lambda: not any(_squeue(env, j) for j in jobs), WAIT, every=1)


def _table(env, folder: str) -> list[dict]:
    r = subprocess.run(
        ["jaxmem", "capacity", folder, "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    # a row's own numbers: not its wall time, nor `differs` (how it differs from its neighbours)
    return [
        {k: v for k, v in row.items() if k not in ("seconds", "differs")}
        for row in json.loads(r.stdout)["rows"]
    ]


def _thresholds(folder: str) -> dict:
    """Every unit file's per-seed thresholds, after checking that its seeds are exactly the ones
    its config names, each once (none lost, none twice)."""
    out = {}
    records = os.path.join(folder, "records")
    for name in sorted(os.listdir(records)):
        with open(os.path.join(records, name)) as f:
            recs = [json.loads(x) for x in f]
        s0, s1 = recs[0]["config"]["seeds"]
        seeds = [r["seed"] for r in recs]
        assert sorted(seeds) == list(range(s0, s1)), f"{name}: seeds {seeds}"
        out[name] = sorted((r["seed"], r["p_star"], r["p_hi"], r["exact"], r["censored"]) for r in recs)
    return out


def test_an_array_with_a_requeued_task_equals_one_process(slurm, tmp_path):
    env, cwd = slurm["env"], slurm["work"]
    out = str(tmp_path / "array")
    array, merge = _submit(env, cwd, out, COMMAND)
    # requeue task 0 while it runs (the scheduler's preemption path), and let it start again
    _until("task 0 to run", lambda: "R" in {s for i, s, _ in _squeue(env, f"{array}_0")}, WAIT)
    subprocess.run(["scontrol", "requeue", f"{array}_0"], check=True, env=env, capture_output=True)
    _until("task 0 to be pending again", lambda: any(s == "PD" for _, s, _ in _squeue(env, f"{array}_0")), 60)
    subprocess.run(["scontrol", "update", f"jobid={array}_0", "StartTime=now"], check=True, env=env)
    _wait(env, array, merge)

    logs = os.listdir(os.path.join(out, "logs"))
    assert len([x for x in logs if x.startswith(f"jaxmem-{array}_")]) == 4, logs
    with open(os.path.join(out, "logs", f"jaxmem-{array}_0.out")) as f:
        first = f.read()
    assert "restart 0" in first and "restart 1" in first, first  # both runs of task 0, appended
    with open(os.path.join(out, "logs", f"jaxmem-merge-{merge}.out")) as f:
        merged = f.read()
    assert "d problem" in merged.splitlines()[0], merged

    one = str(tmp_path / "one")
    r = subprocess.run([*COMMAND.split(), "--out", one], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert _table(env, out) == _table(env, one)  # row by row
    assert _thresholds(out) == _thresholds(one)  # the same unit files, seed by seed

    # a second array into the same folder, other settings: its own row beside the four
    array2, merge2 = _submit(env, cwd, out, OTHER)
    _wait(env, array2, merge2)
    rows = _table(env, out)
    assert len(rows) == 5
    assert [r for r in rows if r["embedding"] == "gaussian"] == _table(env, one)
    assert [(r["d"], r["problem"]) for r in rows if r["embedding"] == "unit"] == [(8, "op")]
    assert len(_thresholds(out)) == 5
