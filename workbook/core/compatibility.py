"""The versions the workbook supports, the check every Setup cell runs, and Colab.

Introduced in 00_start_here.ipynb. The supported range is declared in
pyproject.toml and tested at both ends by ``make test``: the newest end is
requirements.txt (what ``make lab`` and Binder install), the oldest is
constraints-oldest.txt. Google Colab brings its own TensorFlow, Keras, NumPy,
matplotlib and ipywidgets; a notebook's Setup cell installs only the workbook
itself there (``pip install --no-deps``) and :func:`check_versions` says
plainly when a package is older than the workbook supports.
"""

import importlib.metadata
import platform
import re
import sys

#: The oldest version of each package the workbook supports: pyproject.toml's floors.
MINIMUM_VERSIONS = {
    "python": "3.10",
    "tensorflow": "2.18",
    "keras": "3.8",
    "numpy": "1.26",
    "matplotlib": "3.8",
    "ipywidgets": "7.7",
}

#: TensorFlow is published under several names; any one of them provides ``import tensorflow``.
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-macos",
    "tensorflow-intel",
    "tf-nightly",
    "tf-nightly-cpu",
)


class UnsupportedVersionError(RuntimeError):
    """A package is missing, or older than the workbook supports (see :func:`check_versions`)."""


def on_colab():
    """True in a Google Colab runtime (its ``google.colab`` package is loaded in every Colab kernel)."""
    return "google.colab" in sys.modules


def version_tuple(version):
    """``"2.18.1"`` -> ``(2, 18, 1)``; pre-release and local suffixes are ignored (``"2.19.0rc1"`` -> (2, 19, 0)).

    Not ``packaging.version``: Python's own version string can end in ``+`` (``"3.10.12+"``, as
    ``platform.python_version()`` gives it for some builds), which is no PEP 440 version, and this
    module must work before anything but the standard library is known to import.
    """
    numbers = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(version))
    if numbers is None:
        raise ValueError(f"version={version!r} is not a version number such as '2.18.1'.")
    return tuple(int(part) for part in numbers.group(1).split("."))


def installed_versions():
    """The version of Python and of each supported package, None where it is not installed.

    Introduced in 00_start_here.ipynb. Reads the installed packages' metadata,
    so nothing is imported (TensorFlow's start-up stays quiet).
    """
    found = {"python": platform.python_version()}
    for name in MINIMUM_VERSIONS:
        if name == "python":
            continue
        candidates = TENSORFLOW_DISTRIBUTIONS if name == "tensorflow" else (name,)
        found[name] = None
        for distribution in candidates:
            try:
                found[name] = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return found


def version_problems(found):
    """One sentence for each entry of `found` that is missing or below :data:`MINIMUM_VERSIONS`."""
    problems = []
    for name, minimum in MINIMUM_VERSIONS.items():
        version = found.get(name)
        label = "Python" if name == "python" else name
        if version is None:
            problems.append(f"{label} is not installed; the workbook needs {minimum} or newer.")
        elif version_tuple(version) < version_tuple(minimum):
            problems.append(f"{label} {version} is installed; the workbook needs {minimum} or newer.")
    return problems


def what_to_do(problems, colab):
    """How a student gets past `problems`, on Colab or on their own machine."""
    packages = " ".join(
        f'"{name}>={MINIMUM_VERSIONS[name]}"'
        for name in MINIMUM_VERSIONS
        if name != "python" and any(p.startswith(f"{name} ") for p in problems)
    )
    if any(p.startswith("Python ") for p in problems):
        return (
            "Use Python 3.10 to 3.13: on Colab, Runtime > Change runtime type; on your own computer, "
            "a newer Python, then `make lab` in the workbook's folder."
        )
    if colab:
        return (
            f"In a new cell run  %pip install -U {packages}  then Runtime > Restart session, "
            "and run this notebook again from the top."
        )
    return (
        f"Run `make lab` in the workbook's folder (it installs the tested versions into .venv), or "
        f"`pip install -U {packages}` in the environment of this kernel ({sys.executable}), "
        "then restart the kernel."
    )


def check_versions():
    """Check that this kernel has what the workbook supports; on Colab, turn on its widget support.

    Introduced in 00_start_here.ipynb; every notebook's Setup cell calls it
    before :func:`workbook.setup`. It checks minimums only (pyproject.toml
    declares the range; newer releases are welcome). On Colab with
    ipywidgets 8 it enables Colab's custom widget manager, which Colab needs
    to draw ipywidgets 8 widgets (its own ipywidgets 7.7 works without).

    Returns
    -------
    dict
        The versions found, as :func:`installed_versions` gives them.

    Raises
    ------
    UnsupportedVersionError
        When a package is missing or too old, with what to do about it.
    """
    found = installed_versions()
    problems = version_problems(found)
    if problems:
        raise UnsupportedVersionError(" ".join(problems) + " " + what_to_do(problems, on_colab()))
    if on_colab() and version_tuple(found["ipywidgets"]) >= (8,):
        from google.colab import output

        output.enable_custom_widget_manager()
    return found
