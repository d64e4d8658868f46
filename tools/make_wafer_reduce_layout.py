#!/usr/bin/env python3
"""Writes scenarios/wafer/micro/row_reduce_64.json: a pipelined row reduce over 64 PEs
(row_reduce_pipe.pe). Neighbours alternate colors 1 and 2, so each PE has two routes: its out
color from RAMP to the east, its in color from the west to RAMP. Plain python3, no packages."""
import json
import os

P, N = 64, 256
routes = []
for px in range(P):
    out_c, in_c = 1 + px % 2, 2 - px % 2
    if px < P - 1:
        routes.append({"color": out_c, "x": px, "width": 1, "rx": ["RAMP"], "tx": ["E"]})
    if px > 0:
        routes.append({"color": in_c, "x": px, "width": 1, "rx": ["W"], "tx": ["RAMP"]})
layout = {
    "schema": "tessera.wafer-layout/1",
    "fabric": {"width": P, "height": 1},
    "rects": [{"name": "row", "x": 0, "y": 0, "width": P, "height": 1, "program": "row_reduce_pipe.pe",
               "params": {"n": N, "first": "px == 0", "last": "px == width - 1",
                          "middle": "(px > 0) * (px < width - 1)",
                          "out_color": "1 + px % 2", "in_color": "2 - px % 2", "val": "px + 1"},
               "routes": routes}],
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "wafer", "micro", "row_reduce_64.json")
with open(path, "w") as f:
    json.dump(layout, f, indent=1)
    f.write("\n")
print("wrote", path)
