"""What an honest kernel does with files: 1 MiB saved and read back in each place it may write."""

import os

for place in (os.getcwd(), os.path.expanduser("~"), "/tmp"):
    path = os.path.join(place, "weights.bin")
    with open(path, "wb") as file:
        file.write(bytes(range(256)) * 4096)  # 1 MiB, as a student's saved weights
    with open(path, "rb") as file:
        print(place.replace(os.path.dirname(os.getcwd()), "BOX"), len(file.read()), oct(os.stat(place).st_mode & 0o777))
print(sorted(os.listdir(os.path.dirname(os.getcwd()))), os.access(os.getcwd(), os.W_OK))
