"""Which notebook cell a piece of code came from, named as IPython's tracebacks name it.

Introduced in 03_finding_gradient_killers.ipynb, where a finding points at
``cell In[7], line 3`` instead of a temporary file name. IPython compiles each cell to a
file of its own; its compiler's ``format_code_name`` (IPython 8 and later) turns that
file name back into the cell's label.
"""

__all__ = ["cell_label"]


def cell_label(filename, shell=None):
    """``'In[7]'`` for the cell compiled to ``filename``, or None (not a cell, or not in IPython).

    ``shell`` is the running IPython shell (``get_ipython()`` when left out).
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return None
        shell = get_ipython()
    format_code_name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if format_code_name is None:
        return None
    named = format_code_name(filename)
    return named[1] if named else None
