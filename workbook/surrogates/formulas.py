"""The LaTeX of every surrogate: the catalog's published formulas, filled in with the parameters.

Introduced in 02_surrogate_zoo.ipynb, whose legends and ``display(Math(entry.formula))``
show them. This module is text only and imports nothing: ``entry.formula`` is part of
every catalog entry, so the maths in :mod:`workbook.surrogates.catalogue` reads its formulas from here
without loading any plotting or widget library.
"""

__all__ = ["CATALOG_FORMULAS", "function_formula", "render"]


def render(template, params):
    """A formula with ``params`` filled in: ``template(params)`` if it is a function, else ``template``."""
    return template(params) if callable(template) else template


def function_formula(name, prime=""):
    r"""``$\mathrm{name}(x)$`` (or ``name'(x)`` with ``prime="'"``) for a surrogate without its own formula."""
    return rf"$\mathrm{{{_latex_name(name)}}}{prime}(x)$"


def _latex_name(name):
    return name.replace("\\", "").replace("_", r"\_").replace("{", "").replace("}", "").replace("$", "")


def _times(value):
    """A coefficient for LaTeX: '' for 1, else the number."""
    return "" if value == 1 else f"{value:g}"


_SIGN = r"$\mathrm{sign}(x)$"
_STEP = r"$H(x) = [x > 0]$"
_FLOOR = r"$\lfloor x \rfloor$"

# catalog key -> (derivative, forward): a string, or a function of the parameters
CATALOG_FORMULAS = {
    "sign_ste": ("$1$", _SIGN),
    "sign_clipped_ste": (lambda p: rf"$[\,|x| \leq {p['clip']:g}\,]$", _SIGN),
    "sign_approx": (r"$(2 - 2|x|)\,[\,|x| \leq 1\,]$", _SIGN),
    "sign_swish": (
        lambda p: (
            rf"$\dfrac{{{p['beta']:g}\,(2 - {p['beta']:g}x\,\tanh({p['beta']:g}x/2))}}"
            rf"{{1 + \cosh({p['beta']:g}x)}}$"
        ),
        _SIGN,
    ),
    "step_fast_sigmoid": (lambda p: rf"$\dfrac{{1}}{{(1 + {p['slope']:g}|x|)^2}}$", _STEP),
    "step_sigmoid": (lambda p: rf"${p['slope']:g}\,\sigma({p['slope']:g}x)\,(1 - \sigma({p['slope']:g}x))$", _STEP),
    "step_atan": (lambda p: rf"$\dfrac{{{p['alpha'] / 2:g}}}{{1 + ({_times(p['alpha'] / 2)}\pi x)^2}}$", _STEP),
    "round_ste": ("$1$", r"$\mathrm{round}(x)$"),
    "floor_ste": ("$1$", _FLOOR),
    "floor_smooth": (
        lambda p: (
            rf"$\dfrac{{d}}{{dx}}\,a^{{{p['depth']}}}(x),\ "
            r"a(x) = x + \dfrac{\sin 2\pi x}{2\pi}$"
        ),
        _FLOOR,
    ),
    "sigmoid_identity": ("$1$", r"$\sigma(x)$"),
    "cast_int_ste": (
        "$1$",
        lambda p: r"$\mathrm{int}(x)$" if p["scale"] == 1 else rf"$\mathrm{{trunc}}({p['scale']:g}x)/{p['scale']:g}$",
    ),
}
