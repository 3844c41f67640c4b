"""Notebook 07's conclusions about training runs, checked at several seeds (07_quantisation_aware_training.ipynb).

Every comparison of training runs the notebook asserts, trained as its cells train them, at its
classroom size, at each seed: a conclusion stays in the text only if it holds at all of them.
The notebook checks them at the seed its Setup cell sets; tests/test_notebook_07_claims.py
checks them at seeds 0 and 1 at the newest end of the tested range, and 2 at the oldest.

    python benchmarks/notebook_07_seeds.py            # seeds 0 to 2, about a minute each on 2 cores
"""

import sys

import numpy as np

import workbook
from workbook.lab.bottleneck_runs import clearly_better

SEEDS = (0, 1, 2)
#: The notebook's `parameters` cell.
CLASSROOM = {"n_train": 4000, "n_test": 1000, "epochs": 3, "batch_size": 64}
BNN = {"kernel_quantizer": "sign_clipped_ste", "input_quantizer": "sign_clipped_ste"}
#: The two networks without batch normalisation whose gradient norms the notebook's monitors compare.
WINDOWS = ("BNN without batch normalisation", "window of 20")


def networks():
    """{label: keyword arguments of workbook.quantised_mlp}: the networks the notebook trains."""
    nets = {
        "float twin": {},
        "binary weights": {"kernel_quantizer": "sign_clipped_ste"},
        "BNN, first and last float": BNN,
        "BNN, every layer binary": {**BNN, "float_first": False, "float_last": False},
        "BNN without batch normalisation": {**BNN, "batch_norm": False},
        "window of 20": {
            "kernel_quantizer": "sign_clipped_ste",
            "input_quantizer": workbook.SURROGATES["sign_clipped_ste"].with_params(clip=20.0),
            "batch_norm": False,
        },
    }
    for bits in (2, 4):
        for name in workbook.STRAIGHT_THROUGH_CLIPS:
            nets[f"{bits}-bit, {name}"] = {"input_quantizer": workbook.ActivationQuantizer(bits, name)}
    for scaled in (True, False):
        nets[f"2-bit LSQ, {'scaled' if scaled else 'unscaled'}"] = {
            "kernel_quantizer": workbook.LearnedStepQuantizer(2, role="weights", gradient_scale=scaled),
            "input_quantizer": workbook.LearnedStepQuantizer(2, gradient_scale=scaled),
        }
    return nets


def claims(seed, n_train, n_test, epochs, batch_size=64):
    """{claim: held} for every training claim of notebook 07 at ``seed``, and "figures"."""
    (x_train, y_train), (x_test, y_test) = workbook.load_mnist(n_train, n_test, source="bundled", seed=seed)
    data = dict(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, epochs=epochs, batch_size=batch_size)
    runs, flips = {}, workbook.KernelSignFlips()
    monitors = {label: workbook.GradientNormMonitor(every=2, live=False) for label in WINDOWS}
    for label, arguments in networks().items():
        callbacks = [flips] if label == "binary weights" else [monitors[label]] if label in monitors else []
        model = workbook.quantised_mlp(**arguments, seed=seed)
        runs[label] = workbook.train_classifier(model, **data, seed=seed, callbacks=callbacks)
    errors = {label: 1 - run.correct for label, run in runs.items()}
    loss = {label: run.history["loss"][-1] for label, run in runs.items()}
    held = {
        "no latent weight moves by 1 in a step, and signs flip every epoch": max(flips.largest_step) < 1
        and all(share[0] > 0 for share in flips.flips),
        "fewer signs flip in the last epoch than in the first": flips.flips[-1][0] < flips.flips[0][0],
        # with 1,000 test digits, clearly at seeds 0 and 1 only (1.8 points at seed 2): the direction is the claim
        "keeping the first and last layers float beats binarising them": errors["BNN, first and last float"].mean()
        < errors["BNN, every layer binary"].mean(),
        "the float twin beats the BNN": clearly_better(errors["float twin"], errors["BNN, first and last float"]),
        "batch normalisation beats none in the BNN": clearly_better(
            errors["BNN, first and last float"], errors["BNN without batch normalisation"]
        ),
    }
    for bits in (2, 4):
        identity = f"{bits}-bit, identity"
        for name in ("relu", "clipped_relu"):
            label = f"{bits}-bit, {name}"
            held[f"{label} beats the identity"] = (
                errors[label].mean() < errors[identity].mean() and loss[label] < loss[identity]
            )
        # clearly for ReLU; the 2-bit clipped ReLU's lead was 2.2 points at seed 1, under 3 standard errors
        held[f"{bits}-bit: ReLU beats the identity clearly"] = clearly_better(
            errors[f"{bits}-bit, relu"], errors[identity]
        )
        held[f"{bits}-bit: the clipped ReLU ends with a lower training loss than ReLU"] = (
            loss[f"{bits}-bit, clipped_relu"] < loss[f"{bits}-bit, relu"]
        )
    scaled, unscaled = errors["2-bit LSQ, scaled"], errors["2-bit LSQ, unscaled"]
    held["LSQ with and without the gradient scale: neither clearly better"] = not (
        clearly_better(scaled, unscaled) or clearly_better(unscaled, scaled)
    )
    closed, opened = (np.nanmedian(monitors[label].history.norms, axis=0) for label in WINDOWS)
    held["behind the closed window the gradient is under half the wide window's, the last layer's alike"] = bool(
        np.all(closed[:2] < 0.5 * opened[:2]) and 0.5 < closed[2] / opened[2] < 2
    )
    held["figures"] = ", ".join(f"{label} {run.accuracy:.3f}" for label, run in runs.items()) + (
        f"; flips per epoch {np.round([share[0] for share in flips.flips], 4).tolist()}"
        f"; median gradient norms, window 1 {np.round(closed, 3).tolist()}, window 20 {np.round(opened, 3).tolist()}"
    )
    return held


def main(seeds=SEEDS, size=None):
    """The claims at every seed, as a markdown section; a claim that failed at any seed is marked."""
    size = size or CLASSROOM
    rows, failed = [], []
    for seed in seeds:
        held = claims(seed, **size)
        figures = held.pop("figures")
        rows.append(f"| {seed} | {'; '.join(k for k, v in held.items() if not v) or '-'} | {figures} |")
        failed += [f"{claim} (seed {seed})" for claim, ok in held.items() if not ok]
    verdict = "Every claim held at every seed." if not failed else "Failed: " + "; ".join(failed)
    return (
        f"\n## Notebook 07's training conclusions across seeds\n\n{size}, seeds {list(seeds)}. {verdict}\n\n"
        "| seed | claims that failed | test accuracy and figures |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    )


if __name__ == "__main__":
    workbook.setup(seed=0)
    section = main([int(seed) for seed in sys.argv[1:]] or SEEDS)
    print(section)
    raise SystemExit(1 if "Failed:" in section else 0)
