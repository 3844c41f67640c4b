"""Estimators compared fairly: at equal loss evaluations, and over several problems.

Introduced in 06_beyond_straight_through.ipynb. One problem's ranking is an anecdote:
:func:`rank_estimators` measures every estimator on each of several problems and sorts
them by the error of a step's mean gradient over a budget of loss evaluations.
"""

from dataclasses import dataclass

import numpy as np

from workbook.core.arguments import check_count, refuse
from workbook.estimators.bias_variance import DiscreteProblem, measure_estimators

__all__ = ["rank_estimators", "clearly_smaller_error", "RankingSummary", "summarise_ranking"]


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


def rank_estimators(problems, batch_size=64, n_samples=1000, seed=0, taus=(0.1, 0.25, 0.5, 1.0, 2.0)):
    """For each problem, :func:`measure_estimators`' results from the smallest error of a step to the largest.

    Introduced in 06_beyond_straight_through.ipynb. The error is that of a step's mean gradient
    over a budget of ``batch_size`` loss evaluations (:meth:`BiasVariance.gradient_error` with
    ``equal_evaluations=True``): an estimator that evaluates the loss twice averages half as many
    estimates. One problem's ranking says little; several say which estimator tends to win.

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
    """

    relative_bias: float
    rank: int
    n_estimators: int
    beaten_by: int
    best: str
    leave_one_out_per_evaluation: tuple
    disarm_over_leave_one_out: object


def summarise_ranking(ranking, batch_size=64):
    """A :class:`RankingSummary` of one problem's results from :func:`rank_estimators`."""
    by_label = {result.label: result for result in ranking}
    straight = by_label["straight_through"]
    score = by_label["score_function"]
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
    )
