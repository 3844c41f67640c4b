"""What the missing-gradients extension costs on batches where the gradient flows.

Target: nothing, within the noise (at most 1.05x). The same fit runs as a notebook cell
(IPython's run_cell) with the extension loaded and without it, interleaved.
"""

import keras
import numpy as np
from ab import interleaved, ratio_cell
from IPython.core.interactiveshell import InteractiveShell

EXTENSION = "workbook.finder.missing_gradients"
CELL = "model.fit(x, y, batch_size=32, epochs=1, verbose=0)"


def main(pairs=5, rows=4096):
    shell = InteractiveShell.instance()
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    shell.user_ns.update(
        model=model, x=rng.normal(size=(rows, 32)).astype("float32"), y=rng.normal(size=(rows, 1)).astype("float32")
    )

    def plain():
        assert shell.run_cell(CELL).success

    def with_extension():
        shell.run_line_magic("load_ext", EXTENSION)
        try:
            assert shell.run_cell(CELL).success
        finally:
            shell.run_line_magic("unload_ext", EXTENSION)

    results = interleaved(plain, {"extension": with_extension, "plain again (A/A)": plain}, pairs=pairs)
    rows_md = [
        f"| {name} | {ratio_cell(results[name]['cpu'])} | {ratio_cell(results[name]['wall'])} |"
        for name in ("extension", "plain again (A/A)")
    ]
    return (
        "## The missing-gradients extension\n\n"
        f"`fit` of {rows // 32} batches run as a notebook cell, with `%load_ext {EXTENSION}` (loaded and unloaded "
        f"inside the timed call) against without; {pairs} interleaved rounds. Target at most 1.05x.\n\n"
        "| variant | CPU time ratio, median (min–max) | wall time ratio |\n|---|---|---|\n" + "\n".join(rows_md) + "\n"
    )


if __name__ == "__main__":
    print(main())
