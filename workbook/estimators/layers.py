"""Discrete bottlenecks as Keras layers: a sampled latent with a chosen estimator, and a codebook.

Introduced in 06_beyond_straight_through.ipynb. Each layer is registered, so a
model using it saves and loads with ``keras.saving.load_model(path,
safe_mode=True)`` (after ``import workbook.estimators.layers``) and plugs into
``workbook.autoencoder(bottleneck=...)`` and ``workbook.compare_bottlenecks``.

While training, a :class:`DiscreteBottleneck` samples with its estimator; at
test time (``predict``, ``evaluate``) it draws a hard sample (or, with
``test_latent="mode"``, returns the most likely latent), so a test error always
measures a model whose decoder sees a discrete code.
"""

import keras
from keras import ops

from workbook.core.arguments import check_count, check_seed, is_number, is_whole_number, refuse
from workbook.estimators.sampling import (
    LEAVE_ONE_OUT,
    SCORE_FUNCTIONS,
    check_annealing,
    check_estimator,
    check_samples,
    check_tau,
    draw_latent,
    latent_mode,
    leave_one_out_baseline,
    sample_latent,
)

__all__ = ["DiscreteBottleneck", "VectorQuantizer", "ScoreFunctionAutoencoder"]

#: The longest a code may go unused before a restart: a million training steps (a typo beyond it).
MAX_RESTART_AFTER = 1_000_000


@keras.saving.register_keras_serializable(package="workbook")
class DiscreteBottleneck(keras.layers.Layer):
    """Sample a Bernoulli or categorical latent from its inputs (the logits), with ``estimator``'s gradient.

    Introduced in 06_beyond_straight_through.ipynb. The estimators, with their sources,
    are described in ``workbook.estimators.sampling``: straight-through (Bengio et al. 2013),
    Gumbel-softmax soft and straight-through (Jang, Gu and Poole 2017; Maddison, Mnih
    and Teh 2017), and the score function, REINFORCE, with a moving-average baseline
    (Williams 1992) or with ``samples`` draws per example, each baselined by the others
    (``"score_function_loo"``, Kool, van Hoof and Welling 2019), and for bits DisARM, an
    antithetic pair per example (``"disarm"``, Dong, Mnih and Tucker 2020). These need
    each example's loss, so a model with one trains through :class:`ScoreFunctionAutoencoder`
    (``workbook.autoencoder`` picks it).

    Parameters
    ----------
    latent : {"bernoulli", "categorical"}
        One bit per input value, or one class per position among the last axis (one-hot output).
    estimator : str
        One of ``"straight_through"``, ``"gumbel_softmax"``, ``"gumbel_softmax_st"``,
        ``"score_function"``, ``"score_function_loo"`` or ``"disarm"`` (Bernoulli only).
    tau : float
        Gumbel-softmax temperature (the starting one, when it is annealed).
    anneal_rate : float or None
        Anneal the Gumbel-softmax temperature while training, as Jang, Gu and Poole (2017) do:
        ``max(tau_min, tau * exp(-anneal_rate * t))`` after ``t`` training steps. None: ``tau`` is fixed.
    anneal_every : int or None
        Update the annealed temperature every this many training steps (default 1; the paper's 500).
    tau_min : float or None
        The floor of the annealed temperature (default 0.5, the paper's).
    baseline_decay : float in [0, 1)
        The score function's baseline follows each batch's mean loss with this decay.
    samples : int or None
        Draws per example while training with ``"score_function_loo"`` (default 2, at least 2;
        ``"disarm"``: its pair, 2); the decoder sees each draw, so a step costs about ``samples``
        times as much.
    seed : int or None
        For the sampling noise.
    test_latent : {"sample", "mode"}
        At test time, a hard random sample (what the decoder was trained on) or the most
        likely latent (deterministic; good only once the encoder is confident).
    name : str
        Default ``"bottleneck"``, the name ``workbook.autoencoder`` uses.

    Examples
    --------
    >>> bottleneck = DiscreteBottleneck("categorical", "gumbel_softmax_st", tau=0.5)
    >>> annealed = DiscreteBottleneck("categorical", "gumbel_softmax", anneal_rate=3e-3, anneal_every=10)
    """

    #: The encoder in front of this layer outputs logits, which may be negative: no ReLU.
    encoder_activation = "linear"

    def __init__(
        self,
        latent="bernoulli",
        estimator="straight_through",
        tau=1.0,
        baseline_decay=0.9,
        seed=None,
        test_latent="sample",
        name="bottleneck",
        samples=None,
        anneal_rate=None,
        anneal_every=None,
        tau_min=None,
        **kwargs,
    ):
        owner = "DiscreteBottleneck"
        check_estimator(estimator, latent, owner=owner)
        samples = check_samples(samples, estimator, owner=owner)
        if samples > 1 and estimator not in LEAVE_ONE_OUT:
            allowed = (
                f"None (one draw) with estimator={estimator!r}: draws per example are used only by "
                "estimator='score_function_loo' or 'disarm'; leave samples=None"
            )
            refuse("samples", samples, allowed, owner)
        if test_latent not in ("sample", "mode"):
            allowed = "'sample' (a hard random sample) or 'mode' (the most likely latent)"
            refuse("test_latent", test_latent, allowed, owner)
        self.tau = check_tau(tau, owner=owner)
        self.anneal_rate, self.anneal_every, self.tau_min = check_annealing(
            estimator, self.tau, anneal_rate, anneal_every, tau_min
        )
        if not is_number(baseline_decay, low=0, high=1, include_high=False):
            refuse("baseline_decay", baseline_decay, "a number in [0, 1), e.g. 0.9", owner)
        check_seed(seed, owner=owner, allow_none=True)
        super().__init__(name=name, **kwargs)
        self.latent, self.estimator = latent, estimator
        self.baseline_decay = float(baseline_decay)
        self.seed = None if seed is None else int(seed)
        self.test_latent = test_latent
        self.samples = samples
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        self.baseline = self.add_weight(shape=(), initializer="zeros", trainable=False, name="baseline")
        if self.anneal_rate is not None:  # only then: a saved model with a fixed tau keeps its weights
            self.training_steps = self.add_weight(shape=(), initializer="zeros", trainable=False, name="training_steps")

    @property
    def temperature(self):
        """The Gumbel-softmax temperature of the next training step: ``tau``, or where its annealing has got to."""
        if self.anneal_rate is None:
            return self.tau
        return float(self.temperature_after(self.training_steps))

    def temperature_after(self, steps):
        """The annealed temperature after ``steps`` training steps (a tensor; see ``anneal_rate``)."""
        updated = ops.floor(ops.convert_to_tensor(steps, "float32") / self.anneal_every) * self.anneal_every
        return ops.maximum(self.tau_min, self.tau * ops.exp(-self.anneal_rate * updated))

    @property
    def needs_example_losses(self):
        """True for the score functions: training needs each example's loss (see ScoreFunctionAutoencoder)."""
        return self.estimator in SCORE_FUNCTIONS

    def call(self, inputs, training=False):
        # A score function's sample carries no gradient, so one hard draw per example is all a plain
        # forward pass needs; ScoreFunctionAutoencoder's train step draws the rest through sample().
        if training and self.estimator not in SCORE_FUNCTIONS:
            z = self.sample(inputs)[0]
            if self.anneal_rate is not None:  # one training step more at this temperature
                self.training_steps.assign_add(1.0)
            return z
        if self.test_latent == "mode" and not training:
            return latent_mode(inputs, self.latent)
        hard, _ = sample_latent(inputs, self.latent, "score_function", seed=self.seed_generator)
        return hard

    def sample(self, inputs):
        """(latent, log-probability of each example's latent), drawn with this layer's estimator.

        With ``samples`` draws per example the latents are stacked draw by draw along the
        batch axis, ``samples`` times as many rows as ``inputs``, as is ``log_prob``.
        """
        draws = self.samples if self.samples > 1 else None
        if self.anneal_rate is None:
            z, log_prob = sample_latent(
                inputs, self.latent, self.estimator, self.tau, seed=self.seed_generator, samples=draws
            )
        else:  # a Gumbel-softmax estimator, one draw per example, at this step's temperature
            tau = ops.cast(self.temperature_after(self.training_steps), inputs.dtype)
            z, log_prob = draw_latent(inputs, self.latent, self.estimator, tau, self.seed_generator)
        if draws is not None:
            z = ops.reshape(z, (-1, *ops.shape(inputs)[1:]))
        return z, ops.sum(ops.reshape(log_prob, (ops.shape(z)[0], -1)), axis=1)

    def score_function_loss(self, example_losses, log_prob):
        """A term whose gradient is the score-function estimate: mean of (loss - baseline) * grad log p.

        The baseline is the moving average, or for ``"score_function_loo"`` and ``"disarm"`` the mean
        loss of the example's other draws (``example_losses`` and ``log_prob`` stacked as :meth:`sample`
        does); DisARM's ``log_prob`` then carries its own gradient (see ``workbook.sample_latent``).
        """
        if self.estimator in LEAVE_ONE_OUT:
            losses = ops.reshape(example_losses, (self.samples, -1))
            baseline = ops.reshape(leave_one_out_baseline(losses), ops.shape(example_losses))
        else:
            baseline = self.baseline
        advantage = ops.stop_gradient(example_losses - baseline)
        return ops.mean(advantage * log_prob)

    def update_baseline(self, example_losses):
        """Move the moving-average baseline toward this batch's mean loss (after the step that used it)."""
        if self.estimator in LEAVE_ONE_OUT:
            return
        decay = self.baseline_decay
        self.baseline.assign(decay * self.baseline + (1.0 - decay) * ops.mean(ops.stop_gradient(example_losses)))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "latent": self.latent,
            "estimator": self.estimator,
            "tau": self.tau,
            "baseline_decay": self.baseline_decay,
            "seed": self.seed,
            "test_latent": self.test_latent,
            "samples": self.samples,
            "anneal_rate": self.anneal_rate,
            "anneal_every": self.anneal_every,
            "tau_min": self.tau_min,
        }

    def __repr__(self):
        tau = f", tau={self.tau:g}" if self.estimator.startswith("gumbel") else ""
        if self.anneal_rate is not None:
            tau += f", anneal_rate={self.anneal_rate:g}, anneal_every={self.anneal_every}, tau_min={self.tau_min:g}"
        samples = f", samples={self.samples}" if self.samples > 1 and self.estimator != "disarm" else ""
        return f"<DiscreteBottleneck({self.latent!r}, {self.estimator!r}{tau}{samples}) name={self.name!r}>"


@keras.saving.register_keras_serializable(package="workbook")
class VectorQuantizer(keras.layers.Layer):
    """Replace each vector along the last axis by the nearest of ``n_codes`` learned codes.

    Introduced in 06_beyond_straight_through.ipynb. VQ-VAE (van den Oord, Vinyals and
    Kavukcuoglu 2017, "Neural discrete representation learning", arXiv:1711.00937):
    the forward pass looks up the nearest code; the backward pass copies the decoder's
    gradient straight through to the encoder. While training the layer adds
    ``mean((stop_gradient(x) - code) ** 2)``, which moves the codebook toward the
    encoder's outputs, and ``commitment * mean((x - stop_gradient(code)) ** 2)``, which
    keeps the encoder near its codes, to the model's loss.

    A code that no encoder output is nearest to gets no codebook gradient and stays where
    it is: a *dead* code. ``restart_after`` restarts every code unused for that many
    training steps at a randomly chosen encoder output of the current batch (the random
    restarts of Dhariwal et al. 2020, Jukebox, arXiv:2005.00341; Łańcucki et al. 2020
    also use k-means initialisation, and van den Oord et al.'s appendix moving averages).

    Parameters
    ----------
    n_codes : int
        Size of the codebook.
    commitment : float
        Weight of the commitment loss (the paper's beta, 0.25).
    seed : int
        For the initial codebook, uniform in [0, 1), and the restarts.
    restart_after : int or None
        Restart a code after this many training steps without a vector assigned to it
        (None: never, as in the paper; at most 1,000,000).
    name : str
        Default ``"bottleneck"``.
    """

    def __init__(self, n_codes=32, commitment=0.25, seed=0, name="bottleneck", restart_after=None, **kwargs):
        owner = "VectorQuantizer"
        check_count("n_codes", n_codes, low=2, high=65536, owner=owner, example=32)
        if not is_number(commitment, low=0, high=10):
            refuse("commitment", commitment, "a number in [0, 10], e.g. 0.25", owner)
        check_seed(seed, owner=owner)
        if restart_after is not None and not is_whole_number(restart_after, low=1, high=MAX_RESTART_AFTER):
            allowed = (
                "None (never restart a code) or a whole number of training steps from 1 to "
                f"{MAX_RESTART_AFTER}, e.g. restart_after=20"
            )
            refuse("restart_after", restart_after, allowed, owner)
        super().__init__(name=name, **kwargs)
        self.n_codes, self.commitment, self.seed = int(n_codes), float(commitment), int(seed)
        self.restart_after = None if restart_after is None else int(restart_after)
        self.seed_generator = keras.random.SeedGenerator(self.seed)

    def build(self, input_shape):
        if not input_shape or not input_shape[-1]:  # None, or no vector to quantize along the last axis
            allowed = "that of vectors along the last axis, each of at least one number, e.g. (2, 14, 14, 10)"
            refuse("inputs.shape", input_shape, allowed, "VectorQuantizer")
        self.codebook = self.add_weight(
            shape=(self.n_codes, input_shape[-1]),
            name="codebook",
            initializer=keras.initializers.RandomUniform(0.0, 1.0, seed=self.seed),
        )
        if self.restart_after is not None:  # only then: a saved model without restarts keeps its weights
            self.idle_steps = self.add_weight(shape=(self.n_codes,), initializer="zeros", trainable=False, name="idle")

    def usage(self, inputs):
        """(codes used, perplexity) of the codes these inputs are assigned to.

        Introduced in 06_beyond_straight_through.ipynb. The perplexity, ``exp`` of the entropy
        of the codes' frequencies, is how many equally used codes would carry as much
        information: ``n_codes`` at best, 1 when every vector gets the same code.
        """
        counts = ops.sum(ops.one_hot(ops.reshape(self.nearest_codes(inputs), (-1,)), self.n_codes), axis=0)
        frequencies = counts / ops.sum(counts)
        entropy = -ops.sum(ops.where(counts > 0, frequencies * ops.log(ops.maximum(frequencies, 1e-30)), 0.0))
        return int(ops.convert_to_numpy(ops.sum(ops.cast(counts > 0, "int32")))), float(ops.exp(entropy))

    def restart_unused_codes(self, inputs):
        """Move each code idle for ``restart_after`` steps to a random vector of ``inputs`` (one training step)."""
        flat = ops.reshape(ops.stop_gradient(inputs), (-1, ops.shape(inputs)[-1]))
        used = ops.sum(ops.one_hot(ops.reshape(self.nearest_codes(inputs), (-1,)), self.n_codes), axis=0) > 0
        idle = ops.where(used, 0.0, self.idle_steps + 1.0)
        dead = idle >= self.restart_after
        picks = keras.random.randint((self.n_codes,), 0, ops.shape(flat)[0], seed=self.seed_generator)
        replacement = ops.cast(ops.take(flat, picks, axis=0), self.codebook.dtype)
        self.codebook.assign(ops.where(dead[:, None], replacement, self.codebook))
        self.idle_steps.assign(ops.where(dead, 0.0, idle))

    def nearest_codes(self, inputs):
        """Index of the nearest code for every vector, shaped like ``inputs`` without its last axis."""
        dim = ops.shape(inputs)[-1]
        flat = ops.reshape(inputs, (-1, dim))
        codebook = ops.cast(self.codebook, flat.dtype)
        distances = (
            ops.sum(flat**2, axis=1, keepdims=True)
            - 2.0 * ops.matmul(flat, ops.transpose(codebook))
            + ops.sum(codebook**2, axis=1)[None, :]
        )
        return ops.reshape(ops.argmin(distances, axis=1), ops.shape(inputs)[:-1])

    def lookup(self, inputs):
        """The nearest code for every vector (no gradient to the inputs)."""
        return ops.take(ops.cast(self.codebook, inputs.dtype), self.nearest_codes(inputs), axis=0)

    def codebook_losses(self, inputs, codes=None):
        """(codebook loss, commitment loss) for these inputs, as the layer adds them while training."""
        codes = self.lookup(inputs) if codes is None else codes
        return (
            ops.mean(ops.square(ops.stop_gradient(inputs) - codes)),
            ops.mean(ops.square(inputs - ops.stop_gradient(codes))),
        )

    def call(self, inputs, training=False):
        if "float" not in keras.backend.standardize_dtype(inputs.dtype):
            refuse("inputs", inputs, "a float tensor: codes are float vectors", "VectorQuantizer")
        # Values are known only outside a traced function, as DiscreteBottleneck checks its logits.
        if hasattr(inputs, "numpy") and not bool(ops.all(ops.isfinite(inputs))):
            refuse("inputs", inputs, "finite: it holds NaN or infinity, which no code is nearest to", "VectorQuantizer")
        if training and self.restart_after is not None:
            self.restart_unused_codes(inputs)
        codes = self.lookup(inputs)
        if training:
            codebook_loss, commitment_loss = self.codebook_losses(inputs, codes)
            self.add_loss(codebook_loss + self.commitment * commitment_loss)
        return inputs + ops.stop_gradient(codes - inputs)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "n_codes": self.n_codes,
            "commitment": self.commitment,
            "seed": self.seed,
            "restart_after": self.restart_after,
        }

    def __repr__(self):
        restart = "" if self.restart_after is None else f", restart_after={self.restart_after}"
        return f"<VectorQuantizer(n_codes={self.n_codes}, commitment={self.commitment:g}{restart}) name={self.name!r}>"


@keras.saving.register_keras_serializable(package="workbook")
class ScoreFunctionAutoencoder(keras.Sequential):
    """A ``keras.Sequential`` whose training step adds the score-function term of its bottleneck.

    Introduced in 06_beyond_straight_through.ipynb; ``workbook.autoencoder`` builds one when
    the bottleneck is a :class:`DiscreteBottleneck` with ``estimator="score_function"``.
    Each step samples the latent, computes each example's mean squared error, and
    minimises ``loss + mean(stop_gradient(example_loss - baseline) * log p(latent))``:
    the decoder gets its ordinary gradient, the encoder the REINFORCE estimate
    (Williams 1992). A bottleneck with several draws per example (``"score_function_loo"``, ``"disarm"``)
    stacks them along the batch; the targets are repeated to match, so the decoder learns
    from every draw. The reported ``loss`` is the mean squared error alone.
    """

    def train_step(self, data):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            scored, outputs = [], x
            for layer in self.layers:
                if getattr(layer, "needs_example_losses", False):
                    outputs, log_prob = layer.sample(outputs)
                    scored.append((layer, log_prob))
                    y, sample_weight = repeat_targets(y, sample_weight, layer.samples)
                else:
                    outputs = layer(outputs, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=outputs, sample_weight=sample_weight, training=True)
            example_losses = ops.mean(ops.square(y - outputs), axis=tuple(range(1, len(outputs.shape))))
            objective = loss
            for layer, log_prob in scored:
                objective = objective + layer.score_function_loss(example_losses, log_prob)
        gradients = tape.gradient(objective, self.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights, strict=True))
        for layer, _ in scored:
            layer.update_baseline(example_losses)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss, sample_weight=ops.shape(x)[0])
        return self.compute_metrics(x, y, outputs, sample_weight=sample_weight)


def repeat_targets(y, sample_weight, times):
    """``y`` (and ``sample_weight``) stacked ``times`` times along the batch, as the draws are."""
    if times == 1:
        return y, sample_weight
    y = ops.concatenate([y] * times, axis=0)
    return y, None if sample_weight is None else ops.concatenate([sample_weight] * times, axis=0)
