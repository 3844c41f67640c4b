import os
import pathlib
import sys

# The notebook runner sits beside the tests; quiet TensorFlow before any test imports it.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
