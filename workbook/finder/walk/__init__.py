"""The static walk: which op a gradient cannot cross, and why (03_finding_gradient_killers.ipynb).

``reach`` (which sources reach each tensor), ``gradient_probe`` (which inputs an op's registered
gradient feeds), ``backward`` (the walk back from the output), ``layer_causes`` (why a layer's
weight is disconnected) and ``analysis`` (trace, walk and sort into a report).
"""
