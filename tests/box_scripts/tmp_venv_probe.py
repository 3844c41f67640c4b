"""What a kernel started by a virtual environment's Python sees: its prefix, the grader's /tmp, a hidden folder.

Arguments: a file of the grader's /tmp, and the hidden folder. Then it writes into its own Python's
folder and reads /etc/shadow.
"""

import os
import sys

print(sys.prefix)
print(os.path.exists(sys.argv[1]))
print(os.listdir(sys.argv[2]))
try:
    open(os.path.join(sys.prefix, "zz"), "w").close()
    print("wrote")
except OSError as error:
    print("refused", type(error).__name__)
try:
    open("/etc/shadow").close()
    print("read /etc/shadow")
except OSError as error:
    print("shadow refused", type(error).__name__)
