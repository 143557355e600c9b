"""(c) Memory of one training step at p = 32768, d = 128 (OP): streaming cross-entropy against
the dense path. XLA's compiled memory analysis for both (the dense step is compiled, never
run: it does not fit), and the streaming step run for real in a child process whose peak
resident memory is read from the OS.

    python benchmarks/memory.py
"""

import json
import resource
import subprocess
import sys
import time

import jax
import jaxmem as jm
import optax
from _common import write


P, D = 32768, 128


def step_fn(stream):
    opt = optax.adam(1e-2)

    def step(params, st, task):
        loss, g = jax.value_and_grad(
            lambda pr: jm.cross_entropy(pr.project(task.inputs), task, stream=stream)[0]
        )(params)
        u, st = opt.update(g, st, params)
        return optax.apply_updates(params, u), st, loss

    return jax.jit(step), opt


def setup():
    task = jm.make_task(jax.random.key(0), d=D, p=P)
    params = jm.FullRank.init(task.init_key, D)
    return task, params


def analysis(stream):
    task, params = setup()
    f, opt = step_fn(stream)
    m = f.lower(params, opt.init(params), task).compile().memory_analysis()
    return dict(
        temp_bytes=m.temp_size_in_bytes,
        argument_bytes=m.argument_size_in_bytes,
        output_bytes=m.output_size_in_bytes,
        total_bytes=m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes,
    )


def child():
    task, params = setup()
    f, opt = step_fn(True)
    st = opt.init(params)
    jax.block_until_ready((task, params, st))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t = time.perf_counter()
    out = jax.block_until_ready(f(params, st, task))
    elapsed = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            dict(
                peak_rss_bytes=peak,
                rss_before_step_bytes=base,
                step_seconds_with_compile=elapsed,
                loss=float(out[2]),
            )
        )
    )


def main():
    dense = analysis(False)
    stream = analysis(True)
    r = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, check=True)
    run = json.loads(r.stdout.strip().splitlines()[-1])
    res = dict(
        p=P, d=D, dense_compiled=dense, stream_compiled=stream, stream_run=run, dense_scores_bytes=4 * P * P
    )
    gb = 1 / 2**30
    print(f"one training step, OP, p={P}, d={D}")
    print(
        f"dense path (compiled, not run):  XLA temp {dense['temp_bytes'] * gb:6.2f} GiB, total "
        f"{dense['total_bytes'] * gb:6.2f} GiB "
        f"(the p x p float32 score matrix alone is {4 * P * P * gb:.1f} GiB)"
    )
    print(
        f"streaming (compiled):            XLA temp {stream['temp_bytes'] * gb:6.3f} GiB, total "
        f"{stream['total_bytes'] * gb:6.3f} GiB"
    )
    print(
        f"streaming (run): peak RSS of the whole process {run['peak_rss_bytes'] * gb:.2f} GiB "
        f"({run['rss_before_step_bytes'] * gb:.2f} GiB before the step; step incl. compile "
        f"{run['step_seconds_with_compile']:.1f} s)"
    )
    print(f"written {write('memory', res)}")


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
