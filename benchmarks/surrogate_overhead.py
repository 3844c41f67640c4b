"""Cost of a surrogate bottleneck against the identity and the stop_gradient trick (target 1.05x)."""

import keras
from ab import interleaved, ratio_cell
from keras import ops

import workbook


def stop_gradient_round(z):
    """The hand-written straight-through trick: forward round, backward identity."""
    return z + ops.stop_gradient(ops.round(z) - z)


def main(n_train=4000, batch_size=64, pairs=5):
    (x_train, _), _ = workbook.load_mnist(n_train=n_train, n_test=100, source="bundled")
    keras.utils.set_random_seed(0)
    models = {
        "identity": workbook.autoencoder(),
        "round_ste": workbook.autoencoder(bottleneck="round_ste"),
        "floor_smooth": workbook.autoencoder(bottleneck="floor_smooth"),
        "x + stop_gradient(round(x) - x)": workbook.autoencoder(bottleneck=stop_gradient_round),
    }

    def epoch(model):
        return lambda: model.fit(x_train, x_train, epochs=1, batch_size=batch_size, verbose=0)

    baseline = epoch(models.pop("identity"))
    trick = models["x + stop_gradient(round(x) - x)"]
    results = interleaved(baseline, {name: epoch(model) for name, model in models.items()}, pairs=pairs)
    against_trick = interleaved(epoch(trick), {"round_ste": epoch(models["round_ste"])}, pairs=pairs)
    rows = [
        "| bottleneck | against | CPU time ratio, median (min–max) | wall time ratio | CPU s / epoch |",
        "|---|---|---|---|---|",
    ]
    for name in models:
        r = results[name]
        rows.append(
            f"| {name} | identity | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} | {r['cpu_seconds']:.1f} |"
        )
    r = against_trick["round_ste"]
    rows.append(
        f"| round_ste | stop_gradient trick | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} "
        f"| {r['cpu_seconds']:.1f} |"
    )
    header = (
        f"## Surrogate overhead\n\nOne epoch of `fit` on {n_train} bundled images, batch {batch_size}, "
        f"{pairs} interleaved rounds after a warm-up; identity bottleneck: "
        f"{results['baseline']['cpu_seconds']:.1f} CPU s per epoch. Target at most 1.05x."
    )
    return header + "\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(main())
