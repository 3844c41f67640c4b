"""Estimators compared fairly: at equal loss evaluations, and over several problems.

Introduced in 06_beyond_straight_through.ipynb. One problem's ranking is an anecdote:
:func:`rank_estimators` measures every estimator on each of several problems and sorts
them by the error of a step's mean gradient over a budget of loss evaluations.
"""

from dataclasses import dataclass

import numpy as np

from workbook.core.arguments import check_count, refuse
from workbook.estimators.bias_variance import DiscreteProblem, measure_bias_and_variance, measure_estimators

__all__ = [
    "rank_estimators",
    "clearly_smaller_error",
    "paired_error_difference",
    "RankingSummary",
    "summarise_ranking",
    "ranking_table",
    "BEST_CONSTANT",
]

#: The ``baseline`` of the score function measured with the constant baseline of least variance, b*.
BEST_CONSTANT = "best constant"
#: Consecutive groups the estimates are split into for a paired comparison: each a small measurement.
GROUPS = 20


def clearly_smaller_error(a, b, batch_size, equal_evaluations=True):
    """True when ``a``'s :meth:`BiasVariance.gradient_error` is below ``b``'s by 3 combined standard errors.

    Introduced in 06_beyond_straight_through.ipynb; by default at equal loss evaluations.
    """
    margin = np.hypot(
        a.gradient_error_standard_error(batch_size, equal_evaluations),
        b.gradient_error_standard_error(batch_size, equal_evaluations),
    )
    return a.gradient_error(batch_size, equal_evaluations) + 3 * margin < b.gradient_error(
        batch_size, equal_evaluations
    )


def paired_error_difference(a, b, batch_size, equal_evaluations=True, groups=GROUPS):
    """(mean, standard error) of ``a``'s error of a step minus ``b``'s, paired over groups of estimates.

    Introduced in 06_beyond_straight_through.ipynb. ``a`` and ``b`` are measured on the same
    problem with the same seed and number of estimates. Both are split into ``groups``
    consecutive groups; in each, both errors are measured as :meth:`BiasVariance.gradient_error`
    does (``|mean - exact|^2`` less the noise's share, plus the variance over the budget, here
    without clipping at 0, so that the mean over groups stays unbiased), and the per-group
    differences give the mean and its standard error. Pairing by group keeps what the two
    measurements share out of the comparison; a difference below 0 by 2 standard errors is a
    smaller error at about 95% confidence.
    """
    if a.estimates is None or b.estimates is None or a.estimates.shape != b.estimates.shape:
        allowed = "two results of measure_bias_and_variance on the same problem, with as many estimates"
        refuse("a, b", (a.label, b.label), allowed, "paired_error_difference")
    check_count("groups", groups, low=2, high=a.n_samples // 2, owner="paired_error_difference")
    differences = _group_errors(a, batch_size, equal_evaluations, groups) - _group_errors(
        b, batch_size, equal_evaluations, groups
    )
    return float(differences.mean()), float(differences.std(ddof=1) / np.sqrt(groups))


def _group_errors(result, batch_size, equal_evaluations, groups):
    """Each group's unclipped estimate of ``result.gradient_error``."""
    size = result.n_samples // groups
    estimates = result.estimates[: size * groups].reshape(groups, size, -1)
    means = estimates.mean(axis=1)
    variances = estimates.var(axis=1, ddof=1).sum(axis=1)
    squared_bias = np.sum((means - result.exact.reshape(1, -1)) ** 2, axis=1) - variances / size
    cost = result.evaluations if equal_evaluations else 1
    return squared_bias + variances * cost / batch_size


def rank_estimators(problems, batch_size=64, n_samples=1000, seed=0, taus=(0.1, 0.25, 0.5, 1.0, 2.0)):
    """For each problem, :func:`measure_estimators`' results from the smallest error of a step to the largest.

    Introduced in 06_beyond_straight_through.ipynb. The error is that of a step's mean gradient
    over a budget of ``batch_size`` loss evaluations (:meth:`BiasVariance.gradient_error` with
    ``equal_evaluations=True``): an estimator that evaluates the loss twice averages half as many
    estimates. One problem's ranking says little; several say which estimator tends to win.
    Beside :func:`measure_estimators`' results, each ranking holds the score function with the
    constant baseline of least variance, ``b*`` (its ``baseline`` is :data:`BEST_CONSTANT`): a
    baseline one could tune, known here by listing outcomes.

    Returns
    -------
    list of list of BiasVariance
        One list per problem, in the order given, each sorted by error.
    """
    if isinstance(problems, DiscreteProblem) or not isinstance(problems, (list, tuple)) or not problems:
        refuse(
            "problems",
            problems,
            "a non-empty list of DiscreteProblem, e.g. [workbook.make_problem(seed=s) for s in range(4)]",
            "rank_estimators",
        )
    for problem in problems:
        if not isinstance(problem, DiscreteProblem):
            refuse(
                "problems",
                problems,
                "a list of DiscreteProblem only, e.g. [workbook.make_problem()]",
                "rank_estimators",
            )
    check_count("batch_size", batch_size, high=1_000_000, owner="rank_estimators")
    rankings = []
    for problem in problems:
        results = measure_estimators(problem, taus=taus, n_samples=n_samples, seed=seed)
        best_constant = measure_bias_and_variance(
            "score_function", problem, n_samples, baseline=problem.optimal_baseline(), seed=seed
        )
        best_constant.baseline = BEST_CONSTANT
        results.append(best_constant)
        rankings.append(sorted(results, key=lambda r: r.gradient_error(batch_size, equal_evaluations=True)))
    return rankings


@dataclass
class RankingSummary:
    """Straight-through's place in one problem's ranking, and the variances per loss evaluation.

    Introduced in 06_beyond_straight_through.ipynb.

    Attributes
    ----------
    relative_bias : float
        Straight-through's ``bias_norm`` over the length of the exact gradient.
    rank : int
        Straight-through's place, 1 for the smallest error, among ``n_estimators``.
    n_estimators : int
    beaten_by : int
        How many estimators have a clearly smaller error (:func:`clearly_smaller_error`).
    best : str
        The label of the estimator with the smallest error.
    leave_one_out_per_evaluation : tuple of float
        (ratio, standard error): leave-one-out's variance times its 2 evaluations over the
        moving-average score function's variance.
    disarm_over_leave_one_out : float or None
        DisARM's variance over leave-one-out's, at the same 2 evaluations (None: no DisARM).
    best_minus_straight_through : tuple of float
        (difference, standard error) of the best estimator's error minus straight-through's,
        paired (:func:`paired_error_difference`); (0, 0) when straight-through is the best.
    best_constant_minus_straight_through : tuple of float
        The same for the score function with its best constant baseline.
    """

    relative_bias: float
    rank: int
    n_estimators: int
    beaten_by: int
    best: str
    leave_one_out_per_evaluation: tuple
    disarm_over_leave_one_out: object
    best_minus_straight_through: tuple = (0.0, 0.0)
    best_constant_minus_straight_through: tuple = (0.0, 0.0)


def summarise_ranking(ranking, batch_size=64):
    """A :class:`RankingSummary` of one problem's results from :func:`rank_estimators`."""
    by_label = {result.label: result for result in ranking}
    straight = by_label["straight_through"]
    score = by_label["score_function"]
    best_constant = next((result for result in ranking if result.baseline == BEST_CONSTANT), None)
    two = next(result for result in ranking if result.estimator == "score_function_loo")
    ratio = two.variance * two.evaluations / score.variance
    relative_errors = np.hypot(
        two.variance_standard_error / two.variance, score.variance_standard_error / score.variance
    )
    disarm = by_label.get("disarm")
    return RankingSummary(
        straight.relative_bias,
        ranking.index(straight) + 1,
        len(ranking),
        sum(clearly_smaller_error(result, straight, batch_size) for result in ranking),
        ranking[0].label,
        (float(ratio), float(ratio * relative_errors)),
        None if disarm is None else disarm.variance / two.variance,
        paired_error_difference(ranking[0], straight, batch_size),
        (0.0, 0.0) if best_constant is None else paired_error_difference(best_constant, straight, batch_size),
    )


def ranking_table(summaries):
    """The summaries of several problems' rankings as a text table, one row per problem.

    Introduced in 06_beyond_straight_through.ipynb. ``summaries`` is ``{problem name: RankingSummary}``;
    each difference is shown with about 95% confidence (2 paired standard errors).
    """
    lines = [
        f"{'':27s} {'straight-through':^21s} {'':28s} {'error minus straight-through':^40s}   {'per evaluation':^16s}",
        f"{'problem':27s} {'rel. bias':>9s} {'rank':>7s}    {'smallest error':28s} {'that one':>17s}"
        f" {'best-constant score':>22s}   {'LOO/SF':>6s} {'DisARM/LOO':>10s}",
    ]
    for name, summary in summaries.items():
        (best, best_error), (constant, constant_error) = (
            summary.best_minus_straight_through,
            summary.best_constant_minus_straight_through,
        )
        disarm = "-" if summary.disarm_over_leave_one_out is None else f"{summary.disarm_over_leave_one_out:.2f}"
        lines.append(
            f"{name:27s} {summary.relative_bias:9.2f} {summary.rank:4d}/{summary.n_estimators:<2d}"
            f"    {summary.best:28s}"
            f" {best:+8.4f} ± {2 * best_error:.4f} {constant:+12.4f} ± {2 * constant_error:.4f}"
            f"   {summary.leave_one_out_per_evaluation[0]:6.2f} {disarm:>10s}"
        )
    return "\n".join(lines)
