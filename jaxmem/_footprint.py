"""Device memory of one iteration, by XLA's own analysis of the compiled step, on abstract inputs.

Nothing is allocated: the task, the state and the instance are shapes (`jax.eval_shape`), and
the step is lowered and compiled for the default backend, whose `memory_analysis()` reports the
bytes of arguments, outputs and temporaries. Use it to size a run before committing a device.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._models import FullRank
from ._tasks import make_task, PROBLEMS
from ._validate import check_choice, check_int, InvalidArgument
from .solvers._adam import AdamProtocol, TrainConfig, TrainInstance
from .solvers._constraints import StreamedConstraints
from .solvers._decide import DecideConfig, Decider, DecisionInstance


SOLVERS = ("adam", "decide")


def step_footprint(
    solver: str,
    *,
    d: int,
    p: int,
    problem: str = "op",
    train_config: TrainConfig = TrainConfig(stream=True),
    decide_config: DecideConfig = DecideConfig(stream=True),
) -> dict:
    """The memory of one iteration of one instance at `(d, p)`: a training step of the
    `AdamProtocol`, or an iteration of the full-rank `Decider`, each on its streaming kernels by
    default (`stream=True` in the configs).

    **Arguments:** `solver`: `"adam"` or `"decide"`; `d`, `p`: the size; `problem`: `"op"` or
    `"dp"`; `train_config`, `decide_config`: the solvers' settings.

    **Returns:** a dict of `argument_bytes`, `output_bytes`, `temp_bytes` and their sum
    `total_bytes`, from the compiled step's `memory_analysis()`.
    """
    check_choice("solver", solver, SOLVERS)
    check_choice("problem", problem, PROBLEMS)
    d = check_int("d", d, 2)
    p = check_int("p", p, 2)
    key = jax.random.key(0)
    task = jax.eval_shape(lambda k: make_task(k, d=d, p=p, problem=problem, materialise_limit=0), key)
    n = jax.ShapeDtypeStruct((), jnp.int32)
    if solver == "adam":
        protocol = AdamProtocol(train_config, FullRank, d)
        inst = TrainInstance(task, n, jax.ShapeDtypeStruct((), jnp.float32))
    else:
        if decide_config.stream is False:
            raise InvalidArgument(
                "step_footprint analyses the streamed decider: decide_config.stream must not be False"
            )
        protocol = Decider(decide_config, False)
        cons = StreamedConstraints(task, n, decide_config.block)
        inst = DecisionInstance(cons, jax.ShapeDtypeStruct((d, d), jnp.float32), n)
    state = jax.eval_shape(protocol.init, inst)
    dyn, static = eqx.partition(protocol, eqx.is_array)
    run = jax.jit(lambda dyn, inst, st: eqx.combine(dyn, static).step(inst, st))
    m = run.lower(dyn, inst, state).compile().memory_analysis()
    out = dict(
        argument_bytes=int(m.argument_size_in_bytes),
        output_bytes=int(m.output_size_in_bytes),
        temp_bytes=int(m.temp_size_in_bytes),
    )
    out["total_bytes"] = sum(out.values())
    return out
