#!/usr/bin/env python3
"""Pack a trace directory into one fuzz-reader input: u32 metadata length, metadata, then
each stream file (at most 4) as u32 length + bytes.
usage: pack-trace.py TRACE_DIR OUTPUT_FILE"""
import os
import struct
import sys

if len(sys.argv) != 3:
    sys.exit(__doc__)
d = sys.argv[1]
with open(os.path.join(d, "metadata"), "rb") as f:
    meta = f.read()
out = struct.pack("<I", len(meta)) + meta
for name in sorted(n for n in os.listdir(d) if n != "metadata" and not n.startswith("."))[:4]:
    with open(os.path.join(d, name), "rb") as f:
        data = f.read()
    out += struct.pack("<I", len(data)) + data
with open(sys.argv[2], "wb") as f:
    f.write(out)
