"""Start processes until the box refuses, and hold them while the classmate beside it is graded.

``targets``: hold_seconds.
"""

import json
import subprocess
import time

window, children, stopped = [time.time()], [], None
try:
    for _ in range(1000):  # at most 1,000: without a limit, the machine's pids are all it takes
        children.append(subprocess.Popen(["sleep", "600"]))
except OSError as error:
    stopped = type(error).__name__
time.sleep(targets["hold_seconds"])
window.append(time.time())
for child in children:
    child.kill()
    child.wait()
print("flooded:", json.dumps(dict(window=window, children=len(children), stopped=stopped)))
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
