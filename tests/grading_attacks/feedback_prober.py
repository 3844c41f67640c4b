"""What a student may write into their own feedback (appended to part (a)'s right answer).

A hook that prints every cell it sees (the check cells with their hidden tests, as the grader ran
them), HTML that would run script in the reader's browser, and the hidden tests' opening marker
with no end (nbgrader stopped on it).
"""

from IPython.display import HTML, display

get_ipython().events.register("post_run_cell", lambda result: print(result.info.raw_cell))
display(HTML("<img src=x onerror=alert(1)><script>alert(2)</script>"))
# nbconvert writes an image's width into the page unquoted
display({"image/png": "iVBORw0KGgo="}, metadata={"image/png": {"width": "1 onerror=alert(5)"}}, raw=True)
# ### BEGIN HIDDEN TESTS
