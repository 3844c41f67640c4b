"""Cost of training a quantised network against its float twin (07_quantisation_aware_training.ipynb; target 1.3x).

The same network, the same digits and batches: notebook 07's MLP with binarised weights and
activations (``sign_clipped_ste``), or with 2-bit learned-step quantisers, against the same MLP
without quantisers; and a small convolutional network of ``QuantConv2D`` against ``keras.layers.Conv2D``.
"""

import keras
from ab import interleaved, ratio_cell

import workbook


def conv_net(quantised):
    """Conv(16, 3x3) -> BN -> Conv(32, 3x3, stride 2) -> BN -> Dense(10), binarised or float."""
    keras.utils.set_random_seed(0)
    if quantised:
        sign = {"kernel_quantizer": "sign_clipped_ste", "kernel_constraint": workbook.WeightClip(1.0)}
        convs = [
            workbook.QuantConv2D(16, 3, **sign),
            workbook.QuantConv2D(32, 3, strides=2, input_quantizer="sign_clipped_ste", **sign),
        ]
    else:
        convs = [
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        ]
    model = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            convs[0],
            keras.layers.BatchNormalization(),
            convs[1],
            keras.layers.BatchNormalization(),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def main(n_train=4000, batch_size=64, pairs=5):
    (x_train, y_train), _ = workbook.load_mnist(n_train=n_train, n_test=100, source="bundled")
    lsq = {
        "kernel_quantizer": workbook.LearnedStepQuantizer(2, role="weights"),
        "input_quantizer": workbook.LearnedStepQuantizer(2),
    }
    bnn = {"kernel_quantizer": "sign_clipped_ste", "input_quantizer": "sign_clipped_ste"}

    def epoch(model):
        return lambda: model.fit(x_train, y_train, epochs=1, batch_size=batch_size, verbose=0)

    mlp = interleaved(
        epoch(workbook.quantised_mlp()),
        {
            "MLP, binarised (sign_clipped_ste)": epoch(workbook.quantised_mlp(**bnn)),
            "MLP, 2-bit learned steps": epoch(workbook.quantised_mlp(**lsq)),
        },
        pairs=pairs,
    )
    conv = interleaved(epoch(conv_net(False)), {"conv, binarised": epoch(conv_net(True))}, pairs=pairs)
    rows = ["| network | CPU time ratio to its float twin, median (min–max) | wall time ratio | CPU s / epoch |"]
    rows.append("|---|---|---|---|")
    for results in (mlp, conv):
        for name, r in results.items():
            if name != "baseline":
                rows.append(f"| {name} | {ratio_cell(r['cpu'])} | {ratio_cell(r['wall'])} | {r['cpu_seconds']:.2f} |")
    header = (
        f"## Quantised layers against their float twins\n\nOne epoch of `fit` on {n_train} bundled digits, batch "
        f"{batch_size}, {pairs} interleaved rounds after a warm-up; the float MLP takes "
        f"{mlp['baseline']['cpu_seconds']:.2f} CPU s per epoch, the float conv net "
        f"{conv['baseline']['cpu_seconds']:.2f}. "
        "Target at most 1.3x."
    )
    return header + "\n\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    workbook.setup(seed=0)
    print(main())
