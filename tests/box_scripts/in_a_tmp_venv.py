"""Run by a Python whose virtual environment was made in /tmp: start tmp_venv_probe.py in a box of that Python.

Arguments: a file of the grader's /tmp, and a folder to hide. Prints the box's return code, the end
of its error output, and what the probe printed.
"""

import pathlib
import subprocess
import sys

from workbook.course.sandbox import Box, sandbox_command

probe = (pathlib.Path(__file__).parent / "tmp_venv_probe.py").read_text()
box = Box()
try:
    command = sandbox_command(box, [sys.executable, "-c", probe, *sys.argv[1:]], hidden=[sys.argv[2]])
    command[command.index("sh") + 2] = 'exec "$@"'  # keep its output, for the test
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    print(result.returncode, result.stderr.strip()[-500:].replace("\n", " "), result.stdout, sep="\n", end="")
finally:
    box.remove()
