"""What the finder differentiates, and the graph it traces of it (03_finding_gradient_killers.ipynb).

``targets`` (a function, a model, a model's own ``train_step``, left as it was), ``tracing``
(the traced graph), ``graph_program`` (its loops, branches and calls laid out flat) and
``frames`` (the student's lines in a traced op's traceback).
"""
