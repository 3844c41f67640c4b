"""Bits and memory per layer of a quantised model (what Larq's ``summary()`` counts).

Introduced in 07_quantisation_aware_training.ipynb. A kernel with a 1-bit quantiser is stored as
1 bit per weight once trained (its latent floats are only needed while training); everything else
(biases, batch normalisation, float layers) stays at its dtype's 32 bits. No drawing here.
"""

from dataclasses import dataclass

from workbook.core.arguments import refuse
from workbook.quantisation.quantizers import quantizer_bits

__all__ = ["LayerMemory", "MemorySummary", "memory_summary"]

FLOAT_BITS = 32


@dataclass(frozen=True)
class LayerMemory:
    """One layer's weights: how many are quantised, to how many bits, and the rest at 32 bits."""

    name: str
    quantised: int
    bits: int | None
    floats: int

    @property
    def stored_bits(self):
        return self.quantised * (self.bits or FLOAT_BITS) + self.floats * FLOAT_BITS

    @property
    def float_bits(self):
        return (self.quantised + self.floats) * FLOAT_BITS


@dataclass(frozen=True)
class MemorySummary:
    """Every layer's :class:`LayerMemory`, with totals and the float-to-quantised memory ratio."""

    layers: tuple

    @property
    def stored_bytes(self):
        return sum(layer.stored_bits for layer in self.layers) / 8

    @property
    def float_bytes(self):
        return sum(layer.float_bits for layer in self.layers) / 8

    @property
    def ratio(self):
        """Float-32 memory over quantised memory (Larq: "compression ratio of memory")."""
        return self.float_bytes / self.stored_bytes

    def __str__(self):
        lines = [f"{'layer':24s} {'quantised weights':>17s} {'bits':>4s} {'32-bit weights':>14s} {'memory':>11s}"]
        for layer in self.layers:
            bits = "32" if layer.bits is None else str(layer.bits)
            lines.append(
                f"{layer.name:24s} {layer.quantised:17,d} {bits:>4s} {layer.floats:14,d} "
                f"{layer.stored_bits / 8 / 1024:8.2f} KiB"
            )
        lines.append(
            f"total: {self.stored_bytes / 1024:.2f} KiB, as 32-bit floats {self.float_bytes / 1024:.2f} KiB: "
            f"{self.ratio:.1f} times smaller"
        )
        return "\n".join(lines)


def memory_summary(model):
    """Bits and memory of each layer of ``model`` that holds weights.

    Introduced in 07_quantisation_aware_training.ipynb. Returns a :class:`MemorySummary`
    (print it for the table). Counts weights the optimiser trains and the ones it does not
    (batch normalisation's moving statistics), each once.
    """
    layers = getattr(model, "layers", None)
    if layers is None:
        refuse("model", model, "a Keras model, e.g. keras.Sequential([...])", "memory_summary")
    rows = []
    for layer in layers:
        total = sum(int(weight.numpy().size) for weight in layer.weights)
        if not total:
            continue
        bits = quantizer_bits(getattr(layer, "kernel_quantizer", None))
        quantised = int(layer.kernel.numpy().size) if bits is not None else 0
        # the rest (bias, a learned step, batch normalisation's statistics) stays at 32 bits
        rows.append(LayerMemory(layer.name, quantised, bits, total - quantised))
    return MemorySummary(tuple(rows))
