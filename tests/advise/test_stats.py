"""The interval math of advise, against published values."""

from __future__ import annotations

import pytest

from statemachine.advise.stats import gamma_quantile, poisson_rate, quantile, wilson


def test_wilson_matches_the_textbook_interval() -> None:
    """Wilson's 95% interval of 3 of 10 is 0.108-0.603 (Newcombe 1998, method 3)."""
    e = wilson(3, 10)
    assert (e.value, round(e.low or 0, 3), round(e.high or 0, 3)) == (0.3, 0.108, 0.603)
    assert wilson(0, 0).value is None
    zero = wilson(0, 20)
    assert zero.low == pytest.approx(0.0, abs=1e-12)
    assert zero.high is not None and 0.16 < zero.high < 0.17
    with pytest.raises(ValueError):
        wilson(4, 3)


@pytest.mark.parametrize(("k", "low", "high"), [
    (0, 0.0, 3.689), (1, 0.0253, 5.572), (5, 1.623, 11.668), (10, 4.795, 18.390),
])
def test_poisson_interval_is_garwoods_exact_one(k: int, low: float, high: float) -> None:
    """The exact Poisson 95% limits (Garwood 1936; the table in Ulm 1990)."""
    e = poisson_rate(k, 1.0)
    assert e.low == pytest.approx(low, abs=1e-3)
    assert e.high == pytest.approx(high, abs=1e-3)
    halved = poisson_rate(k, 2.0)
    assert halved.high == pytest.approx(high / 2, abs=1e-3)


def test_gamma_quantile_large_shape_is_continuous_with_the_exact_one() -> None:
    """Past the exact bisection's range the approximation agrees with it."""
    assert gamma_quantile(2000, 0.975) == pytest.approx(gamma_quantile(2001, 0.975) - 1,
                                                        rel=1e-3)
    assert poisson_rate(3, 0.0).value is None


def test_quantile_interpolates() -> None:
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([0.0, 10.0], 0.25) == 2.5
