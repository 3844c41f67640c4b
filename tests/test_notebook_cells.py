"""A finding in a notebook cell is named as IPython names the cell: ``cell In[7], line 3``.

This rests on IPython's compiler (``format_code_name``, IPython 8 and later): these tests
use the real one, as the Jupyter kernel (ipykernel) sets it up, so a change to it fails
here rather than in a student's notebook.
"""

import types

import IPython
import numpy as np
from ipykernel.compiler import XCachingCompiler

import workbook
from workbook.core.notebook_cells import cell_label

CELL = """import tensorflow as tf

def rounded(x):
    return tf.round(x) * 2.0
"""


def shell_with_cell(number):
    """A stand-in for the kernel's IPython shell, whose compiler has compiled CELL as cell ``number``."""
    compiler = XCachingCompiler()
    filename = compiler.cache(CELL, number=number)
    return types.SimpleNamespace(compile=compiler), filename


def test_a_cell_file_gets_its_execution_count():
    shell, filename = shell_with_cell(7)
    assert cell_label(filename, shell) == "In[7]"
    assert cell_label(__file__, shell) is None


def test_outside_ipython_there_is_no_cell(monkeypatch):
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    _, filename = shell_with_cell(7)
    assert cell_label(filename) is None


def test_a_finding_in_a_cell_says_which_cell_and_line(monkeypatch):
    shell, filename = shell_with_cell(12)
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    namespace = {}
    exec(compile(CELL, filename, "exec"), namespace)
    report = workbook.find_gradient_breaks(namespace["rounded"], np.ones((2, 3), dtype="float32"))
    assert report.culprit.op_type == "Round" and report.culprit.where == "cell In[12], line 4", str(report)
