"""Per-seed storage thresholds on nested tasks, and the capacity as their median.

The task with `p` associations is the prefix of the task with `p' > p` (same inputs, targets
and DP candidates), so every constraint at `p` is one at `p'`: storability is monotone in `p`
for each seed, which has a threshold `p*` (the largest storable `p`), and
`P(all stored at p) = P(p* >= p)`. The capacity `p_c` is the median of `p*` over seeds,
`alpha_hat_c = p_c ln p_c / d^2`, with the distribution-free (binomial order-statistic) 95%
confidence interval of a median.

A search finds `p*` for every seed of an ensemble at once: each round proposes one `p` per
seed (bracketing from the theory's guess by steps of `step`, then bisection) and decides the
whole ensemble in one vmapped run, padded to a common size and masked. The plan of a search is
`_plan.py`'s, the median and its interval `_medians.py`'s.
"""

from __future__ import annotations

import abc
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._criteria import parse_criterion
from ._models import Factored, FullRank
from ._plan import propose, SearchPlan
from ._tasks import Task
from ._validate import InvalidArgument
from .solvers._adam import AdamProtocol, TrainConfig, TrainInstance
from .solvers._constraints import batch_constraints
from .solvers._decide import DecideConfig, verify
from .solvers._runner import bucket, BUCKET_BASE, gather, init_states, run_ensemble, scatter, worth_compacting
from .solvers._status import STORABLE, UNDECIDED, UNSTORABLE


class Thresholds(eqx.Module):
    """Per-seed outcome of a threshold search (host side).

    - `lo`: the largest `p` certified storable (1 if none), `hi`: the smallest `p` certified
      unstorable (`p_max + 1` if none): the threshold lies in `[lo, hi - 1]`, and is `lo` exactly
      when `hi == lo + 1`.
    - `decisions`: per seed, the list of `(p, status, margin, margin_bound, iterations)` tried.
    - `undecided`: whether the seed's search stopped at an undecided instance (or made no
      decision at all).
    - `p_max`: the largest `p` the search could try. A seed none of whose `p` failed has
      `hi = p_max + 1`, a `p` never tried: its threshold is right-censored at `p_max`.
    - `rebound`: for a criterion whose storability is not monotone in `p`, whether the seed
      found a storable `p` above an unstorable one (`None` for a monotone criterion).
    """

    lo: np.ndarray
    hi: np.ndarray
    undecided: np.ndarray
    decisions: list
    seconds: float
    p_max: int
    rebound: np.ndarray | None = None

    @property
    def censored(self) -> np.ndarray:
        """Whether the seed's threshold is only known to be at least `lo` (nothing failed)."""
        return self.hi > self.p_max

    @property
    def exact(self) -> np.ndarray:
        return (self.hi == self.lo + 1) & ~self.undecided & ~self.censored


@eqx.filter_jit
def _hebbian_first_failure(inputs, targets):
    """Per task, the smallest `p >= 2` at which the Hebbian memory of the first `p`
    associations, `W_p = sum_{l < p} u_l e_l^T`, does not retrieve all of them (`P + 1` if none
    up to `P`), in float64 (a cumulative sum of `P` rank-one terms; ties have measure zero).

    The scores `s_p[mu, rho] = u_rho . W_p e_mu = sum_{l < p} (e_l . e_mu)(u_rho . u_l)` grow by
    one outer product of Gram columns per `p`, and the scan stops at the first failure."""
    P = inputs.shape[1]
    idx = jnp.arange(P)

    def one(E, U):
        Ge, Gu = E @ E.T, U @ U.T

        def cond(c):
            p, _, ok = c
            return ok & (p <= P)

        def body(c):
            p, S, _ = c
            S = S + jnp.outer(Ge[:, p - 1], Gu[p - 1, :])
            real = idx < p
            comp = jnp.where(real[None, :] & (idx[:, None] != idx[None, :]), S, -jnp.inf).max(axis=1)
            ok = jnp.all(jnp.where(real, jnp.diagonal(S) > comp, True))
            return p + 1, S, ok

        S0 = jnp.outer(Ge[:, 0], Gu[0, :])
        p, _, ok = lax.while_loop(cond, body, (jnp.asarray(2), S0, jnp.asarray(True)))
        return jnp.where(ok, P + 1, p - 1)

    return jax.vmap(one)(inputs, targets)


def _hebbian_search(tasks: Task, search: Brackets) -> None:
    """The Hebbian rule's all-stored threshold: the load before its first failure. Unlike a
    storability threshold this is a property of one rule (storage is not monotone in `p` for
    it), so `p*` is defined as the last `p` before the first `p` that fails."""
    if not tasks.shared:
        raise InvalidArgument("the Hebbian threshold is measured for the OP (shared targets) only")
    P = search.plan.p_max
    with jax.enable_x64(True):
        f64 = lambda x: jnp.asarray(x[:, :P], jnp.float64)
        fail = np.asarray(_hebbian_first_failure(f64(tasks.inputs), f64(tasks.targets)))
    search.lo = np.minimum(fail - 1, P).astype(np.int64)
    search.hi = np.where(fail <= P, fail, P + 1).astype(np.int64)


def _adam_round(tasks_b, ps, P, *, model_rank, decide_cfg, adam_cfg):
    """One round of the paper's protocol: Adam on each seed's prefix `ps`, judged in float64."""
    cons = batch_constraints(tasks_b, ps, P, stream=decide_cfg.stream, block=decide_cfg.block)
    d = tasks_b.d
    protocol = AdamProtocol(adam_cfg, FullRank if model_rank is None else Factored, model_rank or d)
    lr = jnp.full(ps.shape, adam_cfg.lr, tasks_b.inputs.dtype)
    st, _ = run_ensemble(
        protocol, TrainInstance(tasks_b.prefix(P), jnp.asarray(ps, jnp.int32), lr), chunk=adam_cfg.chunk
    )
    W = jax.vmap(lambda prm: prm.weight())(st.params)
    _, margin, bound = verify(cons, W, decide_cfg.tol)
    ok = (np.asarray(st.done_step) >= 0) & ~np.asarray(st.diverged)
    ok &= adam_cfg.criterion().met64(cons, W, margin)
    # Adam stores or fails within its budget; a failure is not a certificate
    status = np.where(ok, STORABLE, UNSTORABLE)
    return status, margin, bound, np.asarray(st.t)


class Brackets:
    """Every seed's bracket `[lo, hi)` and the decisions tried; `record` takes a batch of
    outcomes, `searching` says which seeds still need a decision.

    Where storability is not monotone in `p` (`monotone=False`: the tail average), `lo` is the
    largest `p` found storable and `hi` the smallest `p` above it found unstorable; once a seed's
    bisection has closed, it also decides `lo + 1` and `lo + 2`, and goes on from any of them that
    is storable, until both are unstorable (or beyond `p_max`). A seed that found a storable `p`
    above an unstorable one is marked in `rebound`."""

    def __init__(self, n: int, plan: SearchPlan, lower_bound: bool = False, monotone: bool = True):
        # lower_bound: an undecided instance counts as not stored (the seed's search goes on
        # below it), so `lo` is the largest p with a found memory: a lower bound on `p*`
        self.plan = plan
        self.lower_bound = lower_bound
        self.monotone = monotone
        self.lo = np.ones(n, np.int64)
        self.hi = np.full(n, plan.p_max + 1, np.int64)
        self.undecided = np.zeros(n, bool)
        self.rebound = np.zeros(n, bool)
        self.decisions = [[] for _ in range(n)]
        self._closed = np.zeros(n, bool)  # non-monotone: the seed's bisection has closed

    def _next_above(self, i) -> int | None:
        """Non-monotone, bisection closed: the first of `lo + 1`, `lo + 2` not yet decided."""
        tried = {p for p, *_ in self.decisions[i]}
        for p in (self.lo[i] + 1, self.lo[i] + 2):
            if p <= self.plan.p_max and p not in tried:
                return int(p)
        return None

    def searching(self, seeds=None):
        seeds = np.arange(self.lo.size) if seeds is None else np.asarray(seeds)
        keep = (self.hi[seeds] - self.lo[seeds] > self.plan.resolution) & (self.lo[seeds] < self.plan.p_max)
        if not self.monotone:
            self._closed[seeds[~keep]] = True
            above = np.array([self._next_above(i) is not None for i in seeds], bool)
            keep = np.where(self._closed[seeds], above, keep)
        if not self.lower_bound:
            keep &= ~self.undecided[seeds]
        return seeds[keep]

    def propose(self, seeds):
        p = propose(self.lo[seeds], self.hi[seeds], self.plan)
        if not self.monotone:
            for j, i in enumerate(seeds):
                if self._closed[i]:
                    p[j] = self._next_above(i)
        return p

    def record(self, seeds, ps, status, margin, bound, iters):
        for j, i in enumerate(seeds):
            self.decisions[i].append(
                (int(ps[j]), int(status[j]), float(margin[j]), float(bound[j]), int(iters[j]))
            )
        ok, bad = status == STORABLE, status == UNSTORABLE
        if self.lower_bound:
            bad = bad | (status == UNDECIDED)
        self.undecided[seeds[status == UNDECIDED]] = True
        if self.monotone:
            self.lo[seeds[ok]] = ps[ok]
            self.hi[seeds[bad]] = ps[bad]
            return
        for i in np.unique(seeds):
            good = [p for p, st, *_ in self.decisions[i] if st == STORABLE]
            fail = [p for p, st, *_ in self.decisions[i] if st == UNSTORABLE]
            self.lo[i] = max(good, default=1)
            self.hi[i] = min((p for p in fail if p > self.lo[i]), default=self.plan.p_max + 1)
            self.rebound[i] = any(p < self.lo[i] for p in fail)

    def result(self, t0, *, scan: bool = False) -> Thresholds:
        # scan: the threshold came from one scan (the Hebbian rule), not from decisions;
        # otherwise a seed without a single decision knows nothing of its threshold
        none = np.array([not d for d in self.decisions]) & (not scan)
        return Thresholds(
            lo=self.lo,
            hi=self.hi,
            undecided=self.undecided | none,
            decisions=self.decisions,
            seconds=time.perf_counter() - t0,
            p_max=self.plan.p_max,
            rebound=None if self.monotone else self.rebound.copy(),
        )


# Finished instances of a batch that holds its DP candidates are certified this many at a time
# (at d = 96, 16 seeds, a gather of all of them would copy 8.6 GB).
_HELD_GROUP = 4


def _certified_search(tasks, search: Brackets, *, rank, cfg: DecideConfig, log, t0, decider) -> None:
    """All of a batch's decisions in one compacting run: when a seed's decision finishes it is
    certified (`conclude`) and the seed's next `p` starts in its slot at once, so the batch stays
    full instead of every round waiting for its slowest decision. A decision starts from `W = 0`,
    or with `cfg.warm_start` from the best multiple of the seed's last storable memory
    (`best_multiple`; for rank `m`, the second start of the
    rank phase). The constraints are padded to the
    multiple of `plan.pad` that the running proposals need, up or down (a seed's sequence of
    `p`, hence its decisions, is that of a round-by-round search). Where a step is cheap
    (`worth_compacting`) a compilation costs more than the steps it saves: there the batch is neither
    compacted nor re-padded down, so each padding compiles one program. A batch that holds its DP
    candidates (`AbstractDecider.holds`) runs whole until its running instances fit a smaller bucket
    (a quarter of it at most), which then copies only their candidates at every chunk, and it
    certifies its finished instances `_HELD_GROUP` at a time."""
    n, P_all, d = tasks.inputs.shape
    plan = search.plan
    current = search.propose(np.arange(n))
    size = lambda ps: min(P_all, -(-int(ps.max()) // plan.pad) * plan.pad)
    P = size(current)

    # each seed's last storable memory, the start of its next decision
    warm = np.zeros((n, d, d), np.dtype(tasks.inputs.dtype)) if cfg.warm_start else None

    def build(P, hold=True):
        # a finished seed's last p may exceed P; its slot is never stepped again
        return decider.instances(
            tasks, np.minimum(current, P), P, W0=None if warm is None else jnp.asarray(warm), hold=hold
        )

    solver, inst = build(P)
    # a batch that does not hold its candidates never starts holding them
    held = decider.holds(inst)
    shown = [time.perf_counter()]
    big = lambda P: worth_compacting(P, d, shared=tasks.shared, factored=rank is not None)
    compact = big(P)

    def padded(idx, compacted=compact):
        size = bucket(idx.size, n, BUCKET_BASE) if compacted else n
        return jnp.asarray(np.concatenate([idx, np.full(size - idx.size, idx[-1])]))

    def certify(done, inst, st):
        # a batch that holds its candidates certifies _HELD_GROUP instances at a time: a gather
        # copies the candidates of the instances it takes
        groups = np.array_split(done, -(-done.size // _HELD_GROUP)) if held else [done]
        out = []
        for g in groups:
            idx = padded(g, held or compact)
            dec = decider.conclude(solver, gather(inst, idx), gather(st, idx))
            out.append(
                [x[: g.size] for x in (dec.status, dec.margin, dec.margin_bound, dec.iterations, dec.weight)]
            )
        return [np.concatenate(x) for x in zip(*out)]

    def refill(done, inst, st):
        nonlocal P
        status, margin, bound, iterations, weight = certify(done, inst, st)
        search.record(done, current[done], status, margin, bound, iterations)
        if warm is not None:
            stored = status == STORABLE
            warm[done[stored]] = weight[stored]
        again = search.searching(done)
        if log is not None and (time.perf_counter() - shown[0] > 10 or not again.size):
            shown[0] = time.perf_counter()
            print(
                f"  {sum(map(len, search.decisions))} decisions, {search.searching().size} seeds "
                f"searching (padded {P}, {time.perf_counter() - t0:.0f} s)",
                file=log,
                flush=True,
            )
        if not again.size:
            return inst, st, again
        current[again] = search.propose(again)
        # every searching seed has a decision running: pad to what they need, up (or down)
        need = size(current[search.searching()])
        if need > P or (need < P and big(P)):
            P = need
            decider.drop(inst)
            _, inst = build(P, hold=held)
            st = decider.resize(st, P)
        else:
            inst = eqx.tree_at(lambda i: i.cons.p, inst, jnp.asarray(np.minimum(current, P), jnp.int32))
            if warm is not None:
                inst = eqx.tree_at(lambda i: i.W0, inst, jnp.asarray(warm))
        idx = padded(again)
        # where the batch holds its candidates, the starts are taken of the whole batch, not of a
        # gathered copy
        fresh = (
            gather(init_states(solver, inst), idx)
            if decider.holds(inst)
            else init_states(solver, gather(inst, idx))
        )
        st = scatter(st, idx, fresh)
        return inst, st, again

    run_ensemble(
        solver, inst, chunk=decider.chunk, refill=refill, compact=compact, base=BUCKET_BASE, early=True
    )


def _adam_search(tasks, search: Brackets, *, rank, decide_cfg, adam_cfg, log, t0) -> None:
    """Round by round: every searching seed's proposal trained at once (a power-of-two batch of
    copies of the last seed, dropped: compiles stay at one per bucket, and an instance's run
    does not depend on the rest of the batch), judged in float64, recorded."""
    n, P_all, _ = tasks.inputs.shape
    plan = search.plan
    rnd = 0
    while True:
        active = search.searching()
        if active.size == 0:
            break
        ps = search.propose(active)
        P = min(P_all, -(-int(ps.max()) // plan.pad) * plan.pad)
        k = active.size
        extra = bucket(k, n) - k
        rows = np.concatenate([active, np.full(extra, active[-1])])
        tasks_b = jax.tree.map(lambda x: x[jnp.asarray(rows)], tasks)
        status, margin, bound, iters = _adam_round(
            tasks_b,
            np.concatenate([ps, np.full(extra, ps[-1])]),
            P,
            model_rank=rank,
            decide_cfg=decide_cfg,
            adam_cfg=adam_cfg,
        )
        search.record(active, ps, status[:k], margin[:k], bound[:k], iters[:k])
        rnd += 1
        if log is not None:
            print(
                f"  round {rnd}: {active.size} seeds at p in [{ps.min()}, {ps.max()}] (padded {P}): "
                f"{(status == STORABLE).sum()} stored, {(status == UNSTORABLE).sum()} not "
                f"({time.perf_counter() - t0:.0f} s)",
                file=log,
                flush=True,
            )


class AbstractThresholdMethod(eqx.Module):
    """How one solver decides the proposals of a threshold search. `Brackets` proposes each
    seed's next `p` and records its outcome; a method decides proposals until no seed is
    searching. A new solver is a final subclass and its `SOLVERS` entry: `search_thresholds`
    never branches on a name."""

    # scan: the thresholds come from one scan (the Hebbian rule), not from decisions
    scan: bool = eqx.field(static=True, default=False)

    def lower_bound(self, rank: int | None) -> bool:
        """Whether an undecided instance counts as not stored (the search then gives a lower
        bound on `p*`)."""
        return False

    def accepts(self, criterion) -> bool:
        """Whether this method can decide `criterion` (top-1 criteria by default)."""
        return criterion.top1

    @abc.abstractmethod
    def run(
        self, tasks: Task, search: Brackets, *, rank, decide_config, adam_config, log, t0, criterion
    ) -> None:
        """Decide proposals of `search` (from `search.propose`, into `search.record`) until no
        seed is searching."""


class CertifiedMethod(AbstractThresholdMethod):
    """The certified decider (dense or working set): `p*` is the certified threshold; for rank
    `m` a lower bound."""

    def lower_bound(self, rank):
        return rank is not None

    def accepts(self, criterion):
        return True

    def run(self, tasks, search, *, rank, decide_config, adam_config, log, t0, criterion):
        decider = criterion.decider(decide_config, d=tasks.inputs.shape[-1], problem=tasks.problem, rank=rank)
        _certified_search(tasks, search, rank=rank, cfg=decide_config, log=log, t0=t0, decider=decider)


class AdamMethod(AbstractThresholdMethod):
    """The paper's protocol: `p*` is the largest `p` Adam stored within its budget."""

    def run(self, tasks, search, *, rank, decide_config, adam_config, log, t0, criterion):
        _adam_search(tasks, search, rank=rank, decide_cfg=decide_config, adam_cfg=adam_config, log=log, t0=t0)


class HebbianMethod(AbstractThresholdMethod):
    """The closed-form rule (OP): `p*` is the last `p` before its first failure."""

    scan: bool = eqx.field(static=True, default=True)

    def run(self, tasks, search, *, rank, decide_config, adam_config, log, t0, criterion):
        _hebbian_search(tasks, search)


# the threshold methods by solver name
SOLVERS = {"certified": CertifiedMethod(), "adam": AdamMethod(), "hebbian": HebbianMethod()}


def search_thresholds(
    tasks: Task,
    *,
    plan: SearchPlan,
    solver: str = "certified",
    rank: int | None = None,
    decide_config: DecideConfig = DecideConfig(),
    adam_config: TrainConfig = TrainConfig(),
    log=None,
    start=None,
    criterion="all",
) -> Thresholds:
    """Find every seed's threshold `p*` by bracketing and bisection (until `hi - lo <=
    plan.resolution`: exactly where it is 1).

    **Arguments:**

    - `tasks`: a batch of `n` nested tasks with at least `plan.p_max` associations each.
    - `plan`: a `SearchPlan`.
    - `solver`: `"certified"` (the `Decider`: `p*` is the certified threshold), `"adam"` (the
      paper's protocol: `p*` is the largest `p` the search found Adam to store within its budget)
      or `"hebbian"` (the closed-form rule, OP: `p*` is the last `p` before its first failure).
    - `rank`: `m` for a factored memory, `None` for full rank. A certified rank-`m` search gives a
      lower bound: an undecided instance counts as not stored (the search goes on below it), so
      `lo` is the largest `p` at which a rank-`m` memory was found, and `hi` is not a certificate.
    - `decide_config`, `adam_config`: the solvers' settings.
    - `log`: optional file for one line per round.
    - `start`: optional per-seed `p` known storable (from a search with a smaller `p_max`, whose
      seeds were censored): the search brackets upward from there.
    - `criterion`: what counts as stored (`parse_criterion`: `"all"`, the default, or `"tail:r"`,
      certified only). Where storability is not monotone in `p` (the tail average) `p*` is the
      largest `p` found storable with `p* + 1` and `p* + 2` unstorable (`Brackets`).

    **Returns:** `Thresholds`.
    """
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise InvalidArgument(f"solver must be one of {', '.join(SOLVERS)}; got {solver!r}")
    n, P_all, d = tasks.inputs.shape
    if P_all < plan.p_max:
        raise InvalidArgument(f"tasks hold {P_all} associations, fewer than plan.p_max = {plan.p_max}")
    method = SOLVERS[solver]
    crit = parse_criterion(criterion)
    if not method.accepts(crit):
        raise InvalidArgument(
            f"criterion {crit.name!r} is decided by the certified solver only, not {solver!r}"
        )
    t0 = time.perf_counter()
    search = Brackets(n, plan, lower_bound=method.lower_bound(rank), monotone=crit.monotone)
    if start is not None:
        search.lo = np.asarray(start, np.int64).copy()
    method.run(
        tasks,
        search,
        rank=rank,
        decide_config=decide_config,
        adam_config=adam_config,
        log=log,
        t0=t0,
        criterion=crit,
    )
    return search.result(t0, scan=method.scan)
