"""Find the operation that kills a gradient, and say how to fix it (03_finding_gradient_killers.ipynb)."""
