// The wafer fabric model (models/wafer/fabric.hpp; semantics and timing in docs/wafer-model.md).
// Timing contracts write the expected cycle counts from the documented formulas here, not from
// the model: a DSD op takes dsd.setup_cycles + ceil(len / width); a wavelet pushed by a DSD op
// element processed in cycle p is in the router's RAMP input at p + 1, crosses each router-router
// link in router.hop_latency cycles and is readable in the receiving PE's input queue one cycle
// after the last router hands it over: p + 1 + N * hop_latency + 1 for N links.
// One elaboration (one Fabric) per TEST_CASE: each test case is its own ctest process.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <systemc>

#include "isa/numeric.hpp"
#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/fabric.hpp"

using namespace tessera;
using namespace tessera::wafer;
using Catch::Matchers::Contains;

namespace {

const std::string kRoot = TESSERA_SOURCE_DIR;

// Writes `files` (name -> text) into a fresh directory and loads `layout` from it.
LoadedLayout load(const std::map<std::string, std::string>& files, const std::string& layout, const WaferConfig& c) {
  // Same scratch-directory convention as test_traces / test_tensor_npy (TMPDIR-aware, per process).
  const auto d = std::filesystem::temp_directory_path() / ("tessera_wafer_fabric_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  const std::string dir = d.string();
  for (const auto& [name, text] : files) std::ofstream(dir + "/" + name) << text;
  LoadedLayout l = load_layout_text(layout, dir + "/layout.json", dir, c);  // reads the programs now
  std::filesystem::remove_all(dir);
  return l;
}

struct Run {
  WaferConfig cfg;
  LoadedLayout layout;
  std::unique_ptr<Fabric> fab;
  Run(WaferConfig c, LoadedLayout l, FabricOptions opt = {}) : cfg(std::move(c)), layout(std::move(l)) {
    models::set_fs_resolution();
    opt.record = true;
    fab = std::make_unique<Fabric>("fabric", cfg, opt);
    fab->load(layout);
  }
  void go() {
    fab->start();
    sc_core::sc_start();
    REQUIRE(fab->finished());
  }
};

std::vector<DeliveryRecord> deliveries_at(const Fabric& f, int x, int y) {
  std::vector<DeliveryRecord> out;
  for (const auto& d : f.deliveries())
    if (d.x == x && d.y == y) out.push_back(d);
  return out;
}

const char* kSend = R"(
.param n = 16
.data x f32 $n fill=1.5
.dsd xm mem1d x
.dsd out fabout f32 color=1 queue=2 len=$n
.task main local id=8 active
  fmovs out, xm
  halt
)";

const char* kRecv = R"(
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

// A row: sender at x = 0, receivers at `receivers` (x), routing-only PEs between; color 1 east.
std::string row_layout(int width, int n, const std::vector<int>& receivers) {
  std::string s = R"({"fabric": {"width": )" + std::to_string(width) + R"(, "height": 1}, "rects": [)";
  s += R"({"name": "s", "x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe", "params": {"n": )" + std::to_string(n) +
       R"(}, "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}]})";
  const int last = receivers.back();
  for (int x = 1; x <= last; ++x) {
    const bool rcv = std::find(receivers.begin(), receivers.end(), x) != receivers.end();
    std::string tx = x == last ? R"(["RAMP"])" : rcv ? R"(["E", "RAMP"])" : R"(["E"])";
    s += R"(, {"name": "p)" + std::to_string(x) + R"(", "x": )" + std::to_string(x) + R"(, "y": 0, "width": 1, "height": 1)";
    if (rcv) s += R"(, "program": "recv.pe", "params": {"n": )" + std::to_string(n) + "}";
    s += R"(, "routes": [{"color": 1, "rx": ["W"], "tx": )" + tx + "}]}";
  }
  return s + "]}";
}

// B wavelets over N links: first readable at setup + 1 + N * hop + 1, then one per cycle.
void hop_contract(int N, int B, int64_t hop) {
  WaferConfig c = preset_config("wse2");
  c.hop_latency = hop;
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(N + 1, B, {N}), c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  const auto d = deliveries_at(*r.fab, N, 0);
  REQUIRE(d.size() == static_cast<size_t>(B));
  const int64_t first = c.setup_cycles + 1 + N * hop + 1;
  for (int i = 0; i < B; ++i) CHECK(d[static_cast<size_t>(i)].cycle == first + i);
  CHECK(d.back().cycle == first + B - 1);
  for (int x = 0; x < N; ++x) CHECK(r.fab->link_wavelets(x, 0, Dir::E) == B);
  for (float v : r.fab->read_array(N, 0, "y")) CHECK(v == 1.5f);
  CHECK(r.fab->halted(0, 0));
  CHECK(r.fab->halted(N, 0));
  CHECK(r.fab->stats().wavelet_hops == int64_t{N} * B);
}

// One DSD instruction on one PE: done exactly setup + ceil(len / width) cycles after it issues
// at cycle 0; the following halt ends the PE one cycle later.
void op_contract(const std::string& preset, const std::string& decls, const std::string& instr, int64_t expect_cycles) {
  const WaferConfig c = preset_config(preset);
  const std::string prog = decls + "\n.task main local id=8 active\n  " + instr + "\n  halt\n";
  const std::string layout =
      R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1, "program": "op.pe"}]})";
  Run r(c, load({{"op.pe", prog}}, layout, c));
  r.go();
  INFO(instr);
  REQUIRE_FALSE(r.fab->error());
  REQUIRE(r.fab->op_records().size() == 1);
  const OpRecord& o = r.fab->op_records()[0];
  CHECK(o.start == 0);
  CHECK(o.end == expect_cycles);
  CHECK(r.fab->halt_cycle(0, 0) == expect_cycles + 1);
  CHECK(r.fab->busy_cycles(0, 0) == expect_cycles + 1);
}

}  // namespace

TEST_CASE("wafer-fabric: 16 wavelets over 6 hops arrive from setup + 6 + 2 one per cycle (hop latency 1)", "[wafer-fabric]") {
  hop_contract(6, 16, 1);
}

TEST_CASE("wafer-fabric: 24 wavelets over 9 hops arrive from setup + 9 x 2 + 2 one per cycle (hop latency 2)", "[wafer-fabric]") {
  hop_contract(9, 24, 2);
}

TEST_CASE("wafer-fabric: fadds len 64 fp32 stride 1 on wse2 takes 16 + 64/2 cycles", "[wafer-fabric]") {
  op_contract("wse2", ".data a f32 64\n.data b f32 64\n.dsd am mem1d a\n.dsd bm mem1d b", "fadds am, am, bm", 16 + 32);
}

TEST_CASE("wafer-fabric: faddh len 64 fp16 stride 1 on wse2 takes 16 + 64/4 cycles", "[wafer-fabric]") {
  op_contract("wse2", ".data a f16 64\n.data b f16 64\n.dsd am mem1d a\n.dsd bm mem1d b", "faddh am, am, bm", 16 + 16);
}

TEST_CASE("wafer-fabric: faddh len 63 fp16 on wse3 takes 16 + ceil(63/8) cycles", "[wafer-fabric]") {
  op_contract("wse3", ".data a f16 63\n.data b f16 63\n.dsd am mem1d a\n.dsd bm mem1d b", "faddh am, am, bm", 16 + 8);
}

TEST_CASE("wafer-fabric: fmacs len 10 (width 1) takes 16 + 10 cycles", "[wafer-fabric]") {
  op_contract("wse3", ".data a f32 10\n.data b f32 10\n.dsd am mem1d a\n.dsd bm mem1d b", "fmacs am, am, bm, 2.0", 16 + 10);
}

TEST_CASE("wafer-fabric: fh2s len 9 on wse2 (width 1) takes 16 + 9 cycles", "[wafer-fabric]") {
  op_contract("wse2", ".data a f32 9\n.data b f16 9\n.dsd am mem1d a\n.dsd bm mem1d b", "fh2s am, bm", 16 + 9);
}

TEST_CASE("wafer-fabric: faddh stride 7 on wse3 is capped at width 2", "[wafer-fabric]") {
  op_contract("wse3", ".data a f16 112\n.data b f16 16\n.dsd am mem1d a len=16 stride=7\n.dsd bm mem1d b", "faddh bm, am, bm", 16 + 8);
}

TEST_CASE("wafer-fabric: fmovs stride 8 on wse3 runs at width 1", "[wafer-fabric]") {
  op_contract("wse3", ".data a f32 80\n.data b f32 10\n.dsd am mem1d a len=10 stride=8\n.dsd bm mem1d b", "fmovs bm, am", 16 + 10);
}

TEST_CASE("wafer-fabric: a full input queue stalls the sender after in + router + out depths", "[wafer-fabric]") {
  // The receiver's task never runs, so nothing reads input queue 1: the sender can push exactly
  // queue.input_depth[1] (receiver) + router.buffer_depth (the receiver's router, from W) +
  // queue.output_depth[2] (its own output queue) wavelets; then it waits for ever: a deadlock.
  const char* never = R"(
.param n = 40
.data y f32 40
.dsd ym mem1d y
.dsd in fabin f32 color=1 queue=1 len=40
.task main local id=8
  fmovs ym, in
  halt
)";
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.deadlock_window = 500;
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", never}}, row_layout(2, 40, {1}), c), opt);
  r.go();
  REQUIRE(r.fab->error());
  INFO(*r.fab->error());
  CHECK_THAT(*r.fab->error(), Contains("deadlock"));
  CHECK_THAT(*r.fab->error(), Contains("PE (0,0)"));
  CHECK_THAT(*r.fab->error(), Contains("waits for room in output queue 2"));
  const int64_t absorbed = c.input_depth[1] + c.buffer_depth + c.output_depth[2];
  REQUIRE(absorbed == 6 + 4 + 6);
  bool found = false;
  for (const auto& s : r.fab->stuck_pes())
    if (s.x == 0 && s.y == 0) {
      found = true;
      CHECK(s.elements_done == absorbed);
    }
  CHECK(found);
  CHECK(r.fab->queue_high_water(1, 0, 1, true) == c.input_depth[1]);
  CHECK(r.fab->queue_high_water(0, 0, 2, false) == c.output_depth[2]);
  CHECK(r.fab->stats().router_buffer_high_water == c.buffer_depth);
}

TEST_CASE("wafer-fabric: multicast to 4 PEs costs no extra link cycles per branch", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  const int B = 32;
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(5, B, {1, 2, 3, 4}), c));
  r.go();
  REQUIRE_FALSE(r.fab->error());
  for (int x = 1; x <= 4; ++x) {
    const auto d = deliveries_at(*r.fab, x, 0);
    REQUIRE(d.size() == static_cast<size_t>(B));
    const int64_t first = c.setup_cycles + 1 + x * c.hop_latency + 1;
    CHECK(d.front().cycle == first);
    CHECK(d.back().cycle == first + B - 1);
    CHECK(r.fab->link_wavelets(x - 1, 0, Dir::E) == B);
    CHECK(r.fab->link_wavelets(x, 0, Dir::RAMP) == B);
    for (float v : r.fab->read_array(x, 0, "y")) CHECK(v == 1.5f);
  }
}

TEST_CASE("wafer-fabric: fp32 and fp16 DSD numerics match a direct computation", "[wafer-fabric]") {
  const char* prog = R"(
.data a f32 13
.data b f32 13
.data c f32 13
.data m f32 13
.data s f32 13
.data x f32 13
.data n f32 13
.data ha f16 13
.data hb f16 13
.data hc f16 13
.data hm f16 13
.data back f32 13
.dsd am mem1d a
.dsd bm mem1d b
.dsd cm mem1d c
.dsd mm mem1d m
.dsd sm mem1d s
.dsd xm mem1d x
.dsd nm mem1d n
.dsd ham mem1d ha
.dsd hbm mem1d hb
.dsd hcm mem1d hc
.dsd hmm mem1d hm
.dsd bkm mem1d back
.task main local id=8 active
  fmacs cm, am, bm, 1.7
  fmuls mm, am, bm
  fsubs sm, am, bm
  fmaxs xm, am, bm
  fnegs nm, am
  fs2h ham, am
  fs2h hbm, bm
  faddh hcm, ham, hbm
  fmulh hmm, ham, hbm
  fh2s bkm, hcm
  halt
)";
  const WaferConfig cfg = preset_config("wse2");
  const std::string layout =
      R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1, "program": "n.pe"}]})";
  Run r(cfg, load({{"n.pe", prog}}, layout, cfg));
  std::vector<float> a(13), b(13);
  for (int i = 0; i < 13; ++i) {
    a[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i) + 0.1f) * 3.3f;
    b[static_cast<size_t>(i)] = std::cos(1.13f * static_cast<float>(i)) * 0.77f + 1e-3f;
  }
  r.fab->write_array(0, 0, "a", a);
  r.fab->write_array(0, 0, "b", b);
  r.go();
  REQUIRE_FALSE(r.fab->error());
  const auto c = r.fab->read_array(0, 0, "c"), m = r.fab->read_array(0, 0, "m"), s = r.fab->read_array(0, 0, "s");
  const auto x = r.fab->read_array(0, 0, "x"), n = r.fab->read_array(0, 0, "n");
  const auto hc = r.fab->read_array(0, 0, "hc"), hm = r.fab->read_array(0, 0, "hm"), back = r.fab->read_array(0, 0, "back");
  for (size_t i = 0; i < 13; ++i) {
    const float ai = a[i], bi = b[i];
    CHECK(c[i] == std::fma(bi, 1.7f, ai));
    CHECK(m[i] == ai * bi);
    CHECK(s[i] == ai - bi);
    CHECK(x[i] == std::max(ai, bi));
    CHECK(n[i] == -ai);
    const float ha = fp16_to_fp32(fp32_to_fp16(ai)), hb = fp16_to_fp32(fp32_to_fp16(bi));
    const float sum16 = fp16_to_fp32(fp32_to_fp16(ha + hb));
    CHECK(hc[i] == sum16);
    CHECK(hm[i] == fp16_to_fp32(fp32_to_fp16(ha * hb)));
    CHECK(back[i] == sum16);
  }
}

TEST_CASE("wafer-fabric: the p2p_row micro example delivers 16 x 1.5 over 7 hops", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  Run r(c, load_layout(kRoot + "/scenarios/wafer/micro/p2p_row.json", c));
  r.go();
  REQUIRE_FALSE(r.fab->error());
  const auto y = r.fab->read_array(7, 0, "y");
  REQUIRE(y.size() == 16);
  for (float v : y) CHECK(v == 1.5f);
  const auto d = deliveries_at(*r.fab, 7, 0);
  REQUIRE(d.size() == 16);
  CHECK(d.front().cycle == c.setup_cycles + 1 + 7 * c.hop_latency + 1);
  CHECK(r.fab->halted(0, 0));
  CHECK(r.fab->halted(7, 0));
  CHECK(r.fab->stats().program_pes == 2);
  CHECK(r.fab->stats().color_hops[1] == 16 * 7 + 16);
}

TEST_CASE("wafer-fabric: gemv_8x8 micro example gives 72 per row and runs again", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  Run r(c, load_layout(kRoot + "/scenarios/wafer/micro/gemv_8x8.json", c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  for (int py = 0; py < 8; ++py)
    for (float v : r.fab->read_array(7, py, "y")) CHECK(v == 0.5f * 4 * 36);
  // A second run of the same elaborated fabric starts every PE's tasks again; SRAM keeps y, so
  // the east column ends above 72.
  r.go();
  REQUIRE_FALSE(r.fab->error());
  for (int py = 0; py < 8; ++py)
    for (float v : r.fab->read_array(7, py, "y")) CHECK(v > 72.0f);
}

TEST_CASE("wafer-fabric: row_reduce micro example sums to 10", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  Run r(c, load_layout(kRoot + "/scenarios/wafer/micro/row_reduce.json", c));
  r.go();
  REQUIRE_FALSE(r.fab->error());
  for (float v : r.fab->read_array(3, 0, "sum")) CHECK(v == 10.0f);
  CHECK(r.fab->stats().busy_cycles > 0);
  CHECK(r.fab->stats().idle_cycles >= 0);
}

TEST_CASE("wafer-fabric: a cyclic route fills up and is reported as a deadlock", "[wafer-fabric]") {
  // PE (0,0) injects color 1 into a 2x2 ring (E, S, W, N) whose routers never deliver to a PE.
  const char* send = R"(
.data x f32 64 fill=2.0
.dsd xm mem1d x
.dsd out fabout f32 color=1 queue=2 len=64
.task main local id=8 active
  fmovs out, xm
  halt
)";
  const std::string layout = R"({"fabric": {"width": 2, "height": 2}, "rects": [
    {"name": "s", "x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe",
     "routes": [{"color": 1, "rx": ["RAMP", "S"], "tx": ["E"]}]},
    {"name": "ne", "x": 1, "y": 0, "width": 1, "height": 1, "routes": [{"color": 1, "rx": ["W"], "tx": ["S"]}]},
    {"name": "bottom", "x": 0, "y": 1, "width": 2, "height": 1, "routes": [
      {"color": 1, "x": 1, "width": 1, "rx": ["N"], "tx": ["W"]},
      {"color": 1, "x": 0, "width": 1, "rx": ["E"], "tx": ["N"]}]}]})";
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.deadlock_window = 1000;
  Run r(c, load({{"send.pe", send}}, layout, c), opt);
  r.go();
  REQUIRE(r.fab->error());
  INFO(*r.fab->error());
  CHECK_THAT(*r.fab->error(), Contains("deadlock"));
  CHECK_THAT(*r.fab->error(), Contains("PE (0,0)"));
  CHECK_THAT(*r.fab->error(), Contains("color 1"));
  CHECK(r.fab->stuck_routers().size() == 4);
  for (const auto& s : r.fab->stuck_routers()) CHECK(s.color == 1);
  // Stopped by the detector, not by running on: simulated time ends about the window after the last move.
  CHECK(r.fab->stats().cycles < 64 * 4 + 1000 + c.setup_cycles + 100);
}

TEST_CASE("wafer-fabric: a spinning task is stopped by the max-cycle watchdog", "[wafer-fabric]") {
  const char* spin = R"(
.task main local id=8 active
top:
  jmp top
)";
  const std::string layout =
      R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1, "program": "spin.pe"}]})";
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.max_cycles = 5000;
  Run r(c, load({{"spin.pe", spin}}, layout, c), opt);
  r.go();
  REQUIRE(r.fab->error());
  CHECK_THAT(*r.fab->error(), Contains("watchdog"));
  CHECK_THAT(*r.fab->error(), Contains("PE (0,0)"));
}

namespace {

// A row of N routing-only PEs, color 1 from the west edge to the east edge, with an input port on
// the west side and an output port on the east side (lane 0 each).
std::string port_row(int N, int hop_tx_ramp_at = -1) {
  std::string s = R"({"fabric": {"width": )" + std::to_string(N) + R"(, "height": 1}, "rects": [)";
  for (int x = 0; x < N; ++x) {
    s += std::string(x ? "," : "") + R"({"name": "p)" + std::to_string(x) + R"(", "x": )" + std::to_string(x) + R"(, "y": 0, "width": 1, "height": 1)";
    if (x == hop_tx_ramp_at) s += R"(, "program": "sink.pe")";
    s += R"(, "routes": [{"color": 1, "rx": ["W"], "tx": )" + std::string(x == hop_tx_ramp_at ? R"(["RAMP"])" : R"(["E"])") + "}]}";
  }
  return s + R"(], "ports": [{"name": "west", "dir": "in", "side": "W", "color": 1})" +
         (hop_tx_ramp_at < 0 ? R"(, {"name": "east", "dir": "out", "side": "E", "color": 1})" : "") + "]}";
}

void port_contract(int64_t hop) {
  {
    WaferConfig c = preset_config("wse2");
    c.hop_latency = hop;
    const int N = 5, B = 12;
    Run r(c, load({}, port_row(N), c));
    std::vector<uint32_t> in;
    for (int k = 0; k < B; ++k) in.push_back(0x40000000u + static_cast<uint32_t>(k));
    r.fab->set_port_stream("west", 0, in);
    r.go();
    INFO("hop " << hop << ": " << r.fab->error().value_or(""));
    REQUIRE_FALSE(r.fab->error());
    const auto& out = r.fab->port_output("east", 0);
    REQUIRE(out.size() == static_cast<size_t>(B));
    // Injected in cycle k (one per cycle from the start), a hop into the west router, N - 1 hops
    // between routers and one off the east edge.
    for (int k = 0; k < B; ++k) {
      CHECK(out[static_cast<size_t>(k)].first == in[static_cast<size_t>(k)]);
      CHECK(out[static_cast<size_t>(k)].second == k + (N + 1) * hop);
    }
    CHECK(r.fab->stats().port_in_wavelets == B);
    CHECK(r.fab->stats().port_out_wavelets == B);
    CHECK(r.fab->stats().wavelet_hops == int64_t{N - 1} * B);
    for (int x = 0; x < N; ++x) CHECK(r.fab->link_wavelets(x, 0, Dir::E) == B);
    // Streams stay for the next run; outputs start over.
    r.go();
    CHECK(r.fab->port_output("east", 0).size() == static_cast<size_t>(B));
    CHECK_THROWS_WITH(r.fab->set_port_stream("east", 0, {}), Contains("is an output port"));
  }
}

}  // namespace

TEST_CASE("wafer-fabric: an edge stream crosses N routers: wavelet k leaves at k + (N + 1) hops (hop latency 1)", "[wafer-fabric]") {
  port_contract(1);
}
TEST_CASE("wafer-fabric: an edge stream crosses N routers: wavelet k leaves at k + (N + 1) x 2 (hop latency 2)", "[wafer-fabric]") {
  port_contract(2);
}

TEST_CASE("wafer-fabric: an edge stream into a PE that never reads stops at the buffers and is reported", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.deadlock_window = 200;
  opt.require_halt = false;
  const char* sink = ".task main local id=8 active\n  halt\n";  // halts without reading color 1
  Run r(c, load({{"sink.pe", sink}}, port_row(3, 2), c), opt);
  r.fab->set_port_stream("west", 0, std::vector<uint32_t>(100, 0x3f800000u));
  r.go();
  REQUIRE(r.fab->error());
  CHECK_THAT(*r.fab->error(), Contains("deadlock"));
  CHECK_THAT(*r.fab->error(), Contains("input port 'west' lane 0:"));
  CHECK_THAT(*r.fab->error(), Contains("wavelet(s) not injected"));
  // What got in: the PE's input queue, the two routers' buffers and the west router's: the rest waits.
  CHECK(r.fab->stats().port_in_wavelets < 100);
  CHECK_THROWS_WITH(r.fab->set_port_stream("west", 1, {}), Contains("has lanes 0-0, not 1"));
  CHECK_THROWS_WITH(r.fab->port_output("north", 0), Contains("the layout declares no such port"));
  CHECK_THROWS_WITH(r.fab->port_output("west", 0), Contains("is an input port"));
}

TEST_CASE("wafer-fabric: layout ports are checked against sides, routes and each other", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  auto errors = [&](const std::string& ports, const std::string& route_tx = R"(["E"])") {
    const std::string l = R"({"fabric": {"width": 2, "height": 2}, "rects": [{"name": "g", "x": 0, "y": 0, "width": 2, "height": 2,
      "routes": [{"color": 1, "x": 0, "width": 1, "rx": ["W"], "tx": ["E"]}, {"color": 1, "x": 1, "width": 1, "rx": ["W"], "tx": )" +
                          route_tx + R"(}]}], "ports": )" + ports + "}";
    try {
      load({}, l, c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A valid pair: in on the west side (2 lanes), out on the east side.
  CHECK(errors(R"([{"name": "w", "dir": "in", "side": "W", "length": 2, "color": 1}, {"name": "e", "dir": "out", "side": "E", "length": 2, "color": 1}])").empty());
  // Without the output port, tx E at the east edge leaves the fabric.
  CHECK_THAT(errors(R"([{"name": "w", "dir": "in", "side": "W", "length": 2, "color": 1}])"),
             Contains("tx E leaves the 2x2 fabric") && Contains("unless an output port on side E collects color 1 there"));
  CHECK_THAT(errors(R"([{"name": "w", "dir": "in", "side": "W", "x": 1, "color": 1}])"), Contains("/ports/0/x") && Contains("lies at x = 0, got 1"));
  CHECK_THAT(errors(R"([{"name": "w", "dir": "in", "side": "W", "length": 3, "color": 1}])"), Contains("/ports/0/length"));
  CHECK_THAT(errors(R"([{"name": "n", "dir": "in", "side": "N", "color": 1}, {"name": "e", "dir": "out", "side": "E", "length": 2, "color": 1}])"),
             Contains("port 'n' lane 0: the route of color 1 has no N in its rx"));
  CHECK_THAT(errors(R"([{"name": "w", "dir": "sideways", "side": "W", "color": 1}])"), Contains("expected \"in\" or \"out\""));
  CHECK_THAT(errors(R"([{"name": "w", "dir": "in", "side": "W", "color": 1}, {"name": "w2", "dir": "in", "side": "W", "y": 0, "length": 2, "color": 1},
                        {"name": "e", "dir": "out", "side": "E", "length": 2, "color": 1}])"),
             Contains("port 'w2' overlaps port 'w' at PE (0,0)"));
}

TEST_CASE("wafer-fabric: an edge stream waits for each wavelet's ready cycle (a stream from SwarmX)", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");  // hop latency 1
  const int N = 5;
  Run r(c, load({}, port_row(N), c));
  // Wavelets 0 and 1 at the port from cycle 10, wavelet 2 from cycle 30: injected at 10, 11 (one
  // per cycle) and 30, then N + 1 hops.
  r.fab->set_port_stream("west", 0, {1u, 2u, 3u}, {10, 10, 30});
  r.go();
  REQUIRE_FALSE(r.fab->error());
  const auto& out = r.fab->port_output("east", 0);
  REQUIRE(out.size() == 3);
  CHECK(out[0].second == 10 + N + 1);
  CHECK(out[1].second == 11 + N + 1);
  CHECK(out[2].second == 30 + N + 1);
  CHECK(out[2].first == 3u);
}
