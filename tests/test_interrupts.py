"""Interrupts through the real console script: SIGINT and SIGTERM end a command at once (even
inside a compiled theory loop) with one line, and worker processes never outlive their parent."""

import os
import signal
import subprocess
import sys
import time

import pytest


def _start(args, tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "jaxmem")
    return subprocess.Popen(
        [exe, *args], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _children(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(entry))
    return kids


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(cond, timeout):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if cond():
            return True
        time.sleep(0.2)
    return False


def _demo_with_workers(tmp_path):
    proc = _start(["demo", "--quick", "--jobs", "2", "--out", "out"], tmp_path)
    # the resource tracker and two spawned workers
    assert _wait_for(lambda: len(_children(proc.pid)) >= 3, 120), "the workers never started"
    return proc, _children(proc.pid)


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def test_a_theory_loop_ends_at_once_on_sigint(tmp_path):
    proc = _start(
        [
            "theory",
            "saddle",
            "--alpha",
            "0.3",
            "--p",
            "100",
            "--se-target",
            "1e-12",
            "--max-samples",
            "4194304",
        ],
        tmp_path,
    )
    time.sleep(6)  # inside the compiled sampling loop by now
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=10)[1].strip().splitlines()
    assert proc.returncode == 130 and time.time() - t0 < 5
    # the interrupt's one line, after the command's own progress line
    assert err[-1] == "jaxmem: interrupted (SIGINT)", err
    assert all(line.startswith("jaxmem theory: computing") for line in err[:-1]), err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_parent_ends_its_workers_and_its_queue(tmp_path, sig):
    proc, kids = _demo_with_workers(tmp_path)
    proc.send_signal(sig)
    err = proc.communicate(timeout=10)[1].strip().splitlines()
    assert proc.returncode == 128 + sig
    assert err[-1] == f"jaxmem: interrupted ({signal.Signals(sig).name})", err
    assert _wait_for(lambda: not any(map(_alive, kids)), 10), "a worker outlived its parent"


def test_workers_die_with_a_killed_parent(tmp_path):
    proc, kids = _demo_with_workers(tmp_path)
    proc.kill()
    # A spawned worker watches its parent once its initializer runs, after its imports, which
    # take seconds on a loaded machine; until then it holds the parent's pipes open.
    proc.communicate(timeout=60)
    assert _wait_for(lambda: not any(map(_alive, kids)), 10), "a worker outlived its parent"
