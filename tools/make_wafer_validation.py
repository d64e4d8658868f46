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
- allreduce_chain_p<P>[_tr2].json: the chain AllReduce of the same paper's code (spcl/spatial-collectives,
  code_chain_allreduce.csl: a chain reduce, then a broadcast back from the chain's end on one
  multicast color whose routers deliver to their PE and pass on): chain_allreduce.pe, the reduce
  above followed by the eastmost PE streaming the sum west to every PE. Against the same model
  applied to each phase, T = T_reduce + T_bcast, the broadcast read as C = dsd.setup_cycles + B
  (each PE takes B wavelets at one a cycle), E/N + L = B + dsd.setup_cycles + (P - 1) * T_R (B
  wavelets over each of the P - 1 links, the root's stream op, the distance to the far end), D = 1
  (one dependent step). This reading is this project's (the fact sheet gives the model, not the
  paper's per-algorithm parameters).
- reduce_2d_q<Q>[_tr2].json, allreduce_2d_q<Q>[_tr2].json: the same over a Q x Q square (Q = 2, 4,
  8, 16: 4 to 256 PEs): every row's chain reduce east, then the last column's chain reduce of the row
  sums south (reduce_2d.pe); the AllReduce then broadcasts the total from the south-east PE over one
  multicast tree (north along the last column, west along every row). Against the model per phase:
  T = 2 T_chain(Q) (+ the broadcast, read as above with the distance 2 (Q - 1) T_R).
- reduce_tree_p<P>[_tr2|_b16].json, reduce_two_phase_p<P>[...].json and their allreduce_ forms: the
  paper's tree (spcl/spatial-collectives modules/tree.csl, binomial, rooted at the eastmost PE) and
  two-phase reduce (two_phase.csl: chains within groups of sqrt(P) PEs, then a chain over the groups'
  heads) over P = 4 .. 256 PEs, one color per tree level or phase instead of the CSL's switched
  colors (tree_reduce.pe, two_phase_reduce.pe); the AllReduces add the chain AllReduce's broadcast.
  Against the model read per algorithm (tree_model, two_phase_model); _b16 rows take 16 values, where
  the tree overtakes the chain (reduce_chain_p256_b16.json beside them).
- reduce_star_p<P>[_b16].json, allreduce_star_p<P>.json: the paper's star (star.csl: every PE sends
  straight to the root, each sender's switch passing its own stream first and, after its last
  wavelet -- fabout `advance`, CSL's `.advance_switch` -- the farther PEs'), P = 4 .. 256
  (star_reduce.pe). Against the model read as C = the root's P - 1 adds, D = 1 (star_model).
- reduce_auto_p<P>[_b16|_ramp2].json, allreduce_auto_p<P>.json: the paper's generated algorithm (generate_pre_order_2d.py:
  the tree its dynamic program picks for P, B and T_R, in pre-order along the row; auto_reduce.pe),
  against the model read with that tree's energy and depth (auto_model); the AllReduces add the
  chain AllReduce's broadcast, on a color beside the tree's; reduce_auto_2d_q<Q>: over Q x Q PEs, every
  row's tree, then the east column's (T = 2 T_auto(Q)).
- fmach_4096_wse3.json, add16_2048_wse3.json: one DSD op on one WSE-3 PE against the cycle counts
  the 3P characterisation measured on Cerebras' WSE-3 simulator (wafer.md "Published measurements").
- relay_n<N>_b<B>_wse3.json: a store-and-forward chain of N stages (N + 1 PEs in a row; every PE
  after the first receives the whole B-wavelet message with one DSD op, then forwards it with a
  second) against the 3P fit on Cerebras' WSE-3 simulator T = 1.001*N*B + 16.1*N + 16.5 (wafer.md
  Fabric). message_8w_1hop_wse3.json is its smallest case against the 3P measurement of one
  8-wavelet message over one hop (dispatch to receiving task done: 19 cycles, WSE-3 simulator).
- rate_<op>_wse3.json: one long DSD op (copy fp16 / fp32, FMA fp16 / fp32) on one WSE-3 PE against
  the 3P silicon rates (elements per cycle) plus the 3P silicon DSD setup (~16 cycles); the _sram
  forms of the SIMD ones again with pe.sram_bytes_per_cycle 21.2 (wafer.md Whole wafer: the memory
  bandwidth per WSE-3 core at 1.1 GHz), rate_fma32_wse3_fmacs2 with simd.fmacs_interval 2.
- gemm_summa_p<P>.json: C = A B in fp32 over P x P PEs with 44 x 44 blocks per PE (the block of
  the 33,000 x 33,000 GEMM on 750 x 750 PEs of Matsuzaki, Miyajima et al.: wafer.md "More rows"),
  by SUMMA (summa.pe, written here): in step k the PEs of column k multicast their A blocks along
  the rows and the PEs of row k their B blocks down the columns, each B wavelet fires a data task
  doing C[:, j] += A_k[:, p] * B_k[p, j] (one fmacs). Published: their 349.0 TFLOP/s over 562,500
  PEs, 620.4 MFLOP/s per PE at this block, carried to P x P PEs by their weak-scaling efficiency of
  1.00: T = 2 (44 P)^3 / (P^2 * 620.4e6) s. The full size needs the simulation-speed issue.
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
    Neighbours alternate colors 1 and 2 (chain_routes)."""
    routes = chain_routes(P)
    return {
        "schema": "tessera.wafer-layout/1",
        "fabric": {"width": P, "height": 1},
        "rects": [{"name": "row", "x": 0, "y": 0, "width": P, "height": 1, "program": "row_reduce_pipe.pe",
                   "params": {"n": B, "first": "px == 0", "last": "px == width - 1",
                              "middle": "(px > 0) * (px < width - 1)",
                              "out_color": "1 + px % 2", "in_color": "2 - px % 2", "val": "px + 1"},
                   "routes": routes}],
    }


def chain_model(P, B, tr):
    """Luczynski et al.'s model T = max(C, E/N + L) + (2*T_R + 1)*D read for the pipelined chain of
    P PEs: C = one PE's adds, E/N + L = B wavelets at one a cycle + the first PE's stream op,
    D = P - 1. Returns (C, E/N + L, T)."""
    C = SETUP + math.ceil(B / SIMD_FP32)
    EN_L = B + SETUP
    return C, EN_L, max(C, EN_L) + (2 * tr + 1) * (P - 1)


def bcast_model(B, dist, tr, hop=None):
    """The same model read for a broadcast of B wavelets from one PE over `dist` hops to the
    farthest: C = setup + B (each PE takes one a cycle), E/N + L = B + setup + dist * T_R, D = 1.
    Returns (C, E/N + L, T)."""
    C, EN_L = SETUP + B, B + SETUP + dist * (tr if hop is None else hop)
    return C, EN_L, max(C, EN_L) + (2 * tr + 1)


def model_row(name, what, program, lname, out_file, T, parts, tr, ramp=False):
    """A scenario (`name`.json, its _tr2 form: router.hop_latency 2, or its _ramp2 form:
    router.ramp_latency 2 -- the paper's T_R as the PE-router latency) running layout `lname`
    against the model's T."""
    sfx = "" if tr == 1 else ("_ramp%d" if ramp else "_tr%d") % tr
    scen = {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-%s%s" % (name.replace("_", "-"), sfx.replace("_", "-")),
        "description": ("%s; program %s, %s; against the model of Luczynski et al.: %s: T = %d cycles. "
                        "Written by tools/make_wafer_validation.py."
                        % (what, program, "hop latency 1, PE-router (ramp) latency %d" % tr if ramp else "hop latency %d" % tr,
                           parts, T)),
        "target": {"kind": "wafer", "preset": "wse2"},
        "model": {"layout": lname},
        "expect": {"outputs": {"sum": {"file": "data/" + out_file, "rtol": 0, "atol": 0}},
                   "reference_latency": {
            "value": ns(T),
            "source": "wafer.md: Luczynski et al. (arXiv 2404.15888) model T = max(C, E/N + L) + (2*T_R+1)*D (this "
                      "project's reading for %s): %s = %d cycles at 850 MHz" % (program, parts, T)}},
    }
    if tr != 1:
        scen["target"]["params"] = {"router.ramp_latency" if ramp else "router.hop_latency": tr}
    write(name + sfx + ".json", scen)


def reduce_chain(P, B=256, tr=1, ramp=False):
    sfx = "" if B == 256 else "_b%d" % B
    layout = reduce_layout(P, B)
    lname = "reduce_chain_p%d%s_layout.json" % (P, sfx)
    write(lname, layout)
    # Every PE declares `sum` ([1, P, B]); the eastmost one holds 1 + 2 + ... + P, the others zeros.
    write_npy("reduce_p%d%s_sum.npy" % (P, sfx), (1, P, B), [0.0] * ((P - 1) * B) + [P * (P + 1) / 2.0] * B)
    C, EN_L, T = chain_model(P, B, tr)
    model_row("reduce_chain_p%d%s" % (P, sfx), "Chain reduce of %d fp32 values over a row of %d PEs (each PE adds its "
              "vector to the stream from the west and passes it east)" % (B, P), "row_reduce_pipe.pe", lname,
              "reduce_p%d%s_sum.npy" % (P, sfx), T, "C = %d, E/N + L = %d, D = %d: max(%d, %d) + %d*%d" % (C, EN_L, P - 1, C, EN_L, 2 * tr + 1, P - 1), tr,
              ramp)


# The pipelined chain reduce of row_reduce_pipe.pe (each PE adds its vector `a` to the stream from
# the west and passes it east; the last one keeps the sum), shared by the AllReduce programs below.
CHAIN_DECLS = """.param n = 256
.param first = 1                 # px == 0
.param middle = 0                # the PEs between a row's first and last
.param last = 1                  # px == width - 1
.param in_color = 2
.param out_color = 1
.param val = 1
.data a f32 $n fill=$val
.data sum f32 $n fill=0
.dsd am mem1d a
.dsd sm mem1d sum
.if !$first
.dsd from_west fabin f32 color=$in_color queue=1 len=$n
.endif
.if !$last
.dsd to_east fabout f32 color=$out_color queue=2 len=$n
.endif
"""
CHAIN_STEPS = """.if $first
  fmovs to_east, am              # the row's stream
.endif
.if $middle
  fadds to_east, am, from_west   # add and pass on, element by element
.endif
.if $last
  fadds sm, am, from_west        # the row's sum
.endif
"""

# The AllReduce's broadcast on color bc_color (5 unless a program's colors need it; queue 5), shared by the
# reduce programs: the root sends the sum (bc_send), every other PE keeps it in `sum` (bc_recv); routes from
# bcast_routes or reduce_2d.
BCAST_DECLS = """.param bc_send = 0               # the AllReduce's root: it broadcasts the sum on bc_color
.param bc_recv = 0               # the AllReduce's other PEs: they keep it in sum
.param bc_color = 5
"""
BCAST_DSDS = """.if $bc_recv
.dsd from_bc fabin f32 color=$bc_color queue=5 len=$n
.endif
.if $bc_send
.dsd to_bc fabout f32 color=$bc_color queue=5 len=$n
.endif
"""
BCAST_STEPS = """.if $bc_send
  fmovs to_bc, sm                # the broadcast
.endif
.if $bc_recv
  fmovs sm, from_bc
.endif
"""

CHAIN_ALLREDUCE_PE = """# Chain AllReduce (tools/make_wafer_validation.py): the pipelined chain reduce of row_reduce_pipe.pe
# to the eastmost PE, then that PE streams the sum back west on a multicast color (every router
# delivers it to its PE and passes it on) and every PE keeps it in `sum` -- the chain AllReduce of
# Luczynski et al. (spcl/spatial-collectives code_chain_allreduce.csl: a chain reduce, then a
# broadcast from the chain's end).
""" + CHAIN_DECLS + """.if !$last
.dsd from_east fabin f32 color=3 queue=3 len=$n
.endif
.if $last
.dsd to_west fabout f32 color=3 queue=4 len=$n
.endif

.task main local id=10 active
""" + CHAIN_STEPS + """.if $last
  fmovs to_west, sm              # the broadcast
.endif
.if !$last
  fmovs sm, from_east            # take the broadcast sum
.endif
  halt
"""


def allreduce_chain(P, B=256, tr=1, ramp=False):
    routes = chain_routes(P)
    # The broadcast (color 3): from the eastmost PE's ramp west; each router on the way delivers it
    # to its PE and passes it on, the westmost one only delivers.
    routes.append({"color": 3, "x": P - 1, "width": 1, "rx": ["RAMP"], "tx": ["W"]})
    routes.append({"color": 3, "x": 1, "width": P - 2, "rx": ["E"], "tx": ["RAMP", "W"]})
    routes.append({"color": 3, "x": 0, "width": 1, "rx": ["E"], "tx": ["RAMP"]})
    layout = reduce_layout(P, B)
    layout["rects"][0]["program"] = "chain_allreduce.pe"
    layout["rects"][0]["routes"] = routes
    lname = "allreduce_chain_p%d_layout.json" % P
    write(lname, layout)
    write_npy("allreduce_p%d_sum.npy" % P, (1, P, B), [P * (P + 1) / 2.0] * (P * B))
    C, EN_L, Tr = chain_model(P, B, tr)
    Cb, ENb_L, Tb = bcast_model(B, P - 1, tr, 1 if ramp else tr)
    model_row("allreduce_chain_p%d" % P, "Chain AllReduce of %d fp32 values over a row of %d PEs (the chain reduce "
              "to the eastmost PE, then its broadcast of the sum west to every PE, as in Luczynski et al.'s "
              "code_chain_allreduce.csl)" % (B, P), "chain_allreduce.pe", lname, "allreduce_p%d_sum.npy" % P, Tr + Tb,
              "reduce max(%d, %d) + %d*%d, broadcast max(%d, %d) + %d*1" % (C, EN_L, 2 * tr + 1, P - 1, Cb, ENb_L, 2 * tr + 1), tr,
              ramp)


REDUCE_2D_PE = """# 2-D chain reduce and AllReduce (tools/make_wafer_validation.py): over a Q x Q rectangle every row
# reduces east with row_reduce_pipe.pe's pipelined chain (colors 1/2), then the last column reduces
# the row sums south the same way (colors 3/4), so the south-east PE holds the sum of all. With
# `bc_send` (the AllReduce), that PE then broadcasts it on color 5 over one multicast tree (north
# along the last column, west along every row: each router delivers it to its PE and passes it on)
# and every PE keeps it in `sum`.
""" + CHAIN_DECLS + """.param cfirst = 0                # the last column's PEs: its first (py == 0), middle and last
.param cmiddle = 0
.param clast = 0
.param crecv = 0                 # cmiddle or clast
.param csend = 0                 # cfirst or cmiddle
.param cin = 4
.param cout = 3
""" + BCAST_DECLS + """.if $crecv
.dsd from_north fabin f32 color=$cin queue=3 len=$n
.endif
.if $csend
.dsd to_south fabout f32 color=$cout queue=4 len=$n
.endif
""" + BCAST_DSDS + """
.task main local id=10 active
""" + CHAIN_STEPS + """.if $cfirst
  fmovs to_south, sm             # the last column's stream
.endif
.if $cmiddle
  fadds to_south, sm, from_north
.endif
.if $clast
  fadds sm, sm, from_north       # the sum of all
.endif
""" + BCAST_STEPS + """  halt
"""


def reduce_2d(Q, B=256, tr=1, allreduce=False, ramp=False):
    """The 2-D chain reduce (or AllReduce) of B fp32 values over Q x Q PEs (reduce_2d.pe)."""
    routes = chain_routes(Q)  # the rows (each region spans every row)
    for py in range(Q):  # the last column: a chain south, colors 3/4
        if py < Q - 1:
            routes.append({"color": 3 + py % 2, "x": Q - 1, "y": py, "width": 1, "height": 1, "rx": ["RAMP"], "tx": ["S"]})
        if py > 0:
            routes.append({"color": 4 - py % 2, "x": Q - 1, "y": py, "width": 1, "height": 1, "rx": ["N"], "tx": ["RAMP"]})
    if allreduce:  # the broadcast tree (color 5) from the south-east PE
        for py in range(Q):
            last_row = py == Q - 1
            tx = (["N"] if py > 0 else []) + ["W"]
            routes.append({"color": 5, "x": Q - 1, "y": py, "width": 1, "height": 1,
                           "rx": ["RAMP"] if last_row else ["S"], "tx": tx + ([] if last_row else ["RAMP"])})
        if Q > 2:
            routes.append({"color": 5, "x": 1, "y": 0, "width": Q - 2, "height": Q, "rx": ["E"], "tx": ["RAMP", "W"]})
        routes.append({"color": 5, "x": 0, "y": 0, "width": 1, "height": Q, "rx": ["E"], "tx": ["RAMP"]})
    kind = "allreduce" if allreduce else "reduce"
    layout = reduce_layout(Q, B)
    layout["fabric"]["height"] = Q
    rect = layout["rects"][0]
    rect.update({"name": "square", "height": Q, "program": "reduce_2d.pe", "routes": routes})
    rect["params"].update({"cfirst": "(px == width - 1) * (py == 0)",
                           "cmiddle": "(px == width - 1) * (py > 0) * (py < height - 1)",
                           "clast": "(px == width - 1) * (py == height - 1)",
                           "crecv": "(px == width - 1) * (py > 0)",
                           "csend": "(px == width - 1) * (py < height - 1)",
                           "cout": "3 + py % 2", "cin": "4 - py % 2",
                           "bc_send": "(px == width - 1) * (py == height - 1)" if allreduce else 0,
                           "bc_recv": "1 - (px == width - 1) * (py == height - 1)" if allreduce else 0,
                           "val": "py * width + px + 1"})
    lname = "%s_2d_q%d_layout.json" % (kind, Q)
    write(lname, layout)
    total = Q * Q * (Q * Q + 1) / 2.0
    if allreduce:
        expect = [total] * (Q * Q * B)
    else:  # the last column holds its row sums above the total; the rest their zeros
        expect = []
        for py in range(Q):
            for px in range(Q):
                if px < Q - 1:
                    v = 0.0
                elif py < Q - 1:
                    v = float(sum(py * Q + x + 1 for x in range(Q)))
                else:
                    v = total
                expect += [v] * B
    write_npy("%s_2d_q%d_sum.npy" % (kind, Q), (Q, Q, B), expect)
    C, EN_L, Tc = chain_model(Q, B, tr)
    T = 2 * Tc
    parts = "rows max(%d, %d) + %d*%d, last column the same" % (C, EN_L, 2 * tr + 1, Q - 1)
    if allreduce:
        Cb, ENb_L, Tb = bcast_model(B, 2 * (Q - 1), tr, 1 if ramp else tr)
        T += Tb
        parts += ", broadcast max(%d, %d) + %d*1" % (Cb, ENb_L, 2 * tr + 1)
    what = "AllReduce" if allreduce else "reduce"
    model_row("%s_2d_q%d" % (kind, Q), "2-D chain %s of %d fp32 values over %d x %d PEs (every row's chain reduce east, "
              "then the last column's south%s)" % (what, B, Q, Q, ", then a broadcast of the total over one multicast "
                                                   "tree" if allreduce else ""),
              "reduce_2d.pe", lname, "%s_2d_q%d_sum.npy" % (kind, Q), T, parts, tr, ramp)


# The binomial-tree reduce of spcl/spatial-collectives modules/tree.csl, rooted at the row's eastmost
# PE. With r = width - 1 - px (the distance from the root), at level k (k = 0 .. L - 1, L = log2 P)
# every PE whose r has bit k as its lowest set bit sends its partial sum 2^k PEs east, to the PE
# whose r is a multiple of 2^(k+1). A PE that receives at several levels adds each child's vector
# into its own in place, as tree.csl does (`fadds mem, mem, fabin`), the last one fused with its own
# send (`fadds fabout, mem, fabin`); a leaf sends its vector as it is (`mov32`). tree.csl runs on two
# colors whose routes advance by control wavelets; here each level has its own color (1 + k) and
# queue (k), routed only over its pairs' spans (which at one level do not overlap), so no switch
# is needed: the wavelets, the links they share and the order each PE takes them are the same.
def tree_program(L):
    lines = ["# Tree reduce and AllReduce (tools/make_wafer_validation.py): the binomial tree of Luczynski",
             "# et al.'s spcl/spatial-collectives modules/tree.csl over a row, rooted at its eastmost PE; one",
             "# color and input queue per level (make_wafer_validation.py's reduce_tree); the AllReduce then",
             "# broadcasts the sum west on one multicast color, as chain_allreduce.pe does.",
             ".param n = 256", ".param val = 1", ".param leaf = 0          # sends its vector as it is",
             ".param out_color = 1      # 1 + the level it sends at", ".param send = 0",
             ".param bc_send = 0        # the AllReduce: the root broadcasts the sum on color 1 + L,",
             ".param bc_recv = 0        # every other PE keeps it in sum"]
    for k in range(L):
        lines += [".param recv%d = 0" % k, ".param ip%d = 0           # level %d: add into a, in place" % (k, k),
                  ".param fu%d = 0           # level %d: add and send to the parent" % (k, k),
                  ".param rl%d = 0           # level %d: the root's last add, into sum" % (k, k)]
    lines += [".data a f32 $n fill=$val", ".data sum f32 $n fill=0", ".dsd am mem1d a", ".dsd sm mem1d sum"]
    for k in range(L):
        lines += [".if $recv%d" % k, ".dsd from_l%d fabin f32 color=%d queue=%d len=$n" % (k, 1 + k, k), ".endif"]
    lines += [".if $send", ".dsd to_parent fabout f32 color=$out_color queue=0 len=$n", ".endif",
              ".if $bc_send", ".dsd to_bc fabout f32 color=%d queue=1 len=$n" % (1 + L), ".endif",
              ".if $bc_recv", ".dsd from_bc fabin f32 color=%d queue=%d len=$n" % (1 + L, L - 1), ".endif", "",
              ".task main local id=10 active", ".if $leaf", "  fmovs to_parent, am", ".endif"]
    for k in range(L):
        lines += [".if $ip%d" % k, "  fadds am, am, from_l%d" % k, ".endif",
                  ".if $fu%d" % k, "  fadds to_parent, am, from_l%d" % k, ".endif",
                  ".if $rl%d" % k, "  fadds sm, am, from_l%d" % k, ".endif"]
    lines += [".if $bc_send", "  fmovs to_bc, sm                # the AllReduce's broadcast", ".endif",
              ".if $bc_recv", "  fmovs sm, from_bc", ".endif", "  halt", ""]
    return "\n".join(lines)


TREE_LEVELS = 8  # P up to 256, the paper's largest 1-D size


def tree_model(P, B, tr, hop=None):
    """The model read for the tree: C = the root's L adds, each fed by the fabric at one wavelet a
    cycle (L (setup + B)); E = B L P / 2 hops (each level moves P / 2^(k+1) vectors 2^k hops) over
    N = P - 1 links, L = (P - 1) hops the farthest distance; D = log2 P. Returns (C, E/N + L, D, T)."""
    L = int(math.log2(P))
    C = L * (SETUP + B)
    EN_L = math.ceil(B * L * P / (2.0 * (P - 1))) + (P - 1) * (tr if hop is None else hop)
    return C, EN_L, L, max(C, EN_L) + (2 * tr + 1) * L


def bcast_routes(P, color):
    """A broadcast west from the eastmost PE of a row on `color`: each router on the way delivers it
    to its PE and passes it on, the westmost one only delivers (as allreduce_chain's)."""
    return [{"color": color, "x": P - 1, "width": 1, "rx": ["RAMP"], "tx": ["W"]},
            {"color": color, "x": 1, "width": P - 2, "rx": ["E"], "tx": ["RAMP", "W"]},
            {"color": color, "x": 0, "width": 1, "rx": ["E"], "tx": ["RAMP"]}]


def reduce_or_allreduce(kind, algo, P, B, tr, routes, params, program, T, parts, what, ramp=False):
    """Writes the layout, expected sums and scenario of a 1-D `algo` reduce (or, with kind
    "allreduce", the reduce then the sum's broadcast west from the root on color `bc`)."""
    sfx = "" if B == 256 else "_b%d" % B
    name = "%s_%s_p%d%s" % (kind, algo, P, sfx)
    layout = {"schema": "tessera.wafer-layout/1", "fabric": {"width": P, "height": 1},
              "rects": [{"name": "row", "x": 0, "y": 0, "width": P, "height": 1, "program": program,
                         "params": params, "routes": routes}]}
    write(name + "_layout.json", layout)
    total = P * (P + 1) / 2.0
    write_npy(name + "_sum.npy", (1, P, B),
              [total] * (P * B) if kind == "allreduce" else [0.0] * ((P - 1) * B) + [total] * B)
    if kind == "allreduce":
        Cb, ENb_L, Tb = bcast_model(B, P - 1, tr, 1 if ramp else tr)
        T += Tb
        parts = "reduce %s, broadcast max(%d, %d) + %d*1" % (parts, Cb, ENb_L, 2 * tr + 1)
        what = what.replace(" reduce of", " AllReduce of", 1) + ", then the sum's broadcast west to every PE"
    model_row(name, what, program, name + "_layout.json", name + "_sum.npy", T, parts, tr, ramp)


def reduce_tree(P, B=256, tr=1, allreduce=False, ramp=False):
    L = int(math.log2(P))
    assert 2 ** L == P and L <= TREE_LEVELS
    r = "(width - 1 - px)"
    routes = []
    for k in range(L):  # level k: from r = j 2^(k+1) + 2^k to r = j 2^(k+1), 2^k PEs east
        for j in range(P // 2 ** (k + 1)):
            xs = P - 1 - (j * 2 ** (k + 1) + 2 ** k)
            xr = xs + 2 ** k
            routes.append({"color": 1 + k, "x": xs, "width": 1, "rx": ["RAMP"], "tx": ["E"]})
            if xr - xs > 1:
                routes.append({"color": 1 + k, "x": xs + 1, "width": xr - xs - 1, "rx": ["W"], "tx": ["E"]})
            routes.append({"color": 1 + k, "x": xr, "width": 1, "rx": ["W"], "tx": ["RAMP"]})
    params = {"n": B, "val": "px + 1", "leaf": "%s %% 2 == 1" % r, "send": "%s != 0" % r,
              "out_color": "1" + "".join(" + %d * (%s %% %d == %d)" % (k, r, 2 ** (k + 1), 2 ** k) for k in range(1, L))}
    for k in range(L):
        params["recv%d" % k] = "%s %% %d == 0" % (r, 2 ** (k + 1))
        if k < L - 1:
            params["ip%d" % k] = "%s %% %d == 0" % (r, 2 ** (k + 2))
            params["fu%d" % k] = "%s %% %d == %d" % (r, 2 ** (k + 2), 2 ** (k + 1))
        else:
            params["rl%d" % k] = "%s == 0" % r
    if allreduce:
        routes += bcast_routes(P, 1 + TREE_LEVELS)
        params.update({"bc_send": "%s == 0" % r, "bc_recv": "%s != 0" % r})
    C, EN_L, D, T = tree_model(P, B, tr, 1 if ramp else tr)
    reduce_or_allreduce("allreduce" if allreduce else "reduce", "tree", P, B, tr, routes, params, "tree_reduce.pe", T,
                        "C = %d*(%d + %d), E/N + L = %d, D = %d: max(%d, %d) + %d*%d"
                        % (D, SETUP, B, EN_L, D, C, EN_L, 2 * tr + 1, D),
                        "Tree reduce of %d fp32 values over a row of %d PEs (the binomial tree of Luczynski et al.'s "
                        "tree.csl, rooted at the eastmost PE: at level k a PE sends its partial sum 2^k PEs east)"
                        % (B, P), ramp)


# The two-phase reduce of spcl/spatial-collectives modules/two_phase.csl: the row is cut into groups
# of S PEs; each group chain-reduces to its eastmost PE (its head), colors 1/2 as chain_routes; then
# the heads form a chain east, S hops a link, colors 3/4 by group (the PEs between two heads relay
# it). A head adds its group's chain into its vector in place, then adds the chain from the head
# before it and sends the sum on (the first head fuses the two: it has no head before it); the last
# head, the root, adds into `sum`. two_phase.csl has the heads' streams arrive on the group chain's
# color behind a switch; here they have their own colors, so no switch is needed.
TWO_PHASE_PE = """# Two-phase reduce and AllReduce (tools/make_wafer_validation.py): Luczynski et al.'s
# spcl/spatial-collectives modules/two_phase.csl over a row -- chain reduces within groups of S PEs
# to each group's eastmost PE (its head), then a chain over the heads to the row's eastmost PE; the
# AllReduce then broadcasts the sum west on one multicast color, as chain_allreduce.pe does.
""" + CHAIN_DECLS + """.param head_first = 0            # the first group's head: its group's chain on to the next head
.param head_mid = 0              # a head between: its group's chain in place, then the heads' chain on
.param root = 0                  # the last head
.param h_recv = 0                # head_mid or root
.param h_send = 0                # head_first or head_mid
.param h_in = 4
.param h_out = 3
""" + BCAST_DECLS + """.if $h_recv
.dsd from_head fabin f32 color=$h_in queue=3 len=$n
.endif
.if $h_send
.dsd to_head fabout f32 color=$h_out queue=4 len=$n
.endif
""" + BCAST_DSDS + """
.task main local id=10 active
""" + CHAIN_STEPS[:CHAIN_STEPS.index(".if $last")] + """.if $head_first
  fadds to_head, am, from_west   # the group's sum, on to the next head
.endif
.if $h_recv
  fadds am, am, from_west        # the group's sum, in place
.endif
.if $head_mid
  fadds to_head, am, from_head   # add the heads' chain and pass it on
.endif
.if $root
  fadds sm, am, from_head        # the row's sum
.endif
""" + BCAST_STEPS + """  halt
"""


def two_phase_model(P, S, B, tr, hop=None):
    """The model read per phase: the group chains T_chain(S), then the heads' chain of G = P / S
    with S - 1 more hops a link: max(C, B + setup + (G - 1)(S - 1) T_R) + (2 T_R + 1)(G - 1).
    Returns (T_groups, C, E/N + L of the heads' chain, G, T)."""
    G = P // S
    C, EN_L, T1 = chain_model(S, B, tr)
    EN_L2 = B + SETUP + (G - 1) * (S - 1) * (tr if hop is None else hop)
    return T1, C, EN_L2, G, T1 + max(C, EN_L2) + (2 * tr + 1) * (G - 1)


def reduce_two_phase(P, S, B=256, tr=1, allreduce=False, ramp=False):
    G = P // S
    assert G * S == P and S >= 2 and G >= 2
    routes = []
    for px in range(P):
        q, g = px % S, px // S
        if q < S - 1:  # the group chain
            routes.append({"color": 1 + px % 2, "x": px, "width": 1, "rx": ["RAMP"], "tx": ["E"]})
        if q > 0:
            routes.append({"color": 2 - px % 2, "x": px, "width": 1, "rx": ["W"], "tx": ["RAMP"]})
    for g in range(G - 1):  # the heads' chain: head g -> head g + 1 on color 3 + g % 2
        xs, xr = g * S + S - 1, (g + 1) * S + S - 1
        routes.append({"color": 3 + g % 2, "x": xs, "width": 1, "rx": ["RAMP"], "tx": ["E"]})
        routes.append({"color": 3 + g % 2, "x": xs + 1, "width": S - 1, "rx": ["W"], "tx": ["E"]})
        routes.append({"color": 3 + g % 2, "x": xr, "width": 1, "rx": ["W"], "tx": ["RAMP"]})
    q, g = "px %% %d" % S, "px / %d" % S
    params = {"n": B, "val": "px + 1", "first": "%s == 0" % q, "last": "%s == %d" % (q, S - 1),
              "middle": "(%s > 0) * (%s < %d)" % (q, q, S - 1),
              "out_color": "1 + px % 2", "in_color": "2 - px % 2",
              "head_first": "(%s == %d) * (%s == 0)" % (q, S - 1, g),
              "head_mid": "(%s == %d) * (%s > 0) * (%s < %d)" % (q, S - 1, g, g, G - 1),
              "root": "px == width - 1", "h_recv": "(%s == %d) * (%s > 0)" % (q, S - 1, g),
              "h_send": "(%s == %d) * (%s < %d)" % (q, S - 1, g, G - 1), "h_out": "3 + (%s) %% 2" % g, "h_in": "4 - (%s) %% 2" % g}
    if allreduce:
        routes += bcast_routes(P, 5)
        params.update({"bc_send": "px == width - 1", "bc_recv": "px != width - 1"})
    T1, C, EN_L2, G, T = two_phase_model(P, S, B, tr, 1 if ramp else tr)
    reduce_or_allreduce("allreduce" if allreduce else "reduce", "two_phase", P, B, tr, routes, params,
                        "two_phase_reduce.pe", T,
                        "groups T_chain(%d) = %d, heads max(%d, %d) + %d*%d" % (S, T1, C, EN_L2, 2 * tr + 1, G - 1),
                        "Two-phase reduce of %d fp32 values over a row of %d PEs (Luczynski et al.'s two_phase.csl: "
                        "chain reduces within %d groups of %d PEs, then a chain over the groups' heads, %d hops a link)"
                        % (B, P, G, S, S), ramp)

# The star reduce of spcl/spatial-collectives modules/star.csl: every PE sends its vector straight to
# the root on one color, and the root adds them one after another (`fadds mem, mem, fabin`, P - 1
# times, in a loop). Each sender's route takes its own PE first (base position: rx RAMP, tx east) and
# then the senders behind it (position 1: rx west): its fabout has `advance` (CSL's
# `.advance_switch`), so its last wavelet moves the switch on and the farther stream, which waited in
# the router's buffer, follows. star.csl roots the row at its westmost PE; here the root is the
# eastmost one, as for the other reduces, so `sum` is in the same place.
STAR_PE = """# Star reduce and AllReduce (tools/make_wafer_validation.py): Luczynski et al.'s
# spcl/spatial-collectives modules/star.csl over a row, rooted at its eastmost PE -- every other PE
# sends its vector east on color 1 through a switch that passes its own PE's stream first, then the
# farther PEs' (fabout `advance`); the root adds the P - 1 vectors in arrival order. The AllReduce
# then broadcasts the sum west on one multicast color, as chain_allreduce.pe does.
.param n = 256
.param val = 1
.param root = 0                  # the eastmost PE
.param adds = 2                  # the root: vectors after the first (P - 2)
""" + BCAST_DECLS + """.data a f32 $n fill=$val
.data sum f32 $n fill=0
.dsd am mem1d a
.dsd sm mem1d sum
.if $root
.dsd from_west fabin f32 color=1 queue=1 len=$n
.else
.dsd to_root fabout f32 color=1 queue=0 len=$n advance
.endif
""" + BCAST_DSDS + """
.task main local id=10 active
.if $root
  fadds sm, am, from_west        # the nearest PE's vector
  mov r1, $adds
next:
  fadds sm, sm, from_west        # then each farther one's, as it arrives
  loop r1, next
.else
  fmovs to_root, am
.endif
""" + BCAST_STEPS + """  halt
"""


def star_model(P, B, tr, hop=None):
    """The model read for the star: C = the root's P - 1 adds, each fed by the fabric at one wavelet a
    cycle ((P - 1)(setup + B)); E = B P (P - 1) / 2 hops over N = P - 1 links, L = (P - 1) hops the
    farthest distance; D = 1 (every PE sends in one step). Returns (C, E/N + L, T)."""
    C = (P - 1) * (SETUP + B)
    EN_L = math.ceil(B * P / 2.0) + (P - 1) * (tr if hop is None else hop)
    return C, EN_L, max(C, EN_L) + (2 * tr + 1)


def reduce_star(P, B=256, tr=1, allreduce=False):
    assert P >= 4
    routes = [{"color": 1, "x": 0, "width": P - 1, "rx": ["RAMP"], "tx": ["E"], "switch": [{"rx": ["W"]}], "ring": False},
              {"color": 1, "x": P - 1, "width": 1, "rx": ["W"], "tx": ["RAMP"]}]
    params = {"n": B, "val": "px + 1", "root": "px == width - 1", "adds": P - 2}
    if allreduce:
        routes += bcast_routes(P, 5)
        params.update({"bc_send": "px == width - 1", "bc_recv": "px != width - 1"})
    C, EN_L, T = star_model(P, B, tr)
    reduce_or_allreduce("allreduce" if allreduce else "reduce", "star", P, B, tr, routes, params, "star_reduce.pe", T,
                        "C = %d*(%d + %d), E/N + L = %d, D = 1: max(%d, %d) + %d" % (P - 1, SETUP, B, EN_L, C, EN_L, 2 * tr + 1),
                        "Star reduce of %d fp32 values over a row of %d PEs (Luczynski et al.'s star.csl: every PE "
                        "sends straight to the eastmost PE, whose switch-ordered streams it adds one after another)" % (B, P))


# The paper's generated algorithm (spcl/spatial-collectives generate_pre_order_2d.py): a dynamic
# program over (PEs, depth) finds the reduce tree of least energy for each depth budget d, with
# dp[r][d] = min(dp[r][d - 1], min over s of dp[s][d - 1] + dp[r - s][d] + r - s) (a subtree of r
# PEs sends a child subtree of s PEs, r - s hops away, one round deeper), and picks the d that
# minimises the model B dp[P][d] / (P - 1) + P - 1 + d (2 T_R + 1), with the generator's T_R = 2 on
# every row (GEN_TR; a row's own T_R enters only its reading). The tree is laid out in
# pre-order along the row (a PE's subtree is the run of PEs after it), built as the generator does
# it: children carved from the far end of the subtree, then taken nearest first. The generator's CSL
# (pre_order_runtime_base.csl) uses two colors, alternating by level, reconfigured at run time;
# here each parent's children send on a color of their own group, the groups' spans (parent to its
# farthest child) colored greedily so no two that share a router share a color, and -- as in the
# CSL -- a child's route takes its own PE first and, after its fabout's last wavelet (`advance`),
# the siblings behind it. Rooted at the eastmost PE (pre-order id 0), as the other reduces.
AUTO_PE = """# The generated reduce of Luczynski et al. (tools/make_wafer_validation.py, reduce_auto): a tree
# found by the paper's dynamic program (spcl/spatial-collectives generate_pre_order_2d.py), laid out
# in pre-order along a row and rooted at its eastmost PE. A PE adds its children's vectors in
# arrival order (nearest child first) into its own, the last add fused with its send to its parent.
# In 2-D (col) the root column's PEs then reduce their rows' sums south over the same kind of tree.
# The AllReduce then broadcasts the sum west on one multicast color, as chain_allreduce.pe does.
.param n = 256
.param val = 1
.param kids = 0                  # children: the vectors it adds
.param more = 0                  # kids - 1: the adds before the last
.param send = 1                  # 0: the root
.param in_color = 1              # its children's group color
.param out_color = 1             # its own group's color (towards its parent)
.param col = 0                   # 2-D: the root column, whose PEs then reduce the row sums south
.param ckids = 0                 # ... their place in the column's tree, as above
.param cmore = 0
.param csend = 1
.param cin_color = 1
.param cout_color = 1
""" + BCAST_DECLS + """.data a f32 $n fill=$val
.data sum f32 $n fill=0
.dsd am mem1d a
.dsd sm mem1d sum
.if $kids
.dsd from_kids fabin f32 color=$in_color queue=1 len=$n
.endif
.if $send
.dsd to_parent fabout f32 color=$out_color queue=0 len=$n advance
.endif
.if $col
.if $ckids
.dsd from_ckids fabin f32 color=$cin_color queue=2 len=$n
.endif
.if $csend
.dsd to_cparent fabout f32 color=$cout_color queue=1 len=$n advance
.endif
.endif
""" + BCAST_DSDS + """
.task main local id=10 active
.if $more
  mov r1, $more
next:
  fadds am, am, from_kids        # a child's vector, in place
  loop r1, next
.endif
.if $kids
.if $send
  fadds to_parent, am, from_kids # the last child's: add and send on
.else
.if $col
  fadds am, am, from_kids        # the row's sum, in place: on to the column's tree
.else
  fadds sm, am, from_kids        # the root: the row's sum
.endif
.endif
.else
  fmovs to_parent, am            # a leaf
.endif
.if $col
.if $cmore
  mov r2, $cmore
cnext:
  fadds am, am, from_ckids
  loop r2, cnext
.endif
.if $ckids
.if $csend
  fadds to_cparent, am, from_ckids
.else
  fadds sm, am, from_ckids       # the root of all
.endif
.else
  fmovs to_cparent, am
.endif
.endif
""" + BCAST_STEPS + """  halt
"""


GEN_TR = 2  # generate_pre_order_2d.py's `tr = 2`: the T_R its model picks the tree with, on every row


def auto_tree(P, B, tr=GEN_TR):
    """The generator's tree: (depth d, energy dp[P][d] in vector hops, children per pre-order id)."""
    INF = float("inf")
    dp = [[0.0] * (P + 1) for _ in range(2)] + [[INF] * (P + 1) for _ in range(P - 1)]
    for r in range(2, P + 1):
        for d in range(1, P + 1):
            v = dp[r][d - 1]
            for sz in range(1, r):
                c = dp[sz][d - 1] + dp[r - sz][d] + r - sz
                if c < v:
                    v = c
            dp[r][d] = v
            if d >= r - 1:  # (a chain fits: no deeper budget does better)
                for d2 in range(d + 1, P + 1):
                    dp[r][d2] = v
                break
    obj = [B * dp[P][d] / max(1, P - 1) + P - 1 + d * (2 * tr + 1) for d in range(P + 1)]
    d0 = min(range(P + 1), key=lambda d: (obj[d], d))
    children = [[] for _ in range(P)]
    queue = [(0, P, d0)]  # (id, subtree size, depth budget), breadth first as the generator
    while queue:
        pid, size, depth = queue.pop(0)
        kids = []
        while size > 1:
            for sz in range(1, size):
                if dp[size][depth] == dp[sz][depth - 1] + dp[size - sz][depth] + size - sz:
                    kids.append(pid + size - sz)
                    queue.append((pid + size - sz, sz, depth - 1))
                    size -= sz
                    break
        children[pid] = sorted(kids)
    return d0, int(dp[P][d0]), children


def auto_model(P, B, tr, d, energy, children, hop=None):
    """The model read for the generated tree: C = the most children a PE adds, each fed by the fabric
    at one wavelet a cycle; E = B x the tree's hops over N = P - 1 links; L = (P - 1) hops; D = the
    depth d. Returns (C, E/N + L, T)."""
    C = max(len(k) for k in children) * (SETUP + B)
    EN_L = math.ceil(B * energy / (P - 1.0)) + (P - 1) * (tr if hop is None else hop)
    return C, EN_L, max(C, EN_L) + (2 * tr + 1) * d


def auto_groups(P, children, pos, neg, base=0):
    """A generated tree's groups (a parent and its children, over the span [parent, farthest child])
    colored greedily from base + 1, so no two groups that share a router share a color, and every PE's
    routes by pre-order id (the tree grows towards `pos`, its streams flow towards `neg`). Returns
    (the group color by parent id, the colors used, routes by id)."""
    spans = sorted((p, max(children[p])) for p in range(P) if children[p])
    color, last_end = {}, []
    for lo, hi in spans:
        for k, end in enumerate(last_end):
            if end < lo:
                last_end[k] = hi
                color[lo] = base + 1 + k
                break
        else:
            last_end.append(hi)
            color[lo] = base + len(last_end)
    routes = {i: [] for i in range(P)}
    for p, hi in spans:
        c, kids = color[p], children[p]
        routes[p].append({"color": c, "rx": [pos], "tx": ["RAMP"]})
        for i in range(p + 1, hi + 1):
            if i in kids:
                r = {"color": c, "rx": ["RAMP"], "tx": [neg]}
                if i != kids[-1]:  # then the siblings behind it
                    r.update({"switch": [{"rx": [pos]}], "ring": False})
                routes[i].append(r)
            else:
                routes[i].append({"color": c, "rx": [pos], "tx": [neg]})
    return color, len(last_end), routes


def auto_params(i, children, parent, color, prefix=""):
    """A PE's parameters for its place in a generated tree (`prefix` c: the 2-D column stage's)."""
    k = len(children[i])
    params = {prefix + "kids": k, prefix + "more": max(0, k - 1), prefix + "send": int(i != 0)}
    if k:
        params[prefix + "in_color"] = color[i]
    if i != 0:
        params[prefix + "out_color"] = color[parent[i]]
    return params


def reduce_auto(P, B=256, tr=1, ramp=False, allreduce=False):
    d, energy, children = auto_tree(P, B)
    parent = {c: p for p in range(P) for c in children[p]}
    # by pre-order id; px = P - 1 - id (the tree grows west, its streams flow east)
    color, ncolors, routes = auto_groups(P, children, "W", "E")
    assert ncolors + allreduce <= 24, "the generated tree needs %d colors" % (ncolors + allreduce)
    bc = ncolors + 1  # the AllReduce's broadcast color, beside the groups'
    if allreduce:
        for i, r in enumerate(bcast_routes(P, bc)):  # (by px: the eastmost, the middle, the westmost)
            for px in range(r["x"], r["x"] + r["width"]):
                routes[P - 1 - px].append({k: v for k, v in r.items() if k not in ("x", "width")})
    rects = []
    for i in range(P):
        params = {"n": B, "val": P - i}
        params.update(auto_params(i, children, parent, color))
        if allreduce:
            params.update({"bc_send": int(i == 0), "bc_recv": int(i != 0), "bc_color": bc})
        rects.append({"name": "pe%d" % i, "x": P - 1 - i, "y": 0, "width": 1, "height": 1, "program": "auto_reduce.pe",
                      "params": params, "routes": routes[i]})
    sfx = "" if B == 256 else "_b%d" % B
    name = "%s_auto_p%d%s" % ("allreduce" if allreduce else "reduce", P, sfx)
    lname = name + ("" if tr == 1 else "_%s%d" % ("ramp" if ramp else "tr", tr)) + "_layout.json"  # (its own tree)
    write(lname, {"schema": "tessera.wafer-layout/1", "fabric": {"width": P, "height": 1},
                                  "rects": sorted(rects, key=lambda r: r["x"])})
    total = P * (P + 1) / 2.0
    write_npy(name + "_sum.npy", (1, P, B), [total] * (P * B) if allreduce else [0.0] * ((P - 1) * B) + [total] * B)
    C, EN_L, T = auto_model(P, B, tr, d, energy, children, 1 if ramp else tr)
    kmax = max(len(k) for k in children)
    parts = "C = %d*(%d + %d), E/N + L = %d, D = %d: max(%d, %d) + %d*%d" % (kmax, SETUP, B, EN_L, d, C, EN_L, 2 * tr + 1, d)
    what = ("Generated reduce of %d fp32 values over a row of %d PEs (the tree the paper's dynamic program picks "
            "with its T_R = %d: depth %d, %d vector hops, at most %d children a PE, %d colors; laid out in pre-order, rooted at the "
            "eastmost PE)" % (B, P, GEN_TR, d, energy, kmax, ncolors))
    if allreduce:
        Cb, ENb_L, Tb = bcast_model(B, P - 1, tr, 1 if ramp else tr)
        T += Tb
        parts = "reduce %s, broadcast max(%d, %d) + %d*1" % (parts, Cb, ENb_L, 2 * tr + 1)
        what = what.replace(" reduce of", " AllReduce of", 1) + ", then the sum's broadcast west to every PE"
    model_row(name, what, "auto_reduce.pe", lname, name + "_sum.npy", T, parts, tr, ramp)


def reduce_auto_2d(Q, B=256, tr=1):
    """The generated reduce over Q x Q PEs: every row reduces east over the tree the dynamic program
    picks for Q PEs, then the root (east) column reduces the row sums south over the same tree, as
    the paper's 2-D generated reduce runs it (code_2d_pre_order_test.csl: the 1-D runtime along x,
    then along y). Against the model per phase: T = 2 T_auto(Q)."""
    d, energy, children = auto_tree(Q, B)
    parent = {c: p for p in range(Q) for c in children[p]}
    color, nrow, rroutes = auto_groups(Q, children, "W", "E")
    ccolor, ncol, croutes = auto_groups(Q, children, "N", "S", base=nrow)
    rects = []
    for x in range(Q - 1):  # every row's non-root PEs of one column share a rectangle
        i = Q - 1 - x
        params = {"n": B, "val": "py * %d + %d" % (Q, x + 1)}
        params.update(auto_params(i, children, parent, color))
        rects.append({"name": "col%d" % x, "x": x, "y": 0, "width": 1, "height": Q, "program": "auto_reduce.pe",
                      "params": params, "routes": rroutes[i]})
    for y in range(Q):  # the root column, PE by PE: the row trees' roots, then the column's tree
        j = Q - 1 - y
        params = {"n": B, "val": y * Q + Q, "col": 1}
        params.update(auto_params(0, children, parent, color))
        params.update(auto_params(j, children, parent, ccolor, "c"))
        rects.append({"name": "root%d" % y, "x": Q - 1, "y": y, "width": 1, "height": 1, "program": "auto_reduce.pe",
                      "params": params, "routes": rroutes[0] + croutes[j]})
    name = "reduce_auto_2d_q%d%s" % (Q, "" if B == 256 else "_b%d" % B)
    write(name + "_layout.json", {"schema": "tessera.wafer-layout/1", "fabric": {"width": Q, "height": Q},
                                  "rects": rects})
    total = Q * Q * (Q * Q + 1) / 2.0
    write_npy(name + "_sum.npy", (Q, Q, B), [0.0] * ((Q * Q - 1) * B) + [total] * B)
    C, EN_L, T1 = auto_model(Q, B, tr, d, energy, children)
    kmax = max(len(k) for k in children)
    model_row(name, "2-D generated reduce of %d fp32 values over %d x %d PEs (every row's tree east, then the east "
                    "column's south: the tree the paper's dynamic program picks for %d PEs with its T_R = 2, depth %d, %d vector hops, "
                    "%d + %d colors)" % (B, Q, Q, Q, d, energy, nrow, ncol),
              "auto_reduce.pe", name + "_layout.json", name + "_sum.npy", 2 * T1,
              "rows C = %d*(%d + %d), E/N + L = %d, D = %d: max(%d, %d) + %d*%d, east column the same"
              % (kmax, SETUP, B, EN_L, d, C, EN_L, 2 * tr + 1, d), tr)


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


SRAM_BPC = 21.2  # wafer.md Whole wafer: WSE-3 21 PB/s over 900,000 cores, at 1.1 GHz (WaferLLM's clock): bytes per cycle


def rate_variant(name, sfx, params, note):
    """`name`.json again as `name``sfx`.json, with target params: the same program, data and published row."""
    with open(os.path.join(HERE, name + ".json")) as f:
        scen = json.load(f)
    scen["name"] += sfx.replace("_", "-")
    scen["description"] = scen["description"].replace(" Written by", " " + note + " Written by")
    scen["target"]["params"] = params
    write(name + sfx + ".json", scen)


GEMM_FLOPS, GEMM_N, GEMM_SIDE = 349.0e12, 33000, 750  # wafer.md "More rows": Matsuzaki, Miyajima et al.


def summa_program(P, b):
    """summa.pe for a P x P grid of b x b fp32 blocks (colors: A of step k on 1 + k, B on 1 + P + k)."""
    L = ["# SUMMA C = A B on a %d x %d grid of PEs, %d x %d fp32 blocks (tools/make_wafer_validation.py)." % (P, P, b, b),
         "# A, B, C are column-major blocks: A[i + p*b] = A_blk[i][p]. Step k: the PEs of column k send their",
         "# A block along their row on color 1 + k (the route multicasts it, to the sender too), every PE",
         "# stores it in Ab; the PEs of row k send their B block down their column on color 1 + P + k,",
         "# whose wavelets fire task on_b<k>: C[:, j] += Ab[:, p] * wv for wavelet j*b + p. The data tasks",
         "# start blocked, step<k> unblocks on_b<k> once Ab holds A_k; the last B wavelet starts step k + 1.",
         "# Queues: A in 1/2, B in 3/4 (alternating steps, so overlapping steps never share one), sends",
         "# on output queues 0 (A) and 5 (B).",
         "# acol<k> / brow<k>: 1 on the PEs of column k / row k (the layout sets them from px, py).",
         *[".param acol%d = 0\n.param brow%d = 0" % (k, k) for k in range(P)],
         ".data A f32 %d fill=0" % (b * b), ".data B f32 %d fill=0" % (b * b),
         ".data C f32 %d fill=0" % (b * b), ".data Ab f32 %d fill=0" % (b * b),
         ".dsd am mem1d A", ".dsd bm mem1d B", ".dsd abm mem1d Ab",
         ".dsd acol mem1d Ab len=%d" % b, ".dsd ccol mem1d C len=%d" % b]
    for k in range(P):
        L += [".if $acol%d" % k, ".dsd aout%d fabout f32 color=%d queue=0 len=%d" % (k, 1 + k, b * b), ".endif",
              ".dsd ain%d fabin f32 color=%d queue=%d len=%d" % (k, 1 + k, 1 + k % 2, b * b),
              ".if $brow%d" % k, ".dsd bout%d fabout f32 color=%d queue=5 len=%d" % (k, 1 + P + k, b * b), ".endif"]
    L.append("")
    for k in range(P):
        L += [".task step%d local id=%d%s" % (k, 40 + k, " active" if k == 0 else ""),
              ".if $acol%d" % k, "  fmovs aout%d, am async" % k, ".endif",
              "  fmovs abm, ain%d" % k,
              "  unblock on_b%d" % k,
              ".if $brow%d" % k, "  fmovs bout%d, bm async" % k, ".endif",
              "  ret",
              ".task on_b%d data id=%d color=%d queue=%d blocked" % (k, 1 + P + k, 1 + P + k, 3 + k % 2),
              "  mul r1, r0, %d" % b,
              "  dsd_off acol, r1",
              "  dsd_off ccol, r3",
              "  fmacs ccol, ccol, acol, wv",
              "  add r0, r0, 1",
              "  sub r2, r0, %d" % b,
              "  bnz r2, more%d" % k,
              "  mov r0, 0",
              "  add r3, r3, %d" % b,
              "  sub r2, r3, %d" % (b * b),
              "  bnz r2, more%d" % k,
              "  mov r3, 0",
              "  activate %s" % ("step%d" % (k + 1) if k + 1 < P else "fin"),
              "more%d:" % k,
              "  ret"]
    L += [".task fin local id=60", "  halt", ""]
    return "\n".join(L)


def summa_routes(P):
    routes = []
    for k in range(P):
        for x in range(P):  # A of step k along the rows, from column k
            ends = (["W"] if x > 0 else []), (["E"] if x < P - 1 else [])
            rx = ["RAMP"] if x == k else (["W"] if x > k else ["E"])
            tx = ["RAMP"] + (ends[0] + ends[1] if x == k else (ends[1] if x > k else ends[0]))
            routes.append({"color": 1 + k, "x": x, "y": 0, "width": 1, "height": P, "rx": rx, "tx": tx})
        for y in range(P):  # B of step k down the columns, from row k
            ends = (["N"] if y > 0 else []), (["S"] if y < P - 1 else [])
            rx = ["RAMP"] if y == k else (["N"] if y > k else ["S"])
            tx = ["RAMP"] + (ends[0] + ends[1] if y == k else (ends[1] if y > k else ends[0]))
            routes.append({"color": 1 + P + k, "x": 0, "y": y, "width": P, "height": 1, "rx": rx, "tx": tx})
    return routes


def gemm_summa(P, b=44, seed=1, fmacs_interval=1):
    """The SUMMA GEMM scenario on P x P PEs; inputs and C in fp64 by plain Python. fmacs_interval 2:
    the same at 3P's measured fmacs rate (0.5 per cycle), reusing the P x P files."""
    import random
    rnd = random.Random(seed)
    N = P * b
    A = [[rnd.uniform(-1, 1) for _ in range(N)] for _ in range(N)]
    B = [[rnd.uniform(-1, 1) for _ in range(N)] for _ in range(N)]
    Bt = [list(col) for col in zip(*B)]
    C = [[sum(a * c for a, c in zip(A[i], Bt[j])) for j in range(N)] for i in range(N)]

    def blocks(M):  # [P (row), P (col), b*b], each block column-major
        out = []
        for y in range(P):
            for x in range(P):
                out += [M[y * b + i][x * b + j] for j in range(b) for i in range(b)]
        return out
    name = "gemm_summa_p%d" % P
    if fmacs_interval != 1:
        scen = json.load(open(os.path.join(HERE, name + ".json")))
        scen["name"] += "-fmacs%d" % fmacs_interval
        scen["description"] = scen["description"].replace(
            " Written by", " Here with simd.fmacs_interval %d: fmacs at 3P's measured 0.5 per cycle (WSE-3 silicon and "
            "simulator) instead of the SDK width of 1. Written by" % fmacs_interval)
        scen["target"]["params"] = {"simd.fmacs_interval": fmacs_interval}
        write(name + "_fmacs%d.json" % fmacs_interval, scen)
        return
    write_text("summa_p%d.pe" % P, summa_program(P, b))
    write(name + "_layout.json", {
        "schema": "tessera.wafer-layout/1", "fabric": {"width": P, "height": P},
        "rects": [{"name": "grid", "x": 0, "y": 0, "width": P, "height": P, "program": "summa_p%d.pe" % P,
                   "params": dict([("acol%d" % k, "px == %d" % k) for k in range(P)] +
                                 [("brow%d" % k, "py == %d" % k) for k in range(P)]), "routes": summa_routes(P)}]})
    for nm, M in (("A", A), ("B", B), ("C", C)):
        write_npy("%s_%s.npy" % (name, nm), (P, P, b * b), blocks(M))
    per_pe = GEMM_FLOPS / GEMM_SIDE ** 2
    T = 2.0 * N ** 3 / (P * P * per_pe)
    write(name + ".json", {
        "schema": "tessera.scenario/1",
        "name": "wafer-validation-" + name.replace("_", "-"),
        "description": ("C[%d, %d] = A B in fp32 on %d x %d PEs of a WSE-2, %d x %d blocks per PE (the block of the "
                        "33,000 x 33,000 GEMM on 750 x 750 PEs), by SUMMA (summa_p%d.pe: A panels multicast along the "
                        "rows, B panels down the columns, one fmacs per B element), against that GEMM's measured "
                        "349.0 TFLOP/s per PE (620.4 MFLOP/s) carried to this grid by its reported weak-scaling "
                        "efficiency of 1.00: %.0f cycles. Written by tools/make_wafer_validation.py."
                        % (N, N, P, P, b, b, P, T * CLOCK)),
        "target": {"kind": "wafer", "preset": "wse2"},
        "model": {"layout": name + "_layout.json"},
        "inputs": {"A": {"file": "data/%s_A.npy" % name}, "B": {"file": "data/%s_B.npy" % name}},
        "expect": {"outputs": {"C": {"file": "data/%s_C.npy" % name, "rtol": 1e-5, "atol": 1e-4}},
                   "reference_latency": {
            "value": "%.4fus" % (T * 1e6),
            "source": "wafer.md More rows: Matsuzaki, Miyajima et al. (SC24 workshop; IPSJ JIP 34:132), 349.0 TFLOP/s "
                      "on 33,000^2 fp32 over 750 x 750 PEs = 620.4 MFLOP/s per PE at 44 x 44 blocks, weak-scaling "
                      "efficiency 1.00: 2 * %d^3 / (%d PEs * 620.4e6) = %.2f us" % (N, P * P, T * 1e6)}},
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
    write_text("chain_allreduce.pe", CHAIN_ALLREDUCE_PE)
    for P in (4, 16, 64, 256):
        allreduce_chain(P)
    for P in (64, 256):
        allreduce_chain(P, tr=2)
    write_text("reduce_2d.pe", REDUCE_2D_PE)
    for allreduce in (False, True):
        for Q in (2, 4, 8, 16):
            reduce_2d(Q, allreduce=allreduce)
        reduce_2d(16, tr=2, allreduce=allreduce)
    write_text("tree_reduce.pe", tree_program(TREE_LEVELS))
    for P in (4, 16, 64, 256):
        reduce_tree(P)
    reduce_tree(256, tr=2)
    write_text("two_phase_reduce.pe", TWO_PHASE_PE)
    for P, S in ((4, 2), (16, 4), (64, 8), (256, 16)):
        reduce_two_phase(P, S)
    reduce_two_phase(256, 16, tr=2)
    # Short vectors, where the paper finds the tree ahead of the chain (16 values over 256 PEs).
    reduce_chain(256, B=16)
    reduce_tree(256, B=16)
    reduce_two_phase(256, 16, B=16)
    for P, S in ((16, 4), (256, 16)):  # the AllReduces: the reduce, then the sum's broadcast
        reduce_tree(P, allreduce=True)
        reduce_two_phase(P, S, allreduce=True)
    reduce_tree(256, tr=2, allreduce=True)
    reduce_two_phase(256, 16, tr=2, allreduce=True)
    # The star (star.csl), whose senders' switches advance on their last wavelet (fabout `advance`).
    write_text("star_reduce.pe", STAR_PE)
    for allreduce in (False, True):
        for P in (4, 16, 64, 256):
            reduce_star(P, allreduce=allreduce)
    reduce_star(256, B=16)
    # The paper's generated algorithm: the tree its dynamic program picks per (P, B, T_R).
    write_text("auto_reduce.pe", AUTO_PE)
    for P in (4, 16, 64, 256):
        reduce_auto(P)
    reduce_auto(256, B=16)
    for P in (64, 256):
        reduce_auto(P, tr=2, ramp=True)
    for P in (16, 256):
        reduce_auto(P, allreduce=True)
    for Q in (4, 8, 16):
        reduce_auto_2d(Q)
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
    # The T_R = 2 rows again with the paper's T_R as the PE-router latency (router.ramp_latency 2, hops of 1 cycle).
    for P in (64, 256):
        reduce_chain(P, tr=2, ramp=True)
        allreduce_chain(P, tr=2, ramp=True)
    for allreduce in (False, True):
        reduce_2d(16, tr=2, allreduce=allreduce, ramp=True)
        reduce_tree(256, tr=2, allreduce=allreduce, ramp=True)
        reduce_two_phase(256, 16, tr=2, allreduce=allreduce, ramp=True)
    # The same rows under the published memory bandwidth per PE (pe.sram_bytes_per_cycle), and the fmacs one at 3P's
    # measured 0.5 per cycle (simd.fmacs_interval 2): mechanisms from public figures, off in the presets.
    bw_note = ("Here with pe.sram_bytes_per_cycle %.1f: the memory bandwidth per PE of wafer.md Whole wafer (WSE-3: 21 PB/s "
               "over 900,000 cores) at 1.1 GHz, a cap on the bytes the op's memory operands move per cycle." % SRAM_BPC)
    for n in ("rate_copy16_wse3", "rate_copy32_wse3", "rate_fma16_wse3"):
        rate_variant(n, "_sram", {"pe.sram_bytes_per_cycle": SRAM_BPC}, bw_note)
    rate_variant("rate_fma32_wse3", "_fmacs2", {"simd.fmacs_interval": 2},
                 "Here with simd.fmacs_interval 2: fmacs at 3P's measured 0.5 per cycle instead of the SDK width of 1.")
    # The GEMM at reduced sizes (the full 750 x 750 run needs the simulation-speed issue).
    for P in (4, 8):
        gemm_summa(P)
    gemm_summa(8, fmacs_interval=2)
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
