#!/usr/bin/env python3
"""Writes scenarios/wafer/micro/row_reduce_64.json: a pipelined row reduce of 256 fp32 over 64 PEs
(row_reduce_pipe.pe; the layout of tools/make_wafer_validation.py's chain reduce rows). Plain
python3, no packages."""
import json
import os

from make_wafer_validation import reduce_layout

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "wafer", "micro", "row_reduce_64.json")
with open(path, "w") as f:
    json.dump(reduce_layout(64, 256), f, indent=1)
    f.write("\n")
print("wrote", path)
