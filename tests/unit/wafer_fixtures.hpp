#pragma once
// Small wafer programs and layouts the fabric tests share (test_wafer_fabric.cpp,
// test_wafer_stripes.cpp).
#include <string>

namespace tessera::wafer::fixtures {

// Sends n fp32 values (1.5) on `color` from its PE.
inline const char* const kSend = R"(
.param n = 16
.param color = 1
.data x f32 $n fill=1.5
.dsd xm mem1d x
.dsd out fabout f32 color=$color queue=2 len=$n
.task main local id=8 active
  fmovs out, xm
  halt
)";

// Receives n fp32 values on color 1 into y (an async move), then halts.
inline const char* const kRecv = R"(
.param n = 16
.data y f32 $n fill=0
.dsd ym mem1d y
.dsd in fabin f32 color=1 queue=1 len=$n
.task main local id=8 active
  fmovs ym, in async activate=done
  ret
.task done local id=9
  halt
)";

// The star reduce's sender (spcl/spatial-collectives modules/star.csl): n fp32 values of `val` on
// color 1 from a fabout with `advance`, so its last wavelet moves its router's switch on to the
// senders behind it. An fmacs makes them (x * 1.0 + 0), so simd.fmacs_interval sets its rate.
inline const char* const kStarSend = R"(
.param n = 16
.param val = 1
.data x f32 $n fill=$val
.data z f32 $n fill=0
.dsd xm mem1d x
.dsd zm mem1d z
.dsd out fabout f32 color=1 queue=2 len=$n advance
.task main local id=8 active
  fmacs out, zm, xm, 1.0
  halt
)";

// The star's root here: takes n values of color 1 into y in arrival order, then halts.
inline const char* const kStarRoot = R"(
.param n = 16
.data y f32 $n fill=0
.dsd ym mem1d y
.dsd in fabin f32 color=1 queue=1 len=$n
.task main local id=8 active
  fmovs ym, in
  halt
)";

// A 2x2 ring: PE (0,0) injects 64 values of color 1, which go E, S, W, N around routers that never
// deliver them to a PE -- the ring fills up and nothing moves: a deadlock (program send.pe = kSend).
inline const std::string kRingLayout = R"({"fabric": {"width": 2, "height": 2}, "rects": [
    {"name": "s", "x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe", "params": {"n": 64},
     "routes": [{"color": 1, "rx": ["RAMP", "S"], "tx": ["E"]}]},
    {"name": "ne", "x": 1, "y": 0, "width": 1, "height": 1, "routes": [{"color": 1, "rx": ["W"], "tx": ["S"]}]},
    {"name": "bottom", "x": 0, "y": 1, "width": 2, "height": 1, "routes": [
      {"color": 1, "x": 1, "width": 1, "rx": ["N"], "tx": ["W"]},
      {"color": 1, "x": 0, "width": 1, "rx": ["E"], "tx": ["N"]}]}]})";

}  // namespace tessera::wafer::fixtures
