"""Helpers shared by the tests."""

import math


def same_json(a, b, rel: float = 1e-12) -> bool:
    """Whether two JSON values are equal, floats to `rel` (the last bits of a float sum depend on
    the CPU's vector width, so a number computed on another machine may differ in them)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if (
            isinstance(a, bool)
            or isinstance(b, bool)
            or not isinstance(a, int | float)
            or not isinstance(b, int | float)
        ):
            return False
        return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=rel)
    return type(a) is type(b) and a == b


def ensemble_records(cfg: dict) -> list:
    """Valid (made-up) records of a sweep config `cfg`, one per seed, for tests of the files."""
    from jaxmem.study import envelope

    fields = dict(alpha=0.1, accuracy=1.0, all_stored=True, steps_to_store=1, diverged=False)
    fields |= dict(final_loss=0.0, target_score=[1.0], best_score=[0.0], singular_values=[1.0])
    return [envelope(cfg, s, **fields, seconds=0.0) for s in range(cfg["seeds"])]
