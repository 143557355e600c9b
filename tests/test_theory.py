import math

import jax
import jax.numpy as jnp
import jaxmem as jm
import numpy as np
import pytest
from jaxmem import theory as th
from scipy import integrate, special, stats


# ---------------------------------------------------------------- capacity (2.1)


def test_order_statistics_match_brute_force(x64):
    """Top-3 of n=200 normals: sampled directly vs sorting full samples (5 standard errors)."""
    n, m = 200, 20000
    top = np.asarray(th.top_order_stats(jax.random.key(0), n, 3, (m,)))
    full = -np.sort(-np.asarray(jax.random.normal(jax.random.key(1), (m, n))), axis=1)[:, :3]
    se = np.sqrt(top.var(0) / m + full.var(0) / m)
    assert np.all(np.abs(top.mean(0) - full.mean(0)) < 5 * se)


def test_projection_is_the_nearest_point_of_the_cone(x64):
    rng = np.random.default_rng(0)
    for _ in range(20):
        z = rng.normal(size=12)
        comps = -np.sort(-z[1:])
        pr = th.project(z[0], np.append(comps, -np.inf))
        k, t = int(pr.k), float(pr.target)
        proj = np.concatenate([[t], np.where(np.arange(11) < k, t, comps)])
        assert proj[0] >= proj[1:].max() - 1e-12  # feasible
        d2 = np.sum((proj - np.concatenate([[z[0]], comps])) ** 2)
        assert abs(d2 - float(pr.dist2)) < 1e-10
        for _ in range(200):  # no feasible point is closer
            y = proj + 0.3 * rng.normal(size=12)
            y[0] = max(y[0], y[1:].max())
            assert np.sum((y - np.concatenate([[z[0]], comps])) ** 2) >= d2 - 1e-12


def test_closed_form_target_average_matches_sampling(x64):
    """Integrating z_1 exactly (Rao-Blackwell) agrees with sampling z_1, p = 50."""
    key = jax.random.key(2)
    comps = th.top_order_stats(key, 49, 50, (40000,))
    exact, _ = th.dist2_given_competitors(comps)
    z1 = jax.random.normal(jax.random.key(3), (40000,), jnp.float64)
    sampled = th.project(z1, comps).dist2
    se = float(jnp.sqrt(sampled.var() / 40000))
    assert abs(float(exact.mean() - sampled.mean())) < 5 * se


def test_e_dist2_against_brute_force_full_vectors(x64):
    p, m = 30, 100000
    z = np.asarray(jax.random.normal(jax.random.key(4), (m, p), jnp.float64))
    comps = -np.sort(-z[:, 1:], axis=1)
    brute = th.project(z[:, 0], np.concatenate([comps, -np.inf * np.ones((m, 1))], 1)).dist2
    mean, se, inc = th.e_dist2(p, samples=100000)
    tol = 5 * math.hypot(float(se), float(brute.std()) / math.sqrt(m))
    assert abs(float(mean) - float(brute.mean())) < tol
    assert float(inc) == 0.0


def test_alpha_c_defaults_precision_determinism_and_range():
    ps = np.logspace(1, 12, 6)
    cs = [th.capacity(float(p)) for p in ps]
    with jax.enable_x64(True):  # transformations run under x64 (README)
        traced = jax.jit(th.capacity)(jnp.asarray(ps[1]))  # traced p: fixed top, same law
    assert abs(float(traced.alpha_c) - float(cs[1].alpha_c)) < 5 * 0.002
    for c in cs:
        assert float(c.alpha_c_se) < 0.002
        assert float(c.incomplete) < 1e-12
    a = np.array([float(c.alpha_c) for c in cs])
    assert np.all(np.diff(a) < 0) and np.all(a > 0.5)
    assert float(th.alpha_c(1e4)) == float(th.alpha_c(1e4))
    assert float(th.alpha_c(1e4, key=jax.random.key(9))) != float(th.alpha_c(1e4))


@pytest.mark.slow
def test_alpha_c_tends_to_one_half():
    """alpha_c(p) - 1/2 decays like log log p / log p: it keeps shrinking out to p = 1e200
    and (alpha_c - 1/2) ln p / ln ln p stays bounded."""
    ps = [1e3, 1e6, 1e12, 1e24, 1e50, 1e100, 1e200]
    ex = np.array([float(th.alpha_c(p, se_target=0.003)) - 0.5 for p in ps])
    assert np.all(np.diff(ex) < 0) and ex[-1] < 0.03 and ex[-1] > 0
    ratio = ex * np.log(ps) / np.log(np.log(ps))
    assert ratio.max() / ratio.min() < 2.0
    assert float(th.capacity(math.inf).alpha_c) == 0.5


# ---------------------------------------------------------------- rank (2.2, 2.3)


def test_quarter_circle_closed_forms_vs_quadrature(x64):
    for kappa in (0.1, 0.37, 0.5, 0.9, 1.0):
        s = float(th.s_kappa(kappa))
        mass = integrate.quad(lambda x: math.sqrt(4 - x * x) / math.pi, s, 2)[0]
        second = integrate.quad(lambda x: x * x * math.sqrt(4 - x * x) / math.pi, s, 2)[0]
        assert abs(mass - kappa) < 1e-9
        assert abs(second - float(th.F(kappa))) < 1e-9
        u = np.linspace(0, 1, 200001)  # x = 2 - (2 - s) u^2 removes the edge singularity
        x = 2 - (2 - s) * u**2
        norm = np.trapezoid(np.asarray(th.truncated_density(x, kappa)) * 2 * (2 - s) * u, u)
        assert abs(norm - 1) < 1e-6
    for x in (0.4, 1.3, 1.9):
        ref = integrate.quad(lambda t: math.sqrt(4 - t * t) / math.pi, 0, x)[0]
        assert abs(float(th.qc_cdf(x)) - ref) < 1e-9
        assert abs(float(th.qc_density(x)) - math.sqrt(4 - x * x) / math.pi) < 1e-12


def test_quarter_circle_sampler_ks(x64):
    s = np.asarray(th.qc_sample(jax.random.key(0), 20000))
    assert stats.kstest(s, lambda x: np.asarray(th.qc_cdf(x))).pvalue > 1e-3
    st = np.asarray(th.qc_sample(jax.random.key(1), 20000, kappa=0.3))
    lo = float(th.s_kappa(0.3))
    assert st.min() >= lo - 1e-12
    cdf = lambda x: (np.asarray(th.qc_cdf(x)) - float(th.qc_cdf(lo))) / 0.3
    assert stats.kstest(st, cdf).pvalue > 1e-3


def test_grad_alpha_c_wrt_kappa_matches_finite_differences(x64):
    f = lambda k: th.alpha_c(1e4, kappa=k, se_target=0.01)
    for k in (0.3, 0.7):
        g = float(jax.grad(f)(k))
        h = 1e-5
        fd = (float(f(k + h)) - float(f(k - h))) / (2 * h)
        assert abs(g - fd) < 1e-6 * max(1, abs(fd))


def test_kappa_derivatives_under_jit_without_x64():
    """Compiled derivatives in kappa with x64 off (the float64 computation sits inside the
    caller's jit): `s_kappa' = -pi / (2 sin phi)` and `F' = s_kappa^2` (the squared singular
    value at the edge; docs/science.md 2.2), and alpha_c's compiled gradient is its eager one."""
    assert not jax.config.jax_enable_x64
    for k in (0.2, 0.5, 0.9):
        s = float(th.s_kappa(k))
        sin_phi = math.sqrt(1 - (s / 2) ** 2)
        assert float(jax.jit(jax.grad(th.s_kappa))(k)) == pytest.approx(-math.pi / (2 * sin_phi), rel=1e-5)
        assert float(jax.jit(jax.grad(th.F))(k)) == pytest.approx(s * s, rel=1e-5)
    f = lambda k: th.alpha_c(1e4, kappa=k, se_target=0.05)
    value, slope = jax.jit(jax.value_and_grad(f))(0.4)
    assert float(value) == pytest.approx(float(f(0.4)), rel=1e-6)
    assert float(slope) == pytest.approx(float(jax.grad(f)(0.4)), rel=1e-6)


@pytest.mark.slow
def test_inverse_problem_kappa_for_target_capacity(x64):
    """Newton by autodiff: the kappa at which a two-layer memory reaches alpha_c = 0.5 at p=1e4."""
    f = lambda k: th.alpha_c(1e4, kappa=k, se_target=0.01) - 0.5
    k = 0.5
    for _ in range(20):
        k = k - float(f(k)) / float(jax.grad(f)(k))
    assert abs(float(f(k))) < 1e-10 and 0 < k < 1


# ---------------------------------------------------------------- saddle point (2.1)


def test_log_zout_matches_quadrature(x64):
    rng = np.random.default_rng(0)
    for V in (1.0, 0.1, 1e-3, 1e-5):
        om = rng.normal(size=15) * math.sqrt(1 - V)
        a = (om[0] - om[1:]) / math.sqrt(V)
        xs = np.linspace(-60, 2000, 1_000_001)
        vals = stats.norm.logpdf(xs) + special.log_ndtr(a[None, :] + xs[:, None]).sum(1)
        m = vals.max()
        ref = m + math.log(np.trapezoid(np.exp(vals - m), xs))
        # 24 nodes: to 1e-6; the saddle point's default 12: to 1e-4
        assert abs(float(th.log_zout(jnp.asarray(om), V, nodes=24)) - ref) < 1e-6 * max(1, abs(ref))
        assert abs(float(th.log_zout(jnp.asarray(om), V)) - ref) < 1e-4 * max(1, abs(ref))


# se_target = 1: the first 64 samples always suffice (no adaptivity, so smooth in every argument),
# and the static settings are the defaults', so every saddle test shares one compilation
FIXED = th.SaddleConfig(se_target=1.0)


def _name(s):
    return [th.STATUS[int(v)] for v in np.atleast_1d(np.asarray(s.status._value))]


@pytest.mark.slow
def test_saddle_vmap_equals_loop_and_reports_failure(x64):
    """vmap over loads (one invalid, one far above capacity) equals the loop of single solves;
    no solution and invalid input are statuses with NaN values, never a number."""
    alphas = jnp.array([0.2, 0.5, 3.0, -1.0])
    vm = jax.vmap(lambda a: th.saddle(a, 50.0, config=FIXED))(alphas)
    assert _name(vm) == ["success", "success", "above_capacity", "invalid_input"]
    for i, a in enumerate([0.2, 0.5]):
        one = th.saddle(a, 50.0, config=FIXED)
        assert float(one.q) == pytest.approx(float(vm.q[i]), abs=1e-10)
        assert float(one.q_se) == pytest.approx(float(vm.q_se[i]), rel=1e-8)
    assert np.all(np.isnan(np.asarray(vm.q[2:])))


def test_saddle_succeeds_from_tiny_loads_to_the_capacity(x64):
    """Status success with q in (0, 1) and a finite q_se from alpha = 1e-6 to 0.97 alpha_c, at
    small and large p; the saddle's own samples have a capacity within errors of alpha_c(p)."""
    for p in (40.0, 1e6):
        a_c = float(th.alpha_c(p))
        grid = np.array([1e-6, 1e-3, 0.02, 0.05, 0.3, 0.7, 0.97]) * a_c
        path = th.saddle_path(grid, p)
        q = np.asarray(path.q)
        assert set(_name(path)) == {"success"}, (p, _name(path))
        assert np.all((q > 0) & (q < 1)) and np.all(np.diff(q) > 0)
        assert np.all(np.asarray(path.q_se) <= th.SaddleConfig().se_target * 1.0001)
        # at q -> 0 every field is 0: the posterior of xi is phi Phi^(p-1), each competitor's
        # M = E[phi/Phi (xi)], |grad ln Z_out|^2 = p (p-1) M^2, and q* = alpha_G p (p-1) M^2
        # (a fine trapezoid in xi; 12 Gauss-Hermite nodes are within 0.3% of it up to p = 1e6)
        xs = np.linspace(-8, 12, 400_001)
        logpost = stats.norm.logpdf(xs) + (p - 1) * special.log_ndtr(xs)
        post = np.exp(logpost - logpost.max())
        M = np.trapezoid(post * np.exp(stats.norm.logpdf(xs) - special.log_ndtr(xs)), xs) / np.trapezoid(
            post, xs
        )
        assert q[0] == pytest.approx(grid[0] / math.log(p) * p * (p - 1) * M**2, rel=1e-2)
        assert abs(float(path.alpha_samples[-1]) / a_c - 1) < 0.03


@pytest.mark.slow
def test_saddle_q_to_one_at_the_capacity_of_its_samples(x64):
    """q* -> 1 where alpha_G E||g||^2 hits the cone distance: with the same frozen samples, the
    load where 1 - q* vanishes is ln p / mean dist^2 of those samples (`alpha_samples`)."""
    p = 100.0
    key = jax.random.key(11)
    a_s = float(th.sample_capacity(p, key=key, samples=64))
    path = th.saddle_path(a_s * np.array([0.5, 0.9, 0.95, 0.98, 0.99]), p, key=key, config=FIXED)
    assert float(path.alpha_samples[0]) == pytest.approx(a_s, rel=1e-12)
    q = np.asarray(path.q)
    assert set(_name(path)) == {"success"} and np.all(np.diff(q) > 0) and 1 - q[-1] < 0.02
    # 1 - q ~ c (a_s - a) near capacity: extrapolate the last two points to 1 - q = 0
    a = a_s * np.array([0.98, 0.99])
    slope = (q[-2] - q[-1]) / (a[1] - a[0])
    assert abs((a[1] - (1 - q[-1]) / slope) / a_s - 1) < 0.01
    assert _name(th.saddle(1.01 * a_s, p, key=key, config=FIXED)) == ["above_capacity"]


@pytest.mark.slow
def test_saddle_matches_the_all_fields_reference(x64):
    """At p <= 1000 the order-statistics saddle point agrees with the all-fields Monte Carlo
    within three combined standard errors; and on the same competitor draws the bulk law changes
    E|grad ln Z_out|^2 by less than 3e-3 relative (the only approximation that is not sampling;
    measured 1.3e-3 at q = 0.6, which moves q* by about 1e-4, a thirtieth of the default q_se)."""
    for p, n in ((200, 512),):
        a = 0.5 * float(th.alpha_c(p))
        s = th.saddle(a, float(p), config=th.SaddleConfig(se_target=0.001))
        r = th.saddle_fields(a, p, samples=n, key=jax.random.key(7))
        assert _name(s) == _name(r) == ["success"]
        assert abs(float(s.q) - float(r.q)) < 3 * math.hypot(float(s.q_se), float(r.q_se)), (p, s.q, r.q)
    from jaxmem.theory import _replica

    p, q = 1000, 0.6
    comps = -jnp.sort(-jax.random.normal(jax.random.key(3), (32, p - 1)), axis=1)
    terms = lambda c, nb: jax.vmap(lambda z1: _replica._terms(q, z1, c, nb, 0.0, 12, 16)[1])(
        jnp.linspace(-2, 2, 5)
    )
    exact = np.asarray(jax.vmap(lambda c: terms(c, 0.0))(comps))
    law = np.asarray(jax.vmap(lambda c: terms(c[:16], p - 17.0))(comps))
    assert abs(law.mean() / exact.mean() - 1) < 3e-3


def test_saddle_errors_match_the_scatter_over_keys(x64):
    """q_se (delta method on block means) predicts the spread of q* over independent keys."""
    p, a = 100.0, 0.4
    runs = [th.saddle(a, p, key=jax.random.key(k), config=FIXED) for k in range(12)]
    qs = np.array([float(s.q) for s in runs])
    se = np.mean([float(s.q_se) for s in runs])
    assert 0.5 < qs.std(ddof=1) / se < 2.0, (qs.std(ddof=1), se)


def test_saddle_implicit_gradients_match_finite_differences(x64):
    """The Jacobian of (q, free entropy) in (alpha, margin, real p), by reverse mode as jax.grad
    takes it, against float64 central differences on frozen samples (the solve's error, ~1e-7 in
    logit q, is far below the differences' steps). One traced solve gives all six entries."""

    def f(x):
        s = th.saddle(x[0], x[2], x[1], config=FIXED)
        return jnp.stack([s.q, s.free_entropy])

    x0, steps = np.array([0.4, 0.05, 60.0]), np.array([1e-3, 1e-3, 0.5])
    jac = np.asarray(jax.jacrev(f)(jnp.asarray(x0)))
    for i, h in enumerate(steps):
        e = np.where(np.arange(3) == i, h, 0.0)
        fd = (np.asarray(f(jnp.asarray(x0 + e))) - np.asarray(f(jnp.asarray(x0 - e)))) / (2 * h)
        assert jac[:, i] == pytest.approx(fd, rel=2e-4, abs=1e-8), (i, jac[:, i], fd)


# ---------------------------------------------------------------- Hebbian (2.5), scores (2.4)


@pytest.mark.parametrize("d", [32, pytest.param(64, marks=pytest.mark.slow)])
def test_hebbian_accuracy_vs_simulation(d):
    """DP: the finite-size law is exact, so simulation agrees within 5 standard errors of the
    simulated mean accuracy. OP: independent-competitor approximation, within 0.03."""
    for alpha in (0.2, 0.3):
        p = jm.p_from_alpha(d, alpha)
        for problem in ("op", "dp"):
            tasks = jm.make_tasks(jax.random.key(d), n=32, d=d, p=p, problem=problem)
            acc = np.asarray(jax.vmap(jm.metrics)(jm.hebbian(tasks), tasks).stored).mean(1)
            pred = float(th.hebbian(d, p, problem).accuracy)
            if problem == "dp":
                assert abs(acc.mean() - pred) < 5 * acc.std() / math.sqrt(32) + 2e-3
            else:
                assert abs(acc.mean() - pred) < 0.03
    assert float(th.hebbian_asymptotic(32, 72)) > 0.89  # docs/science.md: the asymptote is badly off


def test_optimal_score_law_sits_below_threshold():
    law = th.optimal_scores(1000, samples=20000)
    s = law.summary()
    assert s["target_mean"] < s["threshold"] and s["target_std"] < 1.0
    heb = th.hebbian_scores(32, 72, "dp", samples=20000).summary()
    assert heb["target_std"] > s["target_std"]


# ---------------------------------------------------------------- listwise (2.6)


def test_listwise_closed_form_vs_integration(x64):
    for r in (0.01, 0.1, 0.5, 1.0):
        k = float(th.kappa_r(r))
        q = stats.norm.ppf(1 - r)
        mean_tail = integrate.quad(lambda g: g * stats.norm.pdf(g), q, np.inf)[0] / r
        assert abs(k - mean_tail) < 1e-8
        e = integrate.quad(lambda g: (k - g) ** 2 * stats.norm.pdf(g), -np.inf, k)[0]
        assert abs(float(th.listwise_alpha_c(r)) - 1 / e) < 1e-8


def test_theory_outputs_are_float64_without_global_flag():
    assert not jax.config.jax_enable_x64
    assert th.alpha_c(100.0, se_target=0.05).dtype == jnp.float64
    assert jm.make_task(jax.random.key(0), d=4, p=5).inputs.dtype == jnp.float32


def test_listwise_keeps_precision_at_tiny_r():
    from scipy.special import ndtri as sp_ndtri

    for r in (1e-17, 1e-10, 0.1):
        z = -float(sp_ndtri(r))  # scipy's upper quantile, computed independently
        want = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) / r
        assert float(th.kappa_r(r)) == pytest.approx(want, rel=1e-10)
    assert 0.0 < float(th.listwise_alpha_c(1e-17)) < 0.05


# ---------------------------------------------------------------- the transition curve (2.8)


@pytest.mark.slow  # 100 s of sampling; its lowering under jit is in test_theory_contract
def test_transition_curve_and_its_loads(x64):
    """The kinematic prediction: P = 1/2 at p_50, decreasing in p, the three loads ordered, the
    centre on Gardner's alpha_c(p_50) within errors, the band narrowing relative to its centre
    as d grows, a smaller rank moving it down, and d P / d p against float64 differences."""
    widths = []
    for d in (16, 48):
        L = th.transition_loads(d)
        p50 = float(L.p_50)
        assert float(th.transition(d, p50).probability) == pytest.approx(0.5, abs=1e-6)
        ps = p50 * np.array([0.9, 1.0, 1.1])
        P = [float(th.transition(d, p).probability) for p in ps]
        assert P[0] > 0.5 > P[2]
        assert float(L.alpha_p75) < float(L.alpha_50) < float(L.alpha_p25)
        se = math.hypot(float(L.alpha_50_se), 0.0015 * 2)
        assert abs(float(L.alpha_50) - float(th.alpha_c(p50))) < 3 * se
        widths.append((float(L.alpha_p25) - float(L.alpha_p75)) / float(L.alpha_50))
    assert widths[1] < widths[0]
    assert float(th.transition_loads(16, 0.5).alpha_50) < float(th.transition_loads(16).alpha_50)
    f = lambda p: th.transition(32, p).probability
    g = float(jax.grad(f)(180.0))
    fd = (float(f(180.0 + 0.01)) - float(f(180.0 - 0.01))) / 0.02
    assert g == pytest.approx(fd, rel=1e-4) and g < 0


@pytest.mark.slow
def test_traced_garbage_gives_nan_never_a_plausible_number(x64):
    """Under vmap: alpha_c at a p beyond what its static order statistics cover, or at an
    invalid p or kappa, is NaN (the eager call sizes them to p and is right); F outside (0, 1]
    is NaN; F at tiny kappa keeps its precision (4 kappa)."""
    cap = np.asarray(jax.vmap(th.alpha_c)(jnp.array([1e3, 1e12, 1e300, -5.0, np.nan])))
    assert np.isfinite(cap[:2]).all() and np.isnan(cap[2:]).all()
    assert 0.5 < float(th.alpha_c(1e300)) < 0.52
    F = np.asarray(jax.vmap(th.F)(jnp.array([0.5, 1.5, -0.1, np.nan])))
    assert np.isfinite(F[0]) and np.isnan(F[1:]).all()
    assert float(th.F(1e-12)) == pytest.approx(4e-12, rel=1e-6)
    assert np.isnan(np.asarray(jax.vmap(lambda k: th.alpha_c(1e4, kappa=k))(jnp.array([-1.0, 2.0])))).all()
