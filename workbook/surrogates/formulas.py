"""The LaTeX of surrogates: filling a formula with the parameters, and the pieces entries share.

Introduced in 02_surrogate_zoo.ipynb, whose legends and ``display(Math(entry.formula))``
show them. Each catalog entry writes its own formula where it is registered
(:mod:`workbook.surrogates.catalogue`); this module is text only and imports nothing, so
that the maths reads formulas without loading any plotting or widget library.
"""

__all__ = ["SIGN", "STEP", "FLOOR", "times", "function_formula", "render"]


def render(template, params):
    """A formula with ``params`` filled in: ``template(params)`` if it is a function, else ``template``."""
    return template(params) if callable(template) else template


def function_formula(name, prime=""):
    r"""``$\mathrm{name}(x)$`` (or ``name'(x)`` with ``prime="'"``) for a surrogate without its own formula."""
    return rf"$\mathrm{{{_latex_name(name)}}}{prime}(x)$"


def _latex_name(name):
    return name.replace("\\", "").replace("_", r"\_").replace("{", "").replace("}", "").replace("$", "")


def times(value):
    """A coefficient for LaTeX: '' for 1, else the number."""
    return "" if value == 1 else f"{value:g}"


# The forwards several entries share.
SIGN = r"$\mathrm{sign}(x)$"
STEP = r"$H(x) = [x > 0]$"
FLOOR = r"$\lfloor x \rfloor$"
