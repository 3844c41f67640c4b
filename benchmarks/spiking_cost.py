"""Cost of the spiking layer per time step against the same network with a plain ReLU (target at most 2x).

The layer of 08_spiking_networks.ipynb: the same unrolled recursion, data and training step,
once with the catalogue's SuperSpike surrogate as the spike and once with ``keras.ops.relu``
in its place, so the ratio is what the surrogate spike costs over a plain activation.
"""

import keras
from ab import interleaved, ratio_cell

import workbook
from workbook.spiking.networks import train_steps


def plain_relu_layer(layer):
    """``layer`` with ReLU as its spike: the same recursion, an ordinary activation."""
    layer.surrogate = keras.ops.relu
    return layer


def main(time_steps=50, n_samples=256, n_hidden=16, steps=20, pairs=5):
    x, y = workbook.random_spike_patterns(n_samples=n_samples, time_steps=time_steps, seed=0)
    models = {}
    for name in ("spike", "relu"):
        model = workbook.spiking_classifier(time_steps, x.shape[2], 2, n_hidden=n_hidden, seed=0)
        if name == "relu":
            plain_relu_layer(model.get_layer("hidden"))
        models[name] = model

    def run(model):
        return lambda: train_steps(model, x, y, steps, chunk=steps)

    results = interleaved(run(models["relu"]), {"spike": run(models["spike"])}, pairs=pairs)
    r = results["spike"]
    per_step = 1000 * r["cpu_seconds"] / (steps * time_steps)
    return (
        f"## Spiking layer cost\n\nTraining steps of notebook 08's classifier ({n_samples} patterns, "
        f"{time_steps} time steps, {n_hidden} hidden neurons), {steps} Adam steps per round, {pairs} "
        f"interleaved rounds after a warm-up; the same network with `keras.ops.relu` as its spike is the "
        f"baseline ({results['baseline']['cpu_seconds']:.2f} CPU s a round). Target at most 2x.\n\n"
        "| spike | CPU time ratio, median (min–max) | wall time ratio | CPU ms per time step of a training step |\n"
        "|---|---|---|---|\n"
        f"| SuperSpike surrogate | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} | {per_step:.2f} |\n"
    )


if __name__ == "__main__":
    print(main())
