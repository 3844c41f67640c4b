"""Fill every place the kernel can write, and keep them full while the classmate beside it is graded.

Its box, its home, its temporary folders. ``targets``: hold_seconds.
"""

import json
import os
import time

window, written = [time.time()], {}
for place in (os.getcwd(), os.path.expanduser("~"), "/tmp", "/var/tmp", "/dev/shm"):
    descriptor, size = os.open(os.path.join(place, "filler"), os.O_WRONLY | os.O_CREAT), 0
    try:
        while size < 2**31:  # 2 GB a place at most, if nothing stopped it
            size += os.write(descriptor, bytes(2**20))
    except OSError:
        pass
    written[place] = size
time.sleep(targets["hold_seconds"])
window.append(time.time())
print("filled:", json.dumps(dict(window=window, written=written)))
model = workbook.autoencoder(bottleneck=quantize_2bit)  # untrained
