"""Start processes until refused, hold them until a line arrives on stdin, then take 640 MB."""

import subprocess
import sys

children = []
try:
    for _ in range(1000):  # at most 1,000: without a limit, the machine's pids are all it takes
        children.append(subprocess.Popen(["sleep", "30"]))
    print("started all", len(children), flush=True)
except OSError as error:
    print("stopped at", len(children), type(error).__name__, flush=True)
sys.stdin.readline()  # the sleepers hold the box's tasks while the classmate starts
hog = [bytearray(16 * 2**20) for _ in range(40)]
print("held", 16 * len(hog), "MB", flush=True)
print("ran")
