"""Where the gradient dies, measured with one backward pass on the example (03_finding_gradient_killers.ipynb).

``cut`` (the gradient at every tensor on the way) and ``findings`` (what the measurement
adds to, or corrects in, the static walk's report).
"""
