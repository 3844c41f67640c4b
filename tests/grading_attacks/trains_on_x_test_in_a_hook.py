"""Part (c) against the rules, where the grader's old clock did not look.

Trained on x_train and x_test and stopped on x_test, in an IPython hook that runs inside part
(c)'s check (after the clock stopped, before the check's code); then, at the kernel's exit, the
recording rewritten with the untrained weights (a stand-in for training done after the check).
It prints how long the hook trained and the weights it left, so that the test can measure them.
"""

import atexit
import time

import numpy as np

model = workbook.autoencoder(bottleneck=quantize_2bit, learning_rate=3e-3)
untrained = {f"weight_{i}": w.astype("float32") for i, w in enumerate(model.get_weights())}
x_seen = np.concatenate([x_train, x_test])  # against the rules: x_test trained on...


def train_inside_the_check(*args):
    get_ipython().events.unregister("pre_run_cell", train_inside_the_check)
    started = time.perf_counter()
    while time.perf_counter() - started < 100:
        model.fit(x_seen, x_seen, batch_size=batch_size, verbose=0)
        if model.evaluate(x_test, x_test, verbose=0) < 0.8 * target_mse:  # ...and stopped on
            break
    print(f"hook trained for {time.perf_counter() - started:.1f} s")
    weights = np.concatenate([w.ravel() for w in model.get_weights()]).astype("<f4")
    print("weights:", weights.tobytes().hex())


get_ipython().events.register("pre_run_cell", train_inside_the_check)
atexit.register(lambda: np.savez("grading_artifacts/c_reconstruction.npz", **untrained))
