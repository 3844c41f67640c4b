"""Cost per training step of each discrete-latent estimator against straight-through (notebook 06).

Leave-one-out and DisARM decode every image twice a step: what "at equal decoder passes" in
notebook 06 charges them for.
"""

import keras
from ab import interleaved, ratio_cell

import workbook


def main(n_train=2000, batch_size=64, pairs=5):
    (x_train, _), _ = workbook.load_mnist(n_train=n_train, n_test=100, source="bundled")
    keras.utils.set_random_seed(0)
    discrete = workbook.DiscreteBottleneck
    baseline_label = "categorical straight_through"
    bottlenecks = {
        baseline_label: discrete("categorical", "straight_through", seed=0),
        "categorical gumbel_softmax": discrete("categorical", "gumbel_softmax", seed=0),
        "categorical gumbel_softmax_st": discrete("categorical", "gumbel_softmax_st", seed=0),
        "categorical score_function": discrete("categorical", "score_function", seed=0),
        "categorical score_function_loo, 2 draws": discrete("categorical", "score_function_loo", seed=0),
        "bernoulli score_function": discrete("bernoulli", "score_function", seed=0),
        "bernoulli disarm (an antithetic pair)": discrete("bernoulli", "disarm", seed=0),
        "bernoulli straight_through": discrete("bernoulli", "straight_through", seed=0),
        "bernoulli gumbel_softmax_st": discrete("bernoulli", "gumbel_softmax_st", seed=0),
        "vector quantiser, 32 codes": workbook.VectorQuantizer(n_codes=32),
        "round_ste (deterministic, notebook 04)": "round_ste",
    }
    models = {label: workbook.autoencoder(bottleneck) for label, bottleneck in bottlenecks.items()}
    steps = -(-n_train // batch_size)

    def epoch(model):
        return lambda: model.fit(x_train, x_train, epochs=1, batch_size=batch_size, verbose=0)

    baseline = epoch(models.pop(baseline_label))
    results = interleaved(baseline, {label: epoch(model) for label, model in models.items()}, pairs=pairs)
    base_ms = 1000 * results["baseline"]["cpu_seconds"] / steps
    rows = [
        "| bottleneck | CPU time per step against categorical straight-through, median (min–max) "
        "| wall time ratio | CPU ms / step |",
        "|---|---|---|---|",
        f"| {baseline_label} | 1 (the baseline) | 1 | {base_ms:.0f} |",
    ]
    for label in models:
        r = results[label]
        rows.append(
            f"| {label} | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} | {1000 * r['cpu_seconds'] / steps:.0f} |"
        )
    return (
        f"## Estimator cost\n\nOne epoch of `fit` ({steps} steps of {batch_size} bundled images) per bottleneck, "
        f"{pairs} interleaved rounds after a warm-up; the baseline is `DiscreteBottleneck('categorical', "
        f"'straight_through')`. CPU time per training step, as ratios measured side by side.\n\n"
        + "\n".join(rows)
        + "\n"
    )


if __name__ == "__main__":
    print(main())
