#!/usr/bin/env python3
"""Writes scenarios/wafer/validation/: wafer scenarios that set the simulated fabric beside a
published figure (expect.reference_latency, with its source in ../shared/reference/wafer.md).

- reduce_chain_p<P>[_tr2].json: the pipelined chain reduce of 256 fp32 values over a row of P PEs
  (P = 4, 16, 64, 256: the range of Luczynski et al., HPDC'24, arXiv 2404.15888), against that
  paper's reduce model T = max(C, E/N + L) + (2*T_R + 1)*D, read for this program as
  C = dsd.setup_cycles + ceil(B / simd.fp32) (one PE's adds), E/N + L = B wavelets at one per cycle
  + dsd.setup_cycles (the first PE's stream op), D = P - 1 (the chain's depth), T_R the hop latency:
  1 on the wse2 preset (SDK), 2 in the _tr2 rows (router.hop_latency = 2: the paper's T_R ~ 2 and
  the 3P silicon measurement). The paper's CS-2 measurements themselves are not in the fact sheet,
  so these rows check the fabric against the model only.
- fmach_4096_wse3.json, add16_2048_wse3.json: one DSD op on one WSE-3 PE against the cycle counts
  the 3P characterisation measured on Cerebras' WSE-3 simulator (wafer.md "Published measurements").

Times are cycles at the preset's pe.clock (850 MHz, the SDK examples' conversion: wafer.md PE);
the run prints the cycles beside the time. Plain python3, no packages; CI never runs it.
"""
import json
import math
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenarios", "wafer", "validation")
CLOCK = 850e6
SETUP, SIMD_FP32 = 16, 2  # wse2 preset: dsd.setup_cycles, simd.fp32 (isa/wafer/params.cpp)


def write(name, obj):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def write_npy(name, shape, values):
    """A float32 .npy (format 1.0) of `values` in C order, without numpy."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join("%d, " % d for d in shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(os.path.join(HERE, "data", name), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%df" % len(values), *values))


def ns(cycles):
    return "%.2fns" % (cycles / CLOCK * 1e9)


def reduce_layout(P, B):
    """The pipelined chain reduce of B fp32 values over a row of P PEs (row_reduce_pipe.pe).
    Neighbours alternate colors 1 and 2, so each PE has two routes: its out color from RAMP to the
    east, its in color from the west to RAMP."""
    routes = []
    for px in range(P):
        out_c, in_c = 1 + px % 2, 2 - px % 2
        if px < P - 1:
            routes.append({"color": out_c, "x": px, "width": 1, "rx": ["RAMP"], "tx": ["E"]})
        if px > 0:
            routes.append({"color": in_c, "x": px, "width": 1, "rx": ["W"], "tx": ["RAMP"]})
    return {
        "schema": "tessera.wafer-layout/1",
        "fabric": {"width": P, "height": 1},
        "rects": [{"name": "row", "x": 0, "y": 0, "width": P, "height": 1, "program": "row_reduce_pipe.pe",
                   "params": {"n": B, "first": "px == 0", "last": "px == width - 1",
                              "middle": "(px > 0) * (px < width - 1)",
                              "out_color": "1 + px % 2", "in_color": "2 - px % 2", "val": "px + 1"},
                   "routes": routes}],
    }


def reduce_chain(P, B=256, tr=1):
    layout = reduce_layout(P, B)
    lname = "reduce_chain_p%d_layout.json" % P
    write(lname, layout)
    # Every PE declares `sum` ([1, P, B]); the eastmost one holds 1 + 2 + ... + P, the others zeros.
    write_npy("reduce_p%d_sum.npy" % P, (1, P, B), [0.0] * ((P - 1) * B) + [P * (P + 1) / 2.0] * B)
    C = SETUP + math.ceil(B / SIMD_FP32)
    EN_L = B + SETUP
    D = P - 1
    T = max(C, EN_L) + (2 * tr + 1) * D
    sfx = "" if tr == 1 else "_tr2"
    nsfx = sfx.replace("_", "-")
    scen = {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-reduce-chain-p%d%s" % (P, nsfx),
        "description": ("Chain reduce of %d fp32 values over a row of %d PEs (row_reduce_pipe.pe: each PE adds its vector to "
                        "the stream from the west and passes it east) at hop latency %d, against the reduce model of "
                        "Luczynski et al.: C = %d, E/N + L = %d, D = %d, T_R = %d: T = %d cycles. Written by "
                        "tools/make_wafer_validation.py." % (B, P, tr, C, EN_L, D, tr, T)),
        "target": {"kind": "wafer", "preset": "wse2"},
        "model": {"layout": lname},
        "expect": {"outputs": {"sum": {"file": "data/reduce_p%d_sum.npy" % P, "rtol": 0, "atol": 0}},
                   "reference_latency": {
            "value": ns(T),
            "source": "wafer.md: Luczynski et al. (arXiv 2404.15888) reduce model T = max(C, E/N + L) + (2*T_R+1)*D = "
                      "max(%d, %d) + %d*%d = %d cycles at 850 MHz" % (C, EN_L, 2 * tr + 1, D, T)}},
    }
    if tr != 1:
        scen["target"]["params"] = {"router.hop_latency": tr}
    write("reduce_chain_p%d%s.json" % (P, sfx), scen)


def single_op(name, op, n, cycles, what, result):
    prog = ("# One %s over %d fp16 elements on one PE (tools/make_wafer_validation.py).\n"
            ".data a f16 %d fill=1.5\n.data b f16 %d fill=0.25\n.data c f16 %d fill=0\n"
            ".dsd am mem1d a\n.dsd bm mem1d b\n.dsd cm mem1d c\n\n"
            ".task main local id=8 active\n  %s\n  halt\n") % (op.split()[0], n, n, n, n, op)
    write_text(name + ".pe", prog)
    layout = {"schema": "tessera.wafer-layout/1", "fabric": {"width": 1, "height": 1},
              "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1, "program": name + ".pe"}]}
    write(name + "_layout.json", layout)
    write_npy(name + "_c.npy", (1, 1, n), [result] * n)
    write(name + ".json", {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-" + name.replace("_", "-"),
        "description": "%s on one WSE-3 PE (preset wse3: simd.fp16 = 8, the SDK Appendix width), against the %d cycles "
                       "the 3P characterisation measured on Cerebras' WSE-3 simulator. Written by "
                       "tools/make_wafer_validation.py." % (what, cycles),
        "target": {"kind": "wafer", "preset": "wse3"},
        "model": {"layout": name + "_layout.json"},
        "expect": {"outputs": {"c": {"file": "data/%s_c.npy" % name, "rtol": 0, "atol": 0}},
                   "reference_latency": {
            "value": ns(cycles),
            "source": "wafer.md Published measurements (3P, WSE-3 simulator): %s, %d cycles at 850 MHz" % (what, cycles)}},
    })


def write_text(name, text):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(text)


def main():
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    with open(os.path.join(HERE, "..", "micro", "row_reduce_pipe.pe")) as f:
        write_text("row_reduce_pipe.pe", f.read())
    for P in (4, 16, 64, 256):
        reduce_chain(P)
    for P in (64, 256):
        reduce_chain(P, tr=2)
    # c = a + b * 2 = 1.5 + 0.25 * 2; add16 adds the bit patterns: 0x3e00 + 0x3400 = 0x7200 = 12288 in fp16.
    single_op("fmach_4096_wse3", "fmach cm, am, bm, 2.0", 4096, 1040, "fmach DSD op over 4096 fp16", 2.0)
    single_op("add16_2048_wse3", "add16 cm, am, bm", 2048, 514, "add16 DSD op over 2048 16-bit values", 12288.0)
    print("wrote", HERE)


if __name__ == "__main__":
    main()
