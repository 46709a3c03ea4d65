#!/usr/bin/env python3
"""Overwrites one element of one tensor of a checkpoint, in place.

usage: set_element.py CHECKPOINT_DIR TENSOR INDEX HEX_BYTES

The tensor is found through model.safetensors.index.json (or the single
model.safetensors); HEX_BYTES (little-endian, e.g. c07f for a bf16 NaN) is
written at element INDEX, so tests can build checkpoints with a NaN or an
infinity where they want one.
"""
import json
import os
import struct
import sys

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "U8": 1}


def main():
    directory, tensor, index, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4])
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        shard = json.load(open(index_path))["weight_map"][tensor]
    else:
        shard = "model.safetensors"
    path = os.path.join(directory, shard)
    with open(path, "r+b") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_size))
        info = header[tensor]
        width = SIZES[info["dtype"]]
        if len(value) != width:
            sys.exit(f"{tensor} is {info['dtype']}: {width} bytes an element, not {len(value)}")
        f.seek(8 + header_size + info["data_offsets"][0] + index * width)
        f.write(value)


if __name__ == "__main__":
    main()
