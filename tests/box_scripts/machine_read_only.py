"""Look into a hidden course, write outside the box, reach the network, leave a process behind.

Arguments: the course folder, then three files to write (in the course, in the workbook, in /etc),
then a marker file that a process left behind would make.
"""

import os
import socket
import subprocess
import sys

course, *outside, marker = sys.argv[1:]
print("sees course:", os.listdir(course))
for path in outside:
    try:
        with open(path, "a") as file:
            file.write("x")
        print("wrote", path)
    except OSError as error:
        print("refused", type(error).__name__)
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2)
    print("network")
except OSError:
    print("no network")
subprocess.Popen(["setsid", "sh", "-c", f"sleep 3; touch {marker}"])
