"""The supported range: one set of floors everywhere, a Setup-cell check that says what to do, Colab's widgets.

`make test` runs this file at both ends of the range (.venv and .venv-oldest).
"""

import importlib.metadata
import pathlib
import platform
import re
import sys
import types

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import workbook
from workbook.core import compatibility

ROOT = pathlib.Path(__file__).resolve().parent.parent
PYPROJECT = (ROOT / "pyproject.toml").read_text()


def declared_dependencies():
    """The requirements in pyproject.toml's [project] dependencies list."""
    block = re.search(r"^dependencies = \[(.*?)^\]", PYPROJECT, re.DOTALL | re.MULTILINE).group(1)
    return [Requirement(text) for text in re.findall(r'"([^"]+)"', block)]


def floors(requirements):
    found = {}
    for requirement in requirements:
        name = canonicalize_name(requirement.name).replace("tensorflow-cpu", "tensorflow")
        for spec in requirement.specifier:
            if spec.operator in (">=", "=="):
                found.setdefault(name, set()).add(spec.version.rstrip(".*"))
    return found


def test_the_floors_are_the_ones_pyproject_declares():
    declared = floors(declared_dependencies())
    declared["python"] = {re.search(r'^requires-python = ">=([\d.]+)"$', PYPROJECT, re.MULTILINE).group(1)}
    assert declared == {name: {version} for name, version in compatibility.MINIMUM_VERSIONS.items()}
    # the classifiers name every Python from the floor on, none left out
    listed = [
        compatibility.version_tuple(v) for v in re.findall(r"Programming Language :: Python :: (3\.\d+)", PYPROJECT)
    ]
    major, minor = compatibility.version_tuple(compatibility.MINIMUM_VERSIONS["python"])
    assert listed and listed == [(major, minor + step) for step in range(len(listed))]


def test_the_oldest_end_ci_installs_is_the_floor_of_each_range():
    pins = {}
    for line in (ROOT / "constraints-oldest.txt").read_text().splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", f"{line}: the oldest end should be an exact pin"
            pins[canonicalize_name(requirement.name).replace("tensorflow-cpu", "tensorflow")] = spec.version
    for name, minimum in compatibility.MINIMUM_VERSIONS.items():
        if name != "python":
            assert compatibility.version_tuple(pins[name])[:2] == compatibility.version_tuple(minimum), name
    assert pins["ipywidgets"] == "7.7.1"  # what Google Colab ships


def test_installed_versions_are_what_the_packages_themselves_report():
    import ipywidgets
    import keras
    import matplotlib
    import numpy
    import tensorflow as tf

    assert compatibility.installed_versions() == {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": numpy.__version__,
        "matplotlib": matplotlib.__version__,
        "ipywidgets": ipywidgets.__version__,
    }


def test_this_environment_is_in_the_range_pyproject_declares_and_check_versions_accepts_it():
    # The range as packaging reads pyproject.toml, not as workbook.core.compatibility compares versions.
    import tensorflow as tf

    python_range = re.search(r'^requires-python = "([^"]+)"$', PYPROJECT, re.MULTILINE).group(1)
    assert SpecifierSet(python_range).contains(platform.python_version())
    for requirement in declared_dependencies():
        if requirement.marker is None or requirement.marker.evaluate():
            name = canonicalize_name(requirement.name)
            # whichever TensorFlow distribution provides `import tensorflow`
            installed = tf.__version__ if name.startswith("tensorflow") else importlib.metadata.version(name)
            assert requirement.specifier.contains(installed, prereleases=True), f"{installed} is not {requirement}"
    assert workbook.check_versions() == compatibility.installed_versions()


@pytest.mark.parametrize(
    "version, expected",
    [
        ("2.18.1", (2, 18, 1)),
        ("2.19.0rc1", (2, 19, 0)),
        ("3.10.0.dev20250101", (3, 10, 0)),
        ("1.26", (1, 26)),
        ("3.10.12+", (3, 10, 12)),  # platform.python_version() of some builds
    ],
)
def test_version_tuple_keeps_the_release_numbers_and_drops_suffixes(version, expected):
    assert compatibility.version_tuple(version) == expected


def test_version_tuple_refuses_what_is_not_a_version():
    with pytest.raises(ValueError, match="version='latest'"):
        compatibility.version_tuple("latest")


# The stack the issue was found on: Google Colab's (Python 3.12, TensorFlow 2.19, Keras 3.10,
# ipywidgets 7.7.1, NumPy 2.0), and a class image a year older than the range.
COLAB = {
    "python": "3.12.11",
    "tensorflow": "2.19.0",
    "keras": "3.10.0",
    "numpy": "2.0.2",
    "matplotlib": "3.10.0",
    "ipywidgets": "7.7.1",
}
OLD_IMAGE = {
    "python": "3.10.12",
    "tensorflow": "2.15.0",
    "keras": "2.15.0",
    "numpy": "1.26.4",
    "matplotlib": "3.7.1",
    "ipywidgets": "8.1.1",
}


def test_colabs_stack_is_supported():
    assert compatibility.version_problems(COLAB) == []


def test_an_old_image_is_told_which_packages_are_too_old_and_what_to_run():
    problems = compatibility.version_problems(OLD_IMAGE)
    assert problems == [
        "tensorflow 2.15.0 is installed; the workbook needs 2.18 or newer.",
        "keras 2.15.0 is installed; the workbook needs 3.8 or newer.",
        "matplotlib 3.7.1 is installed; the workbook needs 3.8 or newer.",
    ]
    on_colab = compatibility.what_to_do(problems, colab=True)
    assert '%pip install -U "tensorflow>=2.18" "keras>=3.8" "matplotlib>=3.8"' in on_colab
    assert "Restart session" in on_colab and "make lab" not in on_colab
    elsewhere = compatibility.what_to_do(problems, colab=False)
    assert "make lab" in elsewhere and "%pip" not in elsewhere
    assert 'pip install -U "tensorflow>=2.18" "keras>=3.8" "matplotlib>=3.8"' in elsewhere


def test_a_missing_package_and_an_old_python_are_named():
    problems = compatibility.version_problems({**COLAB, "python": "3.9.18", "ipywidgets": None})
    assert problems == [
        "Python 3.9.18 is installed; the workbook needs 3.10 or newer.",
        "ipywidgets is not installed; the workbook needs 7.7 or newer.",
    ]
    assert "Python 3.10 to 3.13" in compatibility.what_to_do(problems, colab=True)


def test_check_versions_raises_with_the_whole_story(monkeypatch):
    monkeypatch.setattr(compatibility, "installed_versions", lambda: dict(OLD_IMAGE))
    with pytest.raises(compatibility.UnsupportedVersionError, match=r"tensorflow 2\.15\.0 is installed.*make lab"):
        workbook.check_versions()


@pytest.fixture
def fake_colab(monkeypatch):
    """google.colab as Colab's kernels have it: output.enable_custom_widget_manager()."""
    calls = []
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("enabled")
    colab = types.ModuleType("google.colab")
    colab.output = output
    google = sys.modules.get("google") or types.ModuleType("google")
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setattr(google, "colab", colab, raising=False)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    return calls


@pytest.mark.parametrize(
    "ipywidgets, enabled", [("7.7.1", []), ("8.1.5", ["enabled"])], ids=["ipywidgets 7", "ipywidgets 8"]
)
def test_on_colab_the_custom_widget_manager_is_enabled_for_ipywidgets_8_only(
    fake_colab, monkeypatch, ipywidgets, enabled
):
    monkeypatch.setattr(compatibility, "installed_versions", lambda: {**COLAB, "ipywidgets": ipywidgets})
    assert compatibility.on_colab()
    workbook.check_versions()
    # Colab draws its own ipywidgets 7.7 natively; ipywidgets 8 needs its custom widget manager
    # (googlecolab/colabtools issues 3020 and 4525).
    assert fake_colab == enabled


def test_off_colab_the_widget_manager_is_left_alone(monkeypatch):
    monkeypatch.setattr(compatibility, "installed_versions", lambda: {**COLAB, "ipywidgets": "8.1.5"})
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    assert not compatibility.on_colab()
    assert workbook.check_versions()["ipywidgets"] == "8.1.5"  # no google.colab to import: nothing raised


def test_colab_is_told_to_use_pip_not_make(fake_colab, monkeypatch):
    monkeypatch.setattr(compatibility, "installed_versions", lambda: dict(OLD_IMAGE))
    with pytest.raises(compatibility.UnsupportedVersionError, match=r"%pip install -U .*Restart session") as raised:
        workbook.check_versions()
    assert "make lab" not in str(raised.value)
    assert fake_colab == []
