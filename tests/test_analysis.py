"""Properties of rl_notes.analysis (hypothesis): t quantiles invert the distribution function, intervals contain the
mean and widen with the level, the minimum detectable effect falls with n, smoothing keeps constants and lines."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rl_notes.analysis import (betainc, effect, mde, mde_factor, mean_se, paired, pm, smooth, t_cdf, t_power, t_ppf,
                               t_test, verdict, window)

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
samples = st.lists(finite, min_size=2, max_size=30)


@settings(max_examples=60, deadline=None)
@given(p=st.floats(0.001, 0.999), df=st.floats(0.5, 200))
def test_t_ppf_inverts_t_cdf(p, df):
    assert t_cdf(t_ppf(p, df), df) == pytest.approx(p, abs=1e-9)
    assert t_ppf(1 - p, df) == pytest.approx(-t_ppf(p, df), abs=1e-6 * max(1, abs(t_ppf(p, df))))


@settings(max_examples=60, deadline=None)
@given(t=st.floats(-50, 50), df=st.floats(0.5, 100))
def test_t_cdf_is_a_distribution_function(t, df):
    c = t_cdf(t, df)
    assert 0 <= c <= 1 and t_cdf(t + 0.1, df) >= c
    assert c + t_cdf(-t, df) == pytest.approx(1, abs=1e-12)


def test_t_quantiles_against_tables():
    # two-sided 95% critical values of Student's t (any statistics table), and the normal limit
    for df, ref in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (29, 2.0452), (120, 1.9799), (1e8, 1.9600)):
        assert t_ppf(0.975, df) == pytest.approx(ref, abs=1e-4)
    assert betainc(1, 1, 0.3) == pytest.approx(0.3)                      # the uniform distribution
    assert betainc(0.5, 0.5, 0.5) == pytest.approx(0.5)


@settings(max_examples=80, deadline=None)
@given(xs=samples, level=st.floats(0.5, 0.99))
def test_interval_contains_the_mean_and_widens_with_the_level(xs, level):
    e = effect(xs, level)
    assert e.lo <= e.mean <= e.hi and 0 <= e.p <= 1
    wider = effect(xs, min(0.999, level + 0.005))
    assert wider.lo <= e.lo + 1e-12 and wider.hi >= e.hi - 1e-12


@settings(max_examples=60, deadline=None)
@given(xs=samples, shift=finite)
def test_paired_is_the_effect_of_the_differences(xs, shift):
    a = np.asarray(xs); b = a + shift + np.linspace(-1, 1, len(a))
    assert paired(a, b) == effect(b - a)
    assert paired(a, b).mean == pytest.approx(-paired(b, a).mean)


def test_p_of_two_standard_errors_at_five_seeds():
    assert t_test(2.0, 1.0, 5).p == pytest.approx(0.116, abs=0.001)     # not the normal 0.046
    assert t_test(0.0, 1.0, 5).p == 1.0 and t_test(1.0, 0.0, 5).p == 0.0


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), sd=st.floats(0.01, 10))
def test_mde_falls_with_n_and_approaches_the_normal_factor(n, sd):
    assert mde(sd, n + 1, exact=False) < mde(sd, n, exact=False)
    assert mde_factor(n, exact=False) > 1.959964 + 0.841621              # t quantiles exceed the normal ones


@pytest.mark.parametrize("n", [2, 3, 5, 10, 30])
def test_mde_factor_has_the_power_it_claims(n):
    f = mde_factor(n)
    assert t_power(f, n) == pytest.approx(0.8, abs=1e-6)
    assert mde_factor(n + 1) < f
    approx = t_power(mde_factor(n, exact=False), n)                      # the power the usual approximation really has
    assert abs(approx - 0.8) < (0.08 if n < 5 else 0.01 if n < 10 else 0.002)


def test_mde_factor_at_five_seeds():
    assert mde_factor(5, exact=False) == pytest.approx(3.717, abs=1e-3)  # the t version of 1.96 + 0.84
    assert mde_factor(5) == pytest.approx(3.761, abs=2e-3)


@settings(max_examples=80, deadline=None)
@given(c=finite, n=st.integers(1, 80), k=st.integers(1, 30))
def test_smoothing_a_constant_gives_the_constant(c, n, k):
    assert np.allclose(smooth(np.full(n, c), k), c, atol=1e-9 * max(1, abs(c)))


@settings(max_examples=60, deadline=None)
@given(ys=st.lists(finite, min_size=1, max_size=60), k=st.integers(1, 15))
def test_smoothing_stays_within_the_range_and_keeps_the_length(ys, k):
    s = smooth(ys, k)
    assert s.shape == (len(ys),)
    assert s.min() >= min(ys) - 1e-9 and s.max() <= max(ys) + 1e-9


def test_smoothing_keeps_a_line_away_from_the_ends():
    y = 3.0 * np.arange(20) + 1
    assert np.allclose(smooth(y, 5)[2:-2], y[2:-2])


def test_mean_se_and_pm():
    m, se = mean_se([1.0, 2.0, 3.0])
    assert m == 2.0 and se == pytest.approx(1 / math.sqrt(3))
    assert pm([1.0, 2.0, 3.0], digits=2) == "2.00 ± 0.58" and pm([1.0, 2.0, 3.0], 2, spread="sd") == "2.00 ± 1.00"
    assert math.isnan(mean_se([1.0])[1])


def test_verdict_needs_the_t_interval(capsys):
    assert not verdict("X", 0.025, 0.010, 5, "gap", "cond")              # 2.5 s.e. at 5 seeds: p 0.067
    assert "inconclusive" in capsys.readouterr().out                      # the claimed sign, the interval reaching 0
    assert verdict("X", -0.03, 0.01, 5, "gap", "cond", sign=-1)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="`k` must be an int >= 1"): smooth([1.0], 0)
    with pytest.raises(ValueError, match="`n` must be an int >= 2"): effect([1.0])
    with pytest.raises(ValueError, match="one value per seed each"): paired([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="no 'x' value in steps 5..6"): window([{"step": 1, "x": 1.0}], "x", 5, 6)
