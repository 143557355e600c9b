"""The expected cost of the OP at accelerator sizes (`SCALING_ACCELERATOR`: d = 512 and 1024),
from the measured per-decision costs of a scaling folder's working-set records.

    python benchmarks/paper_cost.py docs/scaling --device-peak-tflops 67

Measured, per `d` of the folder's certified OP points run by the working-set decider: decisions
per seed, inner iterations per decision, their FLOPs (`decision_flops`: inner iterations at the
working set's size plus the outer passes), the seconds the searches took, and the achieved
rate as a fraction of this machine's matmul peak (measured in the same run).

Expected, per `d` of the accelerator preset: FLOPs per seed = decisions per seed times the FLOPs
of a decision with the mean iterations, both as measured at the largest measured `d`, at the
preset's own `p0`, working-set size and outer-pass period. Nothing is fitted: the inputs are taken
as they are at the largest `d`, which is right where they do not change with `d` (the table
shows whether they do). The time is these FLOPs at the achieved rate of the largest `d` here, and
on a device at the same fraction of `--device-peak-tflops` (its float32 matmul peak, which
`benchmarks/gpu.py` measures). Both are estimates, not measurements.
"""

import argparse
import collections

from _common import decision_flops, matmul_peak, write
from jaxmem.study import point_configs, SCALING_ACCELERATOR, scaling_points, Store


def measured(folder: str) -> dict:
    """Per `d`: the folder's certified full-rank OP working-set records, summed."""
    out = collections.defaultdict(lambda: dict(seeds=0, decisions=0, iterations=0, flops=0.0, seconds=0.0))
    for r in Store(folder).records():
        c = r["config"]
        if r.get("kind") != "threshold" or c.get("solver") != "certified" or c["model"] != "full":
            continue
        if c["problem"] != "op" or c["decide"]["decider"] != "working-set":
            continue
        m = out[c["d"]]
        m["seeds"] += 1
        m["decisions"] += len(r["decisions"])
        m["iterations"] += sum(x["iterations"] for x in r["decisions"])
        m["flops"] += decision_flops(c["d"], r["decisions"], c)
        m["seconds"] += r["seconds"]  # a seed's share of its group's wall time
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="a scaling folder (docs/scaling)")
    ap.add_argument("--device-peak-tflops", type=float, default=None, help="the device's float32 matmul peak")
    a = ap.parse_args()
    if a.device_peak_tflops is not None and not a.device_peak_tflops > 0:
        ap.error(f"argument --device-peak-tflops: want a positive number, got {a.device_peak_tflops}")
    points = measured(a.dir)
    if not points:
        ap.error(f"argument dir: no certified OP working-set records in {a.dir!r}")
    peak = matmul_peak()
    print(f"this machine's float32 matmul peak: {peak / 1e9:.0f} GFLOP/s")
    rows = []
    for d, m in points.items():
        rate = m["flops"] / m["seconds"]
        rows.append(
            dict(
                d=d,
                seeds=m["seeds"],
                decisions_per_seed=m["decisions"] / m["seeds"],
                iterations_per_decision=m["iterations"] / m["decisions"],
                flops=m["flops"],
                seconds=m["seconds"],
                gflops=rate / 1e9,
                of_peak=rate / peak,
            )
        )
        r = rows[-1]
        print(
            f"measured d={d}: {r['seeds']} seeds, {r['decisions_per_seed']:.2f} decisions per seed, "
            f"{r['iterations_per_decision']:.0f} iterations per decision, {r['flops']:.3g} FLOPs in "
            f"{r['seconds']:.0f} s: {r['gflops']:.1f} GFLOP/s, {r['of_peak']:.2f} of the peak"
        )
    ref = rows[-1]
    expected = []
    for pt in _points():
        d, seeds = pt["d"], pt["seeds"]
        cfg = point_configs(d=d, problem="op", seeds=1)[0]
        p = cfg["plan"]["p0"]
        one = dict(p=p, iterations=round(ref["iterations_per_decision"]))
        flops = seeds * ref["decisions_per_seed"] * decision_flops(d, [one], cfg)
        e = dict(d=d, seeds=seeds, p=p, flops=flops, cpu_hours=flops / (ref["gflops"] * 1e9) / 3600)
        line = (
            f"expected d={d}, {seeds} seeds (p0 {p}): {flops:.3g} FLOPs; here {e['cpu_hours']:.1f} h at "
            f"d={ref['d']}'s rate"
        )
        if a.device_peak_tflops:
            e["device_minutes"] = flops / (ref["of_peak"] * a.device_peak_tflops * 1e12) / 60
            line += (
                f"; {e['device_minutes']:.1f} min on a device at {ref['of_peak']:.2f} of "
                f"{a.device_peak_tflops:g} TFLOP/s"
            )
        expected.append(e)
        print(line)
    path = write(
        "paper_cost",
        dict(
            command=f"python benchmarks/paper_cost.py {a.dir}"
            + (f" --device-peak-tflops {a.device_peak_tflops:g}" if a.device_peak_tflops else ""),
            peak_gflops=peak / 1e9,
            measured=rows,
            reference_d=ref["d"],
            expected=expected,
            device_peak_tflops=a.device_peak_tflops,
        ),
    )
    print(f"wrote {path}")


def _points():
    """The accelerator preset's points: `d` and its seeds."""
    seeds = collections.Counter()
    for u in scaling_points(SCALING_ACCELERATOR):
        seeds[u["d"]] += u["seeds"][1] - u["seeds"][0]
    return [dict(d=d, seeds=n) for d, n in sorted(seeds.items())]


if __name__ == "__main__":
    main()
