import os
import pathlib
import sys

# The tests' helpers sit beside them, the notebook runner in scripts/ (the book's build uses it too);
# quiet TensorFlow before any test imports it.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_collection_modifyitems(items):
    """The longest tests first: whole notebooks, then training for epochs, each kind in its order, then the rest.

    pytest-xdist (`--dist loadgroup`) hands out the groups first, then single tests in this order:
    side by side, the last minute then holds short tests that keep both workers busy, not a
    notebook that runs on alone.
    """
    longest = ("notebook", "slow")
    items.sort(key=lambda item: next((rank for rank, mark in enumerate(longest) if item.get_closest_marker(mark)), 2))
