"""The bias-variance picture of the gradient estimators.

Introduced in 06_beyond_straight_through.ipynb; draws what
:func:`workbook.measure_estimators` measured.
"""

import numpy as np

from .figures import new_figure

__all__ = ["plot_bias_variance"]

_COLORS = {
    "straight_through": "tab:blue",
    "gumbel_softmax": "tab:orange",
    "gumbel_softmax_st": "tab:green",
    "score_function": "tab:red",
}


def plot_bias_variance(results, title="Bias against variance of one-sample gradient estimates"):
    """Bias (length of mean estimate - exact gradient) against variance, log-log; one line per tau sweep.

    Introduced in 06_beyond_straight_through.ipynb.

    Parameters
    ----------
    results : list of BiasVariance
        From :func:`workbook.measure_estimators` or :func:`workbook.measure_bias_and_variance`.
    title : str

    Returns
    -------
    matplotlib.figure.Figure
        Shown as a PNG when it is a cell's last value. The grey line is the noise floor
        ``sqrt(variance / n_samples)``: a point near it has no bias this many samples can see.
    """
    results = list(results)
    if not results or not all(hasattr(r, "bias_norm") and hasattr(r, "variance") for r in results):
        raise ValueError(
            "plot_bias_variance: results must be a non-empty list of BiasVariance, e.g. workbook.measure_estimators()."
        )
    figure = new_figure(figsize=(7.2, 4.6))
    ax = figure.subplots()
    for estimator in dict.fromkeys(r.estimator for r in results):
        mine = sorted((r for r in results if r.estimator == estimator), key=lambda r: r.tau or 0)
        color = _COLORS.get(estimator, "black")
        ax.plot([r.variance for r in mine], [r.bias_norm for r in mine], "o-", color=color, label=estimator)
        for r in mine:
            if r.tau is not None:
                ax.annotate(
                    f"τ={r.tau:g}",
                    (r.variance, r.bias_norm),
                    textcoords="offset points",
                    xytext=(5, 4),
                    fontsize="x-small",
                    color=color,
                )
    variances = np.array([r.variance for r in results])
    n_samples = min(r.n_samples for r in results)
    line = np.geomspace(variances.min() / 2, variances.max() * 2, 50)
    ax.plot(line, np.sqrt(line / n_samples), ":", color="grey", label=f"noise floor ({n_samples} samples)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("variance of one estimate (trace of its covariance)")
    ax.set_ylabel("bias: |mean estimate - exact gradient|")
    ax.set_title(title, fontsize="medium")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize="small", loc="best")
    figure.tight_layout()
    return figure
