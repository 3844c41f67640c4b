"""Notebook 06's conclusions about training runs, checked at several seeds (06_beyond_straight_through.ipynb).

Every comparison of training runs the notebook states, at the notebook's classroom size, at each
seed: a conclusion is kept in the text only if it holds at all of them. The notebook checks them
at one seed, the one its Setup cell sets; tests/test_notebook_06_claims.py checks those that
already hold after a few epochs at three seeds, at a reduced size (two at the newest end of the
tested range, the third at the oldest). A run two comparisons share is trained once per seed, as in the notebook.

    python benchmarks/notebook_06_seeds.py            # seeds 0 to 3, about 8 minutes each on 2 cores
    python benchmarks/notebook_06_seeds.py annealing_claims bit_equal_passes_claims   # some comparisons only
"""

import functools
import sys

import numpy as np

import workbook
from workbook.estimators.rate import code_rate
from workbook.lab.bottleneck_runs import clearly_better, example_loss_spread, per_image_errors

SEEDS = (0, 1, 2, 3)
#: The notebook's `parameters` cell.
CLASSROOM = {"n_train": 4000, "n_test": 500, "epochs": 5, "batch_size": 64}
SAMPLED = ("straight_through", "gumbel_softmax", "gumbel_softmax_st", "score_function", "score_function_loo")
#: The notebook's annealing, Jang et al.'s schedule max(0.5, exp(-r t)) at r = 3e-3, updated every 10 steps.
ANNEALING = {"anneal_rate": 3e-3, "anneal_every": 10}


#: The six contenders of the notebook's first comparison.
CATEGORICAL = (*SAMPLED, "vector quantiser, 32 codes")


def contender(name, seed):
    """A fresh bottleneck seeded with ``seed``, by the name the comparisons below share it under.

    One of CATEGORICAL, "soft, annealed", the Bernoulli score functions "shared" and "per example",
    and the quantisers "10 codes", "10 codes, restarts" and "1,024 codes, restarts".
    """
    if name in SAMPLED:
        samples = 2 if name == "score_function_loo" else None
        return workbook.DiscreteBottleneck("categorical", name, seed=seed, samples=samples)
    if name == "soft, annealed":
        return workbook.DiscreteBottleneck("categorical", "gumbel_softmax", seed=seed, **ANNEALING)
    if name == "shared":
        return workbook.DiscreteBottleneck("bernoulli", "score_function", seed=seed)
    if name == "per example":
        return workbook.DiscreteBottleneck("bernoulli", "score_function_loo", samples=2, seed=seed)
    quantisers = {
        "vector quantiser, 32 codes": {"n_codes": 32},
        "10 codes": {"n_codes": 10},
        "10 codes, restarts": {"n_codes": 10, "restart_after": 5},
        "1,024 codes, restarts": {"n_codes": 1024, "restart_after": 5},
    }
    return workbook.VectorQuantizer(seed=seed, **quantisers[name])  # a name not above is a KeyError


@functools.cache
def digits(seed, n_train, n_test):
    """(x_train, x_test): the bundled digits the notebook draws at ``seed``, read-only: the comparisons share them."""
    (x_train, _), (x_test, _) = workbook.load_mnist(n_train=n_train, n_test=n_test, source="bundled", seed=seed)
    for images in (x_train, x_test):
        images.setflags(write=False)
    return x_train, x_test


@functools.cache
def trained(name, seed, n_train, n_test, epochs, batch_size):
    """(run, its random state) of the contender ``name``: trained as the notebook does, once per seed and size.

    A contender that two comparisons share (straight-through, the soft Gumbel-softmax at tau = 1,
    the per-example score function) is trained once, and both compare with that run. Each run is
    seeded on its own (:func:`workbook.compare_bottlenecks` sets the seed before every model), so
    it is the same whichever comparison asks first; the state of its bottleneck's random draws at
    the end of training is kept, for :func:`train` to put back. ``forget()`` lets the runs go.
    """
    import keras

    x_train, x_test = digits(seed, n_train, n_test)
    run = workbook.compare_bottlenecks(
        {name: contender(name, seed)},
        epochs=epochs,
        batch_size=batch_size,
        x_train=x_train,
        x_test=x_test,
        seed=seed,
        show=False,
    )[name]
    generator = getattr(run.model.get_layer("bottleneck"), "seed_generator", None)
    return run, None if generator is None else keras.ops.convert_to_numpy(generator.state)


def forget():
    """Let the runs and digits kept so far go (main() does for each seed, and when it ends)."""
    trained.cache_clear()
    digits.cache_clear()


def train(names, seed, n_train, n_test, epochs, batch_size):
    """The runs of the contenders ``names`` at ``seed``; return (runs, x_train, x_test).

    Each run's bottleneck draws from where its training left it, as a run trained for this
    comparison alone would: which comparison measured it before changes no figure.
    """
    runs = {}
    for name in names:
        run, state = trained(name, seed, n_train, n_test, epochs, batch_size)
        if state is not None:
            run.model.get_layer("bottleneck").seed_generator.state.assign(state)
        runs[name] = run
    return (runs, *digits(seed, n_train, n_test))


def categorical_claims(seed, n_train, n_test, epochs, batch_size=64):
    """{claim: held} for the first comparison of notebook 06, at ``seed``."""
    runs, x_train, x_test = train(CATEGORICAL, seed, n_train, n_test, epochs, batch_size)
    errors = {label: per_image_errors(run.model, x_test) for label, run in runs.items()}
    mean_image = np.mean((x_test - x_train.mean(axis=0)) ** 2, axis=(1, 2, 3))
    losses = runs["score_function"].history["loss"]
    others = [label for label in SAMPLED if label != "score_function"]
    modes = {label: per_image_errors(runs[label].model, x_test, latent="mode") for label in SAMPLED[:2]}
    rates = {label: code_rate(run.model, x_test) for label, run in runs.items()}
    most_sampled = max(rates[label].information_bits + 3 * rates[label].halves_bits for label in SAMPLED)
    quantised = rates["vector quantiser, 32 codes"]
    return {
        "every sampled code carries under a tenth of its nominal bits": all(
            rates[label].information_bits + 3 * rates[label].halves_bits < 0.1 * rates[label].nominal_bits
            for label in SAMPLED
        ),
        "the 32-code quantiser's bound is more than 3 times that of any sampled code": quantised.information_bits
        - 3 * quantised.halves_bits
        > 3 * most_sampled,
        "every estimator but the score function beats the mean image": all(
            clearly_better(errors[label], mean_image) for label in runs if label != "score_function"
        ),
        "the 32-code quantiser beats every sampled code": all(
            clearly_better(errors["vector quantiser, 32 codes"], errors[label]) for label in SAMPLED
        ),
        "the score function is the slowest sampled code": all(
            clearly_better(errors[label], errors["score_function"]) for label in others
        ),
        "the score function's training loss still falls in the last epoch": len(losses) > 1 and losses[-1] < losses[-2],
        "straight-through Gumbel-softmax beats the soft one": clearly_better(
            errors["gumbel_softmax_st"], errors["gumbel_softmax"]
        ),
        "the mode is worse than a sample (straight-through, soft Gumbel-softmax)": all(
            clearly_better(errors[label], modes[label]) for label in modes
        ),
        "figures": {label: round(float(e.mean()), 4) for label, e in {"mean image": mean_image, **errors}.items()}
        | {f"{label}, mode": round(float(e.mean()), 4) for label, e in modes.items()}
        | {f"{label}, bits carried": round(rate.information_bits, 1) for label, rate in rates.items()},
    }


def bit_claims(seed, n_train, n_test, epochs, batch_size=64):
    """{claim: held} for the 1,960-bit comparison of notebook 06, at ``seed``."""
    runs, x_train, x_test = train(("shared", "per example"), seed, n_train, n_test, epochs, batch_size)
    errors = {label: per_image_errors(run.model, x_test) for label, run in runs.items()}
    mean_image = np.mean((x_test - x_train.mean(axis=0)) ** 2, axis=(1, 2, 3))
    shared = runs["shared"].history["loss"]
    between, within = example_loss_spread(runs["shared"].model, x_test[:256], draws=4)
    return {
        "the shared baseline starts near a black image's error": shared[1] > 0.85 * float(np.mean(x_train**2)),
        "the shared baseline's training loss still falls in the last epoch": len(shared) > 1
        and shared[-1] < shared[-2],
        "the per-example baseline ends below 0.7 of the mean image's error": clearly_better(
            errors["per example"], 0.7 * mean_image
        ),
        "the per-example baseline beats the shared one": clearly_better(errors["per example"], errors["shared"]),
        "the loss varies more than 3 times as much between images as between draws": between > 3 * within,
        "figures": {label: round(float(e.mean()), 4) for label, e in errors.items()}
        | {"between / within": round(between / within, 1)},
    }


def quantiser_claims(seed, n_train, n_test, epochs, batch_size=64, with_plain=True):
    """{claim: held} for the quantisers at equal bits, at ``seed`` (against straight-through).

    ``with_plain=False`` leaves out the 10-code quantiser without restarts, and the two claims
    that compare with it.
    """
    names = ("10 codes, restarts", "straight_through", *(("10 codes",) if with_plain else ()))
    runs, _, x_test = train(names, seed, n_train, n_test, epochs, batch_size)
    restarted = runs["10 codes, restarts"]
    restarted_rate, sampled_rate = code_rate(restarted.model, x_test), code_rate(runs["straight_through"].model, x_test)
    claims = {
        "the restarted 10-code quantiser's bound is more than 5 times that of straight-through's code": (
            restarted_rate.information_bits - 3 * restarted_rate.halves_bits
            > 5 * (sampled_rate.information_bits + 3 * sampled_rate.halves_bits)
        ),
        "the restarted 10-code quantiser beats sampled straight-through": clearly_better(
            per_image_errors(restarted.model, x_test), per_image_errors(runs["straight_through"].model, x_test)
        ),
        "figures": {
            "perplexity with restarts": round(restarted.perplexity, 2),
            "bits carried with restarts": round(restarted_rate.information_bits, 1),
        },
    }
    if with_plain:
        plain = runs["10 codes"]
        claims["without restarts some of the 10 codes are dead"] = plain.codes_used < plain.n_codes
        claims["with restarts all 10 codes are used, at a higher perplexity"] = (
            restarted.codes_used == restarted.n_codes and restarted.perplexity > plain.perplexity
        )
        claims["figures"] = {"codes used without restarts": plain.codes_used, **claims["figures"]}
    return claims


def at_equal_passes(contenders, seed, n_train, n_test, epochs, batch_size):
    """{label: per-image test errors} of each ``{label: (contender's name, times)}``, trained ``times * epochs``.

    An estimator that decodes every image twice a step is given ``times=1`` against ``times=2``
    for one that decodes it once, so that both make as many decoder passes.
    """
    _, x_test = digits(seed, n_train, n_test)
    errors = {}
    for label, (name, times) in contenders.items():
        runs, _, _ = train([name], seed, n_train, n_test, times * epochs, batch_size)
        errors[label] = per_image_errors(runs[name].model, x_test)
    return errors


def equal_passes_claims(seed, n_train, n_test, epochs, batch_size=64):
    """{claim: held} for leave-one-out (2 draws) against the score function at equal decoder passes.

    Leave-one-out decodes every image twice a step; the score function with one moving-average
    baseline is trained for twice the epochs, so both make as many decoder passes. At classroom
    size (score function / leave-one-out): 0.0403 / 0.0407 (seed 0), 0.0409 / 0.0397 (1), 0.0515 / 0.0454 (2),
    0.0431 / 0.0401 (3).
    """
    errors = at_equal_passes(
        {
            "score_function": ("score_function", 2),
            "loo": ("score_function_loo", 1),
        },
        seed,
        n_train,
        n_test,
        epochs,
        batch_size,
    )
    # Not a claim: at seed 0 the two are within noise, at 1, 2 and 3 leave-one-out is clearly
    # better, and the notebook says so. Recorded, not checked.
    lead = clearly_better(errors["loo"], errors["score_function"])
    return {
        "figures": {f"{label} at equal decoder passes": round(float(e.mean()), 4) for label, e in errors.items()}
        | {"leave-one-out clearly better": lead},
    }


def annealing_claims(seed, n_train, n_test, epochs, batch_size=64, with_twin=True):
    """{claim: held} for the soft Gumbel-softmax annealed as Jang et al. do, against it and its twin at tau = 1.

    At classroom size (seeds 0 to 3) the annealed soft code's test MSE with a sampled code is 0.0355 / 0.0374 /
    0.0373 / 0.0335 against 0.0425 / 0.0475 / 0.0471 / 0.0413 at tau = 1; its most likely code is better at
    seeds 0, 1 and 3 and worse at seed 2 (0.0706 against 0.0586), so the notebook draws no conclusion on it.
    ``with_twin=False`` leaves out the straight-through twin at tau = 1, which only adds figures.
    """
    names = {"soft": "gumbel_softmax", "soft, annealed": "soft, annealed"}
    if with_twin:
        names["straight-through"] = "gumbel_softmax_st"
    runs, _, x_test = train(names.values(), seed, n_train, n_test, epochs, batch_size)
    runs = {label: runs[name] for label, name in names.items()}
    errors = {label: per_image_errors(run.model, x_test) for label, run in runs.items()}
    modes = {label: per_image_errors(runs[label].model, x_test, latent="mode") for label in ("soft", "soft, annealed")}
    annealed = errors["soft, annealed"]
    return {
        "the annealed soft Gumbel-softmax beats the soft one at tau = 1 (sampled code)": clearly_better(
            annealed, errors["soft"]
        ),
        "figures": {label: round(float(e.mean()), 4) for label, e in errors.items()}
        | {f"{label}, mode": round(float(e.mean()), 4) for label, e in modes.items()}
        | {
            "annealed mode clearly better": clearly_better(modes["soft, annealed"], modes["soft"]),
            "annealed mode clearly worse": clearly_better(modes["soft"], modes["soft, annealed"]),
            "temperature at the end": round(runs["soft, annealed"].model.get_layer("bottleneck").temperature, 3),
        }
        | twin_figures(errors),
    }


def twin_figures(errors):
    """Whether the annealed soft code is clearly ahead of, or behind, the straight-through one at tau = 1."""
    if "straight-through" not in errors:
        return {}
    annealed, twin = errors["soft, annealed"], errors["straight-through"]
    return {
        "annealed soft clearly better than straight-through at tau = 1": clearly_better(annealed, twin),
        "annealed soft clearly worse than straight-through at tau = 1": clearly_better(twin, annealed),
    }


def bit_equal_passes_claims(seed, n_train, n_test, epochs, batch_size=64):
    """{claim: held} for the 1,960-bit code: leave-one-out (2 draws) against one shared baseline, equal decoder passes.

    The shared (moving-average) baseline is trained for twice the epochs, so both make as many decoder passes.
    """
    errors = at_equal_passes(
        {"shared": ("shared", 2), "per example": ("per example", 1)},
        seed,
        n_train,
        n_test,
        epochs,
        batch_size,
    )
    return {
        "at equal decoder passes the per-example baseline beats the shared one": clearly_better(
            errors["per example"], errors["shared"]
        ),
        "figures": {f"{label} at equal decoder passes": round(float(e.mean()), 4) for label, e in errors.items()},
    }


def bit_quantiser_claims(seed, n_train, n_test, epochs, batch_size=64):
    """{claim: held} for the quantiser at the 1,960 nominal bits of the Bernoulli code: 1,024 codes, with restarts.

    Not trained in the notebook, which would take another run past its few minutes; against the
    per-example (leave-one-out) score function's 1,960-bit code, the best of the notebook's two.
    """
    runs, _, x_test = train(("1,024 codes, restarts", "per example"), seed, n_train, n_test, epochs, batch_size)
    quantised = runs["1,024 codes, restarts"]
    rates = {label: code_rate(run.model, x_test) for label, run in runs.items()}
    quantised_rate, sampled_rate = rates["1,024 codes, restarts"], rates["per example"]
    errors = {label: per_image_errors(run.model, x_test) for label, run in runs.items()}
    return {
        "both codes have 1,960 nominal bits": quantised_rate.nominal_bits == sampled_rate.nominal_bits == 1960,
        "the 1,024-code quantiser beats the per-example score function": clearly_better(
            errors["1,024 codes, restarts"], errors["per example"]
        ),
        "the 1,024-code quantiser's bound is more than 5 times that of the Bernoulli code": (
            quantised_rate.information_bits - 3 * quantised_rate.halves_bits
            > 5 * (sampled_rate.information_bits + 3 * sampled_rate.halves_bits)
        ),
        "its perplexity is under a quarter of the codes it uses": quantised.perplexity < quantised.codes_used / 4,
        "figures": {label: round(float(e.mean()), 4) for label, e in errors.items()}
        | {f"{label}, bits carried": round(rate.information_bits, 1) for label, rate in rates.items()}
        | {"codes used": quantised.codes_used, "perplexity": round(quantised.perplexity, 1)},
    }


MEASURES = (
    categorical_claims,
    bit_claims,
    quantiser_claims,
    equal_passes_claims,
    annealing_claims,
    bit_equal_passes_claims,
    bit_quantiser_claims,
)


def main(seeds=SEEDS, size=None, measures=MEASURES):
    """The claims at every seed, as a markdown section; a claim that failed at any seed is marked."""
    size = size or CLASSROOM
    rows, failed = [], []
    for seed in seeds:
        try:  # a seed's runs are shared among its comparisons only
            for measure in measures:
                claims = measure(seed, **size)
                figures = claims.pop("figures")
                rows.append(
                    f"| {seed} | {measure.__name__} | {'; '.join(k for k, v in claims.items() if not v) or '-'}"
                    f" | {figures} |"
                )
                failed += [f"{claim} (seed {seed})" for claim, held in claims.items() if not held]
        finally:
            forget()
    verdict = "Every claim held at every seed." if not failed else "Failed: " + "; ".join(failed)
    return (
        f"\n## Notebook 06's training conclusions across seeds\n\n{size}, seeds {list(seeds)}. {verdict}\n\n"
        "| seed | comparison | claims that failed | test MSE and figures |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )


if __name__ == "__main__":
    workbook.setup(seed=0)
    by_name = {measure.__name__: measure for measure in MEASURES}
    section = main(measures=[by_name[name] for name in sys.argv[1:]] or MEASURES)
    print(section)
    raise SystemExit(1 if "Failed:" in section else 0)
