"""A leaky integrate-and-fire neuron unrolled in time, for backpropagation through time.

Introduced in 02_surrogate_zoo.ipynb ("Surrogate gradients through time"), after the
snnTorch tutorials 5 and 6. At every step the membrane leaks, integrates its weighted
input and is reset by subtraction when the neuron fired at the step before; it fires when
the membrane is above the threshold:

    u_t = beta * u_{t-1} + x_t @ w - threshold * s_{t-1}
    s_t = H(u_t - threshold)

The step ``H`` is whatever surrogate is given (e.g. ``SURROGATES["step_atan"]``), so the
forward pass always spikes 0 or 1 and the backward pass uses the surrogate's derivative.
``keras.ops`` throughout, so the whole unrolled run is differentiated by a GradientTape.
"""

from keras import ops

from workbook.core.arguments import check_callable, check_flag, is_number, refuse

__all__ = ["lif_run", "lif_steps"]


def lif_run(inputs, weights, surrogate, beta=0.9, threshold=1.0, detach_reset=True):
    """Run leaky integrate-and-fire neurons over time; return their spikes and membranes.

    Introduced in 02_surrogate_zoo.ipynb.

    Parameters
    ----------
    inputs : array or tensor, shape (steps, n_inputs)
        The input at each time step (e.g. input spikes, 0 or 1).
    weights : array, tensor or variable, shape (n_inputs, n_neurons)
        Input weights; a ``keras.Variable`` under a GradientTape gets its gradient through time.
    surrogate : callable
        The spike function of ``u - threshold``: ``SURROGATES["step_atan"]``, or the plain
        Heaviside step ``SURROGATES["step_atan"].forward`` (its true derivative, zero or None).
    beta : float
        How much of the membrane is kept from one step to the next, in (0, 1].
    threshold : float
        The membrane value above which the neuron spikes, greater than 0. A spike subtracts it.
    detach_reset : bool
        True (snnTorch's default): the reset ``threshold * s_{t-1}`` is taken through
        ``keras.ops.stop_gradient``, so backprop does not go through the reset. False: it does.

    Returns
    -------
    spikes, membranes : tensors, shape (steps, n_neurons)
    """
    owner = "lif_run"
    check_callable("surrogate", surrogate, "a spike function of the membrane, e.g. SURROGATES['step_atan']", owner)
    if not is_number(beta, 0, 1, include_low=False):
        refuse("beta", beta, "a number in (0, 1]: the share of the membrane kept from one step to the next", owner)
    if not is_number(threshold, 0, include_low=False):
        refuse("threshold", threshold, "a number greater than 0, e.g. 1.0", owner)
    check_flag("detach_reset", detach_reset, owner)
    if len(getattr(inputs, "shape", ())) != 2:
        refuse("inputs", inputs, "shaped (steps, n_inputs): one row of inputs per time step", owner)
    if len(getattr(weights, "shape", ())) != 2 or weights.shape[0] != inputs.shape[1]:
        refuse("weights", weights, f"shaped (n_inputs, n_neurons) with n_inputs = {inputs.shape[1]}", owner)
    currents = ops.matmul(ops.cast(inputs, weights.dtype), weights)  # x_t @ w for every step at once
    return lif_steps(currents, surrogate, beta, threshold, detach_reset)


def lif_steps(currents, surrogate, beta=0.9, threshold=1.0, detach_reset=True, recurrent_weights=None):
    """The recursion itself, on input currents already weighted: time on the first axis.

    Introduced in 02_surrogate_zoo.ipynb (through :func:`lif_run`); the spiking layer of
    08_spiking_networks.ipynb runs it on a batch, ``currents`` shaped (steps, batch, neurons).
    With ``recurrent_weights`` (neurons, neurons) the spikes of step t-1 add ``s_{t-1} @ v``
    to the current of step t. The arguments are checked by the callers.
    """
    membrane = spike = ops.zeros_like(currents[0])
    spikes, membranes = [], []
    for t in range(int(currents.shape[0])):  # a Python loop: unrolled, in a tf.function too
        current = currents[t]
        if recurrent_weights is not None:
            current = current + ops.matmul(spike, recurrent_weights)
        reset = ops.stop_gradient(spike) if detach_reset else spike
        membrane = beta * membrane + current - threshold * reset
        spike = surrogate(membrane - threshold)
        spikes.append(spike)
        membranes.append(membrane)
    return ops.stack(spikes), ops.stack(membranes)
