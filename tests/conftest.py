import os
import pathlib
import sys

# The tests' helpers sit beside them, the notebook runner in scripts/ (the book's build uses it too);
# quiet TensorFlow before any test imports it.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent.parent / "scripts"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
