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
- relay_n<N>_b<B>_wse3.json: a store-and-forward chain of N stages (N + 1 PEs in a row; every PE
  after the first receives the whole B-wavelet message with one DSD op, then forwards it with a
  second) against the 3P fit on Cerebras' WSE-3 simulator T = 1.001*N*B + 16.1*N + 16.5 (wafer.md
  Fabric). message_8w_1hop_wse3.json is its smallest case against the 3P measurement of one
  8-wavelet message over one hop (dispatch to receiving task done: 19 cycles, WSE-3 simulator).
- rate_<op>_wse3.json: one long DSD op (copy fp16 / fp32, FMA fp16 / fp32) on one WSE-3 PE against
  the 3P silicon rates (elements per cycle) plus the 3P silicon DSD setup (~16 cycles).
- hop_h<H>_tr2.json, wavelets_b<B>_tr2.json: point-to-point messages at router.hop_latency 2 on
  wse3, without a published total; tools/make_validation_doc.py takes the slopes of their pairs
  (cycles per hop, cycles per wavelet) and sets them beside the 3P silicon figures (2.000, 1.125).

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


def chain_routes(P):
    """Routes of a row of P PEs that pass a stream east, neighbours alternating colors 1 and 2."""
    routes = []
    for px in range(P):
        if px < P - 1:
            routes.append({"color": 1 + px % 2, "x": px, "width": 1, "rx": ["RAMP"], "tx": ["E"]})
        if px > 0:
            routes.append({"color": 2 - px % 2, "x": px, "width": 1, "rx": ["W"], "tx": ["RAMP"]})
    return routes


def relay(N, B, name=None, ref=None):
    """A store-and-forward chain of N stages (N + 1 PEs) moving a B-wavelet fp32 message east."""
    P = N + 1
    name = name or "relay_n%d_b%d_wse3" % (N, B)
    write(name + "_layout.json", {
        "schema": "tessera.wafer-layout/1",
        "fabric": {"width": P, "height": 1},
        "rects": [{"name": "row", "x": 0, "y": 0, "width": P, "height": 1, "program": "relay.pe",
                   "params": {"n": B, "first": "px == 0", "last": "px == width - 1",
                              "out_color": "1 + px % 2", "in_color": "2 - px % 2", "val": "(px == 0) * 7"},
                   "routes": chain_routes(P)}],
    })
    write_npy(name + "_buf.npy", (1, P, B), [7.0] * (P * B))  # every stage stored the whole message
    if ref is None:
        T = 1.001 * N * B + 16.1 * N + 16.5
        ref = (T, "wafer.md Fabric (3P, WSE-3 simulator): store-and-forward relay fit T = 1.001*N*B + 16.1*N + 16.5 "
                  "= %.1f cycles for N = %d, B = %d, at 850 MHz" % (T, N, B))
        what = ("A store-and-forward chain of %d stage%s (%d PEs in a row: each PE after the first receives the whole "
                "%d-wavelet fp32 message with one DSD op, then forwards it with a second) on WSE-3, against the 3P fit on "
                "Cerebras' WSE-3 simulator T = 1.001*N*B + 16.1*N + 16.5 = %.1f cycles." % (N, "s" if N > 1 else "", P, B, T))
    else:
        what = ref[2]
    write(name + ".json", {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-" + name.replace("_", "-"),
        "description": what + " Written by tools/make_wafer_validation.py.",
        "target": {"kind": "wafer", "preset": "wse3"},
        "model": {"layout": name + "_layout.json"},
        "expect": {"outputs": {"buf": {"file": "data/%s_buf.npy" % name, "rtol": 0, "atol": 0}},
                   "reference_latency": {"value": ns(ref[0]), "source": ref[1]}},
    })


def p2p(name, H, B, what):
    """A B-wavelet fp32 message over H router links (send.pe -> relays -> recv.pe) at hop latency 2,
    no published total (a point of a slope)."""
    rects = [{"name": "sender", "x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe",
              "params": {"n": B}, "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}]}]
    if H > 1:
        rects.append({"name": "relay", "x": 1, "y": 0, "width": H - 1, "height": 1,
                      "routes": [{"color": 1, "rx": ["W"], "tx": ["E"]}]})
    rects.append({"name": "receiver", "x": H, "y": 0, "width": 1, "height": 1, "program": "recv.pe",
                  "params": {"n": B}, "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}]})
    write(name + "_layout.json", {"schema": "tessera.wafer-layout/1", "fabric": {"width": H + 1, "height": 1},
                                  "rects": rects})
    write_npy(name + "_y.npy", (1, 1, B), [1.5] * B)
    write(name + ".json", {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-" + name.replace("_", "-"),
        "description": ("%s: %d fp32 wavelets over %d router link%s on WSE-3 at router.hop_latency 2 (the 3P silicon "
                        "hop cost). No published total: tools/make_validation_doc.py sets the slope of this series "
                        "beside the 3P silicon figure. Written by tools/make_wafer_validation.py."
                        % (what, B, H, "s" if H > 1 else "")),
        "target": {"kind": "wafer", "preset": "wse3", "params": {"router.hop_latency": 2}},
        "model": {"layout": name + "_layout.json"},
        "expect": {"outputs": {"y": {"file": "data/%s_y.npy" % name, "rtol": 0, "atol": 0}}},
    })


def rate(name, op, dtype, n, arrays, per_cycle, what, result):
    """One DSD op over n elements on one WSE-3 PE against a 3P silicon rate (elements per cycle)."""
    decl = "".join(".data %s %s %d fill=%s\n" % (a, dtype, n, v) for a, v in arrays)
    decl += "".join(".dsd %sm mem1d %s\n" % (a, a) for a, _ in arrays)
    write_text(name + ".pe", "# One %s over %d %s elements on one PE (tools/make_wafer_validation.py).\n%s\n"
               ".task main local id=8 active\n  %s\n  halt\n" % (op.split()[0], n, dtype, decl, op))
    write(name + "_layout.json", {"schema": "tessera.wafer-layout/1", "fabric": {"width": 1, "height": 1},
                                  "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1,
                                             "program": name + ".pe"}]})
    write_npy(name + "_c.npy", (1, 1, n), [result] * n)
    T = SETUP + n / per_cycle
    write(name + ".json", {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-" + name.replace("_", "-"),
        "description": ("%s on one WSE-3 PE against the 3P silicon rate of %.2f elements per cycle plus a DSD setup of "
                        "%d cycles (3P: ~15-17 on silicon): %.0f cycles. Written by tools/make_wafer_validation.py."
                        % (what, per_cycle, SETUP, T)),
        "target": {"kind": "wafer", "preset": "wse3"},
        "model": {"layout": name + "_layout.json"},
        "expect": {"outputs": {"c": {"file": "data/%s_c.npy" % name, "rtol": 0, "atol": 0}},
                   "reference_latency": {
            "value": ns(T),
            "source": "wafer.md Published measurements (3P, WSE-3 silicon): %s %.2f elements/cycle; setup %d cycles "
                      "(wafer.md PE, 3P ~15-17 on silicon): %d + %d / %.2f = %.0f cycles at 850 MHz"
                      % (what, per_cycle, SETUP, SETUP, n, per_cycle, T)}},
    })


RELAY_PE = """# Store-and-forward relay chain (tools/make_wafer_validation.py): the first PE sends its buffer
# east; every other PE receives the whole message (one DSD op), then forwards it (a second DSD op);
# the last one only receives. Neighbours alternate two colors, as in row_reduce.pe.
.param n = 16
.param first = 1
.param last = 1
.param in_color = 2
.param out_color = 1
.param val = 0
.data buf f32 $n fill=$val
.dsd bm mem1d buf
.if !$first
.dsd in fabin f32 color=$in_color queue=1 len=$n
.endif
.if !$last
.dsd out fabout f32 color=$out_color queue=2 len=$n
.endif

.task main local id=10 active
.if !$first
  fmovs bm, in                   # store the whole message
.endif
.if !$last
  fmovs out, bm                  # and forward it
.endif
  halt
"""


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
    write_text("relay.pe", RELAY_PE)
    # Store-and-forward relays (3P fit on the WSE-3 simulator), and its 1-stage, 8-wavelet case
    # against the 3P measurement of that message.
    for N, B in ((1, 64), (4, 64), (16, 64), (16, 256), (64, 256)):
        relay(N, B)
    relay(1, 8, "message_8w_1hop_wse3", (19, "wafer.md Published measurements (3P, WSE-3 simulator): one 8-wavelet "
                                              "message over 1 hop, dispatch to receiving task done 19 cycles, at 850 MHz",
                                         "One 8-wavelet fp32 message from a PE to its east neighbour (relay.pe, one "
                                         "stage) on WSE-3, against the 3P measurement on Cerebras' WSE-3 simulator: "
                                         "19 cycles from dispatch to the receiving task done."))
    # Single-PE rates on silicon (3P): copy fp16 4.82, fp32 2.44; FMA fp16 2.92, fp32 0.50 per cycle.
    rate("rate_copy16_wse3", "fmovh cm, am", "f16", 8192, (("a", "1.5"), ("c", "0")), 4.82, "copy fp16 (fmovh)", 1.5)
    rate("rate_copy32_wse3", "fmovs cm, am", "f32", 4096, (("a", "1.5"), ("c", "0")), 2.44, "copy fp32 (fmovs)", 1.5)
    rate("rate_fma16_wse3", "fmach cm, am, bm, 2.0", "f16", 4096, (("a", "1.5"), ("b", "0.25"), ("c", "0")), 2.92,
         "FMA fp16 (fmach)", 2.0)
    rate("rate_fma32_wse3", "fmacs cm, am, bm, 2.0", "f32", 2048, (("a", "1.5"), ("b", "0.25"), ("c", "0")), 0.50,
         "FMA fp32 (fmacs)", 2.0)
    # Hop and wavelet slopes at hop latency 2 (3P silicon: 2.000 cycles/hop, 1.125 cycles/wavelet).
    for mic in ("send.pe", "recv.pe"):
        with open(os.path.join(HERE, "..", "micro", mic)) as f:
            write_text(mic, f.read())
    p2p("hop_h1_tr2", 1, 8, "Hop series, 1 link")
    p2p("hop_h128_tr2", 128, 8, "Hop series, 128 links")
    p2p("wavelets_b64_tr2", 1, 64, "Wavelet series, 64 wavelets")
    p2p("wavelets_b1024_tr2", 1, 1024, "Wavelet series, 1024 wavelets")
    print("wrote", HERE)


if __name__ == "__main__":
    main()
