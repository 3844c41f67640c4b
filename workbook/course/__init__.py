"""The instructor's side: nbgrader's execute step, the hidden checks' records and verdicts, the
sandbox that runs them, and grading a class. Needs the ``course`` extra
(``pip install gradient-workbook[course]``); a student's ``import workbook`` never loads it
(course/README.md).
"""
