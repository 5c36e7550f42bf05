"""Statistics and reducers against values computed by hand."""

from __future__ import annotations

import math

import pytest

from sluicegate.eval import ScoreStats
from sluicegate.eval._reduce import check_reducer, pass_at, reduce_values, reduced_name
from sluicegate.eval._stats import paired, stats_of, t_quantile

# Student's t 97.5% quantiles from printed tables.
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 30: 2.042, 100: 1.984}


@pytest.mark.parametrize(("df", "expected"), sorted(T_TABLE.items()))
def test_t_quantile_matches_the_tables(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_tends_to_the_normal_quantile() -> None:
    assert t_quantile(0.975, 1000) == pytest.approx(1.9623, abs=1e-4)
    assert t_quantile(0.975, 1001) == pytest.approx(1.9623, abs=1e-4)
    assert t_quantile(0.975, 10**6) == pytest.approx(1.95997, abs=1e-4)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0.975, 0)


def test_one_rollout_per_task_is_not_clustered() -> None:
    # mean 0.75; s^2 = (3 * 0.25^2 + 0.75^2) / 3 = 0.25, s = 0.5; stderr = 0.5 / 2.
    stats = stats_of({"a": [1.0], "b": [0.0], "c": [1.0], "d": [1.0]})
    assert stats is not None
    assert (stats.mean, stats.n, stats.tasks, stats.clustered) == (0.75, 4, 4, False)
    assert stats.stderr == pytest.approx(0.25)
    assert stats.ci95 == pytest.approx((0.75 - 3.1824 * 0.25, 0.75 + 3.1824 * 0.25), abs=1e-4)


def test_several_rollouts_per_task_cluster_by_task() -> None:
    # Task means 1, 0.5, 0: mean 0.5, s = sqrt((0.25 + 0 + 0.25) / 2) = 0.5,
    # stderr = 0.5 / sqrt(3); t(2) = 4.3027. Unclustered, the six values would
    # give a smaller stderr: sqrt(0.3) / sqrt(6) = 0.2236 against 0.2887.
    stats = stats_of({"a": [1.0, 1.0], "b": [0.0, 1.0], "c": [0.0, 0.0]})
    assert stats is not None
    assert (stats.mean, stats.n, stats.tasks, stats.clustered) == (0.5, 6, 3, True)
    assert stats.stderr == pytest.approx(0.5 / math.sqrt(3))
    half = 4.3027 * 0.5 / math.sqrt(3)
    assert stats.ci95 == pytest.approx((0.5 - half, 0.5 + half), abs=1e-4)


def test_clustered_mean_is_the_mean_of_task_means() -> None:
    # Uneven rollouts: the rollout mean is 3/4, the mean of task means 1/2.
    stats = stats_of({"a": [1.0, 1.0, 1.0], "b": [0.0]})
    assert stats is not None and stats.mean == 0.5 and stats.clustered


def test_one_unit_has_no_spread() -> None:
    assert stats_of({"a": [0.25]}) == ScoreStats(mean=0.25, n=1, tasks=1)
    # Two rollouts of one task: one cluster, still no spread between tasks.
    only = stats_of({"a": [0.0, 1.0]})
    assert only is not None and only.stderr is None and only.ci95 is None and only.clustered
    assert stats_of({}) is None and stats_of({"a": []}) is None


def test_huge_scores_keep_a_finite_mean_and_stderr() -> None:
    # Float sums overflow here; the statistics are taken in exact fractions.
    stats = stats_of({"a": [1e308], "b": [1e308]})
    assert stats is not None and stats.mean == 1e308 and stats.stderr == 0.0
    # Deviations of 1e308: s = sqrt(2) * 1e308, stderr = s / sqrt(2) = 1e308.
    spread = stats_of({"a": [1e308], "b": [-1e308]})
    assert spread is not None and spread.mean == 0.0
    assert spread.stderr == pytest.approx(1e308)
    # An interval of 12.7e308 either side is past the float range: none.
    assert spread.ci95 is None


def test_paired_differences() -> None:
    # d = 0.5, 0, -0.25, 0.75: mean 0.25, s^2 = (0.0625 + 0.0625 + 0.25 + 0.25) / 3.
    stats = paired([0.5, 0.0, -0.25, 0.75])
    assert stats is not None
    assert stats.mean == 0.25 and stats.n == 4
    stderr = math.sqrt(0.625 / 3) / 2
    assert stats.stderr == pytest.approx(stderr)
    assert stats.ci95 == pytest.approx((0.25 - 3.1824 * stderr, 0.25 + 3.1824 * stderr), abs=1e-4)
    assert paired([]) is None


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c / n
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 0, 3, 0.0),  # c = 0
        (3, 1, 3, 1.0),  # n = k: any correct rollout
        (3, 0, 3, 0.0),  # n = k, c = 0
        (4, 4, 2, 1.0),
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
    ],
)
def test_pass_at_k_by_hand(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at(n, c, k) == pytest.approx(expected)


def test_pass_at_k_has_no_value_over_fewer_than_k_rollouts() -> None:
    assert pass_at(2, 2, 3) is None
    assert reduce_values("pass_at_3", [1.0, 1.0], 1.0) is None


def test_reducers_over_one_task() -> None:
    values = [0.0, 1.0, 0.5, 1.0]
    assert reduce_values("mean", values, 1.0) == 0.625
    assert reduce_values("max", values, 1.0) == 1.0
    assert reduce_values("min", values, 1.0) == 0.0
    assert reduce_values("median", values, 1.0) == 0.75
    assert reduce_values("median", [0.2, 0.9, 0.4], 1.0) == 0.4
    assert reduce_values("mode", values, 1.0) == 1.0
    assert reduce_values("mode", [0.5, 0.25], 1.0) == 0.25  # tied: the smallest
    # Two of four at >= 1.0 are correct; at >= 0.5, three.
    assert reduce_values("pass_at_1", values, 1.0) == 0.5
    assert reduce_values("pass_at_1", values, 0.5) == 0.75
    assert reduce_values("at_least_2", values, 1.0) == 1.0
    assert reduce_values("at_least_3", values, 1.0) == 0.0
    assert reduce_values("at_least_3", values, 0.5) == 1.0


def test_reducer_names() -> None:
    assert check_reducer("pass_at_10") == "pass_at_10"
    for wrong in ("pass_at_0", "pass_at_k", "avg", "at_least_", "Mean"):
        with pytest.raises(ValueError, match="pass_at_K or at_least_K"):
            check_reducer(wrong)
    with pytest.raises(TypeError):
        check_reducer(3)
    assert reduced_name("score", "max", "score") == "max"
    assert reduced_name("exact", "max", "score") == "exact/max"
