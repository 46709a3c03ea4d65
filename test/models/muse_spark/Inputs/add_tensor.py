"""Adds a BF16 tensor of zeros to a checkpoint: to the shard holding
REFERENCE (the file rewritten whole, its header grown) and to the shard
index when there is one. Tests build checkpoints with a tensor their config
does not have.

usage: add_tensor.py CHECKPOINT_DIR REFERENCE NEW_NAME ELEMENTS
"""
import glob
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        return header, f.read()


def main():
    directory, reference, name, elements = sys.argv[1:]
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        header, data = read(path)
        if reference not in header:
            continue
        extra = b"\0" * (2 * int(elements))
        header[name] = {"dtype": "BF16", "shape": [int(elements)],
                        "data_offsets": [len(data), len(data) + len(extra)]}
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data + extra)
        index_path = os.path.join(directory, "model.safetensors.index.json")
        if os.path.exists(index_path):
            with open(index_path) as f:
                index = json.load(f)
            index["weight_map"][name] = os.path.basename(path)
            index.setdefault("metadata", {})["total_size"] = (
                index["metadata"].get("total_size", 0) + len(extra))
            with open(index_path, "w") as f:
                json.dump(index, f)
        return 0
    sys.exit(f"no shard in {directory} holds {reference}")


if __name__ == "__main__":
    sys.exit(main())
