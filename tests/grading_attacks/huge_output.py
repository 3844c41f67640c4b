"""One 50 MB line, 50 MB more through a display handle, and 100 MB of widget state in twenty widgets.

The handle is updated from a thread while the next cells run, and shown again under the same id.
"""

import threading
import time

import comm
from IPython.display import display

state = {"_model_module": "@jupyter-widgets/controls", "_model_name": "TextModel", "value": "w" * 5_000_000}
for _ in range(20):
    comm.create_comm(target_name="jupyter.widget", data={"state": state, "buffer_paths": []})
handle = display("small", display_id=True)


def flood():
    for _ in range(10):
        time.sleep(0.3)
        handle.update("u" * 5_000_000)


threading.Thread(target=flood, daemon=True).start()
for _ in range(3):
    display("d" * 5_000_000, display_id=handle.display_id)
print("x" * 50_000_000)  # one 50 MB line
