"""Measure how the training knobs move the measured transition (README "Training defaults").

Full-rank CE training is convex in W: a task is storable exactly when the CE infimum is 0, so
knobs only decide how quickly a storable task is found within the step budget. This script
counts, at d = 32 near the transition, how many of 8 seeds store all for each (lr, steps).

    python scripts/tune_defaults.py
"""

import itertools
import json

from jaxmem import run_experiment, TrainConfig


def main():
    rows = []
    for lr, steps, alpha in itertools.product([0.01, 0.03, 0.1], [1000, 5000], [0.9, 0.95, 1.0]):
        r = run_experiment(d=32, alpha=alpha, problem="op", seeds=8, config=TrainConfig(steps=steps, lr=lr))
        done = [s for s in r["steps_to_store"] if s is not None]
        rows.append(
            dict(
                lr=lr,
                steps=steps,
                alpha=round(r["alpha"], 4),
                p=r["p"],
                stored=sum(r["all_stored"]),
                max_steps_to_store=max(done, default=None),
                seconds=round(r["seconds"], 1),
            )
        )
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
