"""The fix for a culprit: written, worded and checked on the student's own code (03_finding_gradient_killers.ipynb).

``culprit`` (a culprit's hint, read from the op and the code around it), ``code_line`` (the
calls on one line of code), ``rewrites`` ("Replace `OLD` with `NEW`"), ``words`` (every word of
advice) and ``checked`` (each candidate fix applied to the example and measured before it is shown).
"""
