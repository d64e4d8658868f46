// The wafer fabric model (models/wafer/fabric.hpp; semantics and timing in docs/wafer-model.md).
// Timing contracts write the expected cycle counts from the documented formulas here, not from
// the model: a DSD op takes dsd.setup_cycles + ceil(len / width); a wavelet pushed by a DSD op
// element processed in cycle p is in the router's RAMP input at p + 1, crosses each router-router
// link in router.hop_latency cycles and is readable in the receiving PE's input queue one cycle
// after the last router hands it over: p + 1 + N * hop_latency + 1 for N links.
// One elaboration (one Fabric) per TEST_CASE: each test case is its own ctest process.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <memory>
#include <systemc>

#include <nlohmann/json.hpp>

#include "isa/numeric.hpp"
#include "models/common/systemc_env.hpp"
#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "mapper/wafer/compile.hpp"
#include "mapper/wafer/functions.hpp"
#include "models/wafer/fabric.hpp"
#include "tests/unit/wafer_fixtures.hpp"

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
    tessera::models::after_systemc();
    REQUIRE(fab->finished());
  }
};

std::vector<DeliveryRecord> deliveries_at(const Fabric& f, int x, int y) {
  std::vector<DeliveryRecord> out;
  for (const auto& d : f.deliveries())
    if (d.x == x && d.y == y) out.push_back(d);
  return out;
}

using fixtures::kRecv;
using fixtures::kSend;

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

// B wavelets over N links: first readable at setup + 1 + N * hop + 1, then one per cycle (with
// router.ramp_latency R: setup + R + N * hop + R -- R - 1 more each way between a PE and its router).
void hop_contract(int N, int B, int64_t hop, int64_t ramp = 1) {
  WaferConfig c = preset_config("wse2");
  c.hop_latency = hop;
  c.ramp_latency = ramp;
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(N + 1, B, {N}), c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  const auto d = deliveries_at(*r.fab, N, 0);
  REQUIRE(d.size() == static_cast<size_t>(B));
  const int64_t first = c.setup_cycles + ramp + N * hop + ramp;
  for (int i = 0; i < B; ++i) CHECK(d[static_cast<size_t>(i)].cycle == first + i);
  CHECK(d.back().cycle == first + B - 1);
  for (int x = 0; x < N; ++x) CHECK(r.fab->link_wavelets(x, 0, Dir::E) == B);
  for (float v : r.fab->read_array(N, 0, "y")) CHECK(v == 1.5f);
  CHECK(r.fab->halted(0, 0));
  CHECK(r.fab->halted(N, 0));
  CHECK(r.fab->stats().wavelet_hops == int64_t{N} * B);
}

// One PE running op.pe.
const std::string kOpLayout =
    R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1, "program": "op.pe"}]})";

// One DSD instruction on one PE: done exactly setup + ceil(len / width) cycles after it issues
// at cycle 0; the following halt ends the PE one cycle later.
void op_contract(const WaferConfig& c, const std::string& decls, const std::string& instr, int64_t expect_cycles);
void op_contract(const std::string& preset, const std::string& decls, const std::string& instr, int64_t expect_cycles) {
  op_contract(preset_config(preset), decls, instr, expect_cycles);
}
void op_contract(const WaferConfig& c, const std::string& decls, const std::string& instr, int64_t expect_cycles) {
  const std::string prog = decls + "\n.task main local id=8 active\n  " + instr + "\n  halt\n";
  Run r(c, load({{"op.pe", prog}}, kOpLayout, c));
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

// One layout run element by element (slow) and with eager memory-only ops (fast), side by side in
// one elaboration, both finished. Keeps the layout: the fabrics read its programs.
struct SlowAndEager {
  LoadedLayout layout;
  std::unique_ptr<Fabric> slow, fast;
  // (corner_only: the eager run records PE (0, 0) only, so the others run on past their
  // memory-only ops in local time; a recorded PE keeps an event per op.)
  SlowAndEager(const WaferConfig& c, LoadedLayout l, bool corner_only = false) : layout(std::move(l)) {
    models::set_fs_resolution();
    FabricOptions so, fo;
    so.record = fo.record = true;
    so.task_ends = fo.task_ends = true;
    fo.eager_memory_ops = true;
    if (corner_only) fo.record_only = std::vector<std::pair<int32_t, int32_t>>{{0, 0}};
    slow = std::make_unique<Fabric>("slow", c, so);
    fast = std::make_unique<Fabric>("fast", c, fo);
    slow->load(layout);
    fast->load(layout);
    slow->start();
    fast->start();
    sc_core::sc_start();
    tessera::models::after_systemc();
    REQUIRE(slow->finished());
    REQUIRE(fast->finished());
  }
};

}  // namespace

TEST_CASE("wafer-fabric: 16 wavelets over 6 hops arrive from setup + 6 + 2 one per cycle (hop latency 1)", "[wafer-fabric]") {
  hop_contract(6, 16, 1);
}

TEST_CASE("wafer-fabric: 24 wavelets over 9 hops arrive from setup + 9 x 2 + 2 one per cycle (hop latency 2)", "[wafer-fabric]") {
  hop_contract(9, 24, 2);
}

TEST_CASE("wafer-fabric: at router.ramp_latency 2, 16 wavelets over 6 hops arrive from setup + 2 + 6 + 2 one per cycle", "[wafer-fabric]") {
  hop_contract(6, 16, 1, 2);
}

TEST_CASE("wafer-fabric: at router.ramp_latency 2 and hop latency 2, 24 wavelets over 9 hops arrive from setup + 2 + 9 x 2 + 2 one per cycle", "[wafer-fabric]") {
  hop_contract(9, 24, 2, 2);
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

TEST_CASE("wafer-fabric: fmacs len 10 at simd.fmacs_interval 2 (3P's 0.5 per cycle) takes 16 + 2 x 10 cycles", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.fmacs_interval = 2;
  CHECK(op_interval(Op::fmacs, c) == 2);
  CHECK(op_interval(Op::fadds, c) == 1);
  CHECK(dsd_cycles(Op::fmacs, 10, 1, c) == 16 + 20);
  CHECK(dsd_cycles(Op::fadds, 64, 1, c) == 16 + 32);  // other ops keep their width
  op_contract(c, ".data a f32 10\n.data b f32 10\n.dsd am mem1d a\n.dsd bm mem1d b", "fmacs am, am, bm, 2.0", 16 + 20);
}

TEST_CASE("wafer-fabric: at simd.fmacs_interval 3 eager and element-by-element fmacs end in the same cycle with the same values", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.fmacs_interval = 3;
  const std::string prog =
      ".data a f32 10 fill=1.5\n.data b f32 10 fill=0.25\n.data d f32 64 fill=1\n.dsd am mem1d a\n.dsd bm mem1d b\n.dsd dm mem1d d\n"
      ".task main local id=8 active\n  fmacs am, am, bm, 2.0\n  fadds dm, dm, dm\n  halt\n";
  const SlowAndEager r(c, load({{"op.pe", prog}}, kOpLayout, c));
  const Fabric &a = *r.slow, &b = *r.fast;
  for (const Fabric* f : {&a, &b}) {
    REQUIRE(f->op_records().size() == 2);
    CHECK(f->op_records()[0].end == 16 + 30);               // fmacs: 10 groups, 3 cycles each
    CHECK(f->op_records()[1].end == 16 + 30 + 16 + 32);     // fadds after it at its own width
    CHECK(f->stats().stall_cycles == 0);                     // the idle cycles are the formula's, not stalls
    for (float v : f->read_array(0, 0, "a")) CHECK(v == 2.0f);
  }
  CHECK(a.halt_cycle(0, 0) == b.halt_cycle(0, 0));
}

TEST_CASE("wafer-fabric: an async fmacs from the fabric at simd.fmacs_interval 2 takes a wavelet every 2 cycles", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.fmacs_interval = 2;
  const char* recv = R"(
.param n = 16
.data y f32 $n fill=1
.dsd ym mem1d y
.dsd in fabin f32 color=1 queue=1 len=$n
.task main local id=8 active
  fmacs ym, ym, in, 2.0 async activate=done
  ret
.task done local id=9
  halt
)";
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", recv}}, row_layout(2, 16, {1}), c));
  r.go();
  REQUIRE_FALSE(r.fab->error());
  const auto d = deliveries_at(*r.fab, 1, 0);
  REQUIRE(d.size() == 16);
  const int64_t first = d.front().cycle;  // readable from here; the op takes one element per 2 cycles
  const OpRecord* o = nullptr;
  for (const auto& rec : r.fab->op_records())
    if (rec.x == 1) o = &rec;
  REQUIRE(o);
  CHECK(o->end == first + 2 * 16);
  for (float v : r.fab->read_array(1, 0, "y")) CHECK(v == 4.0f);  // 1 + 1.5 * 2
}

TEST_CASE("wafer-fabric: at pe.sram_bytes_per_cycle 21.2 an fmovh over 64 fp16 and an fadds over 64 fp32 on wse3 move no more bytes a cycle, eager and element-by-element alike", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse3");
  c.sram_bw_q = std::llround(21.2 * 1024);
  // fmovh: 4 bytes an element (read + write), 8 a cycle would be 32 bytes: by the k-th cycle floor(21.2 k / 4).
  CHECK(sram_limited_bytes(8, 4, c) == 4);
  CHECK(dsd_op_cycles_bw(64, 8, 1, 4, c) == 16 + 13);   // ceil(64 x 4 / 21.2)
  CHECK(dsd_op_cycles_bw(64, 4, 1, 12, c) == 16 + 37);  // fadds: 12 bytes an element, ceil(64 x 12 / 21.2)
  CHECK(sram_limited_bytes(4, 4, c) == 0);              // an fmovs (16 bytes a cycle) is not limited
  CHECK(sram_limited_bytes(8, 4, preset_config("wse3")) == 0);  // off in the presets
  const std::string prog =
      ".data a f16 64 fill=1.5\n.data b f16 64\n.data d f32 64 fill=1\n.dsd am mem1d a\n.dsd bm mem1d b\n.dsd dm mem1d d\n"
      ".task main local id=8 active\n  fmovh bm, am\n  fadds dm, dm, dm\n  halt\n";
  const SlowAndEager r(c, load({{"op.pe", prog}}, kOpLayout, c));
  const Fabric &a = *r.slow, &b = *r.fast;
  for (const Fabric* f : {&a, &b}) {
    REQUIRE(f->op_records().size() == 2);
    CHECK(f->op_records()[0].end == 16 + 13);
    CHECK(f->op_records()[1].end == 16 + 13 + 16 + 37);
    CHECK(f->stats().stall_cycles == 0);  // the limit's idle cycles are the formula's, not stalls
    for (float v : f->read_array(0, 0, "b")) CHECK(v == 1.5f);
    for (float v : f->read_array(0, 0, "d")) CHECK(v == 2.0f);
  }
  CHECK(a.halt_cycle(0, 0) == b.halt_cycle(0, 0));
}

TEST_CASE("wafer-fabric: at pe.sram_bytes_per_cycle 2 an op of no elements (a fabout of dsd_len 0) ends as it does without the limit", "[wafer-fabric]") {
  // fadds out, am, am: 8 memory bytes an element, limited at 2 a cycle; its length is its fabout's, 0.
  const char* send = R"(
.param n = 8
.data a f32 $n fill=1
.dsd am mem1d a
.dsd out fabout f32 color=1 queue=2 len=$n
.task main local id=8 active
  dsd_len out, 0
  fadds out, am, am
  halt
)";
  const char* recv = ".param n = 8\n.task main local id=8 active\n  halt\n";
  WaferConfig c = preset_config("wse2");
  c.sram_bw_q = 2 * 1024;
  Run r(c, load({{"send.pe", send}, {"recv.pe", recv}}, row_layout(2, 8, {1}), c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  // dsd_len in cycle 0, the op issued in cycle 1 and done (no elements) after its setup, then halt.
  CHECK(r.fab->halt_cycle(0, 0) == 1 + 16 + 1);
}

TEST_CASE("wafer-fabric: pe.sram_bytes_per_cycle below an element's bytes with simd.fmacs_interval 2: eager and element-by-element fmacs end together", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.fmacs_interval = 2;
  c.sram_bw_q = 5 * 1024;  // 5 bytes a cycle: an fmacs element (12 bytes) every 2.4 cycles, slower than the interval
  const int64_t cyc = dsd_op_cycles_bw(10, 1, 2, 12, c);
  CHECK(cyc > 16 + 20);
  CHECK(cyc == 16 + 25);  // the 10th element in the op's 24th cycle (floor(5 x 24 / 12) = 10), then its group's idle cycle
  const std::string prog =
      ".data a f32 10 fill=1.5\n.data b f32 10 fill=0.25\n.dsd am mem1d a\n.dsd bm mem1d b\n"
      ".task main local id=8 active\n  fmacs am, am, bm, 2.0\n  halt\n";
  const SlowAndEager r(c, load({{"op.pe", prog}}, kOpLayout, c));
  for (const Fabric* f : {r.slow.get(), r.fast.get()}) {
    REQUIRE(f->op_records().size() == 1);
    CHECK(f->op_records()[0].end == cyc);
    for (float v : f->read_array(0, 0, "a")) CHECK(v == 2.0f);
  }
}

TEST_CASE("wafer-fabric: an async fmovs from the fabric at pe.sram_bytes_per_cycle 2 stores a wavelet every 2 cycles (not taken ahead at delivery)", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.sram_bw_q = 2 * 1024;  // kRecv's async fmovs: a 4-byte store every 2 cycles; the wavelets come one a cycle
  // The sender's source is a scalar (no memory operand, so not limited): a wavelet a cycle.
  const char* send = R"(
.param n = 16
.dsd out fabout f32 color=1 queue=2 len=$n
.task main local id=8 active
  fmovs out, 1.5
  halt
)";
  Run r(c, load({{"send.pe", send}, {"recv.pe", kRecv}}, row_layout(2, 16, {1}), c));
  r.go();
  REQUIRE_FALSE(r.fab->error());
  const auto d = deliveries_at(*r.fab, 1, 0);
  REQUIRE(d.size() == 16);
  CHECK(d[1].cycle == d[0].cycle + 1);  // the wavelets come one a cycle
  const OpRecord* o = nullptr;
  for (const auto& rec : r.fab->op_records())
    if (rec.x == 1) o = &rec;
  REQUIRE(o);
  CHECK(o->end == o->start + 16 + 2 * 16);  // the 16th element in the 32nd cycle of the op
  for (float v : r.fab->read_array(1, 0, "y")) CHECK(v == 1.5f);
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

// Two streams contend for one PE's ramp (color 1 from the west, color 2 from the east) while the PE's
// own output (color 3, west) is ready at its router too: the ramp serves the two in turn. (A rotation
// over all three ready inputs gave color 1 two turns in three until 2026-11-30.)
TEST_CASE("wafer-fabric: two inputs contending for a ramp take turns while a third input uses another link", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  const int n = 64;
  const char* a = R"(
.param n = 64
.data x f32 $n fill=1.5
.data y f32 $n fill=0
.dsd xm mem1d x
.dsd ym mem1d y
.dsd out fabout f32 color=1 queue=2 len=$n
.dsd in fabin f32 color=3 queue=1 len=$n
.task main local id=8 active
  fmovs ym, in async activate=done
  fmovs out, xm
  ret
.task done local id=9
  halt
)";
  const char* mid = R"(
.param n = 64
.data x f32 $n fill=2.5
.data y1 f32 $n fill=0
.data y2 f32 $n fill=0
.dsd xm mem1d x
.dsd y1m mem1d y1
.dsd y2m mem1d y2
.dsd in1 fabin f32 color=1 queue=1 len=$n
.dsd in2 fabin f32 color=2 queue=3 len=$n
.dsd out fabout f32 color=3 queue=2 len=$n
.task main local id=8 active
  fmovs y2m, in2 async activate=done
  fmovs out, xm async
  fmovs y1m, in1
  ret
.task done local id=9
  halt
)";
  const std::string layout = R"({"fabric": {"width": 3, "height": 1}, "rects": [
    {"name": "a", "x": 0, "y": 0, "width": 1, "height": 1, "program": "a.pe",
     "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}, {"color": 3, "rx": ["E"], "tx": ["RAMP"]}]},
    {"name": "m", "x": 1, "y": 0, "width": 1, "height": 1, "program": "mid.pe",
     "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}, {"color": 2, "rx": ["E"], "tx": ["RAMP"]}, {"color": 3, "rx": ["RAMP"], "tx": ["W"]}]},
    {"name": "b", "x": 2, "y": 0, "width": 1, "height": 1, "program": "send.pe", "params": {"n": 64, "color": 2},
     "routes": [{"color": 2, "rx": ["RAMP"], "tx": ["W"]}]}]})";
  Run r(c, load({{"a.pe", a}, {"send.pe", kSend}, {"mid.pe", mid}}, layout, c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  const auto d = deliveries_at(*r.fab, 1, 0);
  REQUIRE(d.size() == static_cast<size_t>(2 * n));
  // While the PE's own sends are still leaving (its output queue is a third ready input at the
  // router), the two streams alternate on the ramp: no two consecutive deliveries of one color.
  const int64_t sends_end = c.setup_cycles + n + 4;
  int same = 0, counted = 0, c1 = 0, c2 = 0;
  for (size_t i = 1; i < d.size(); ++i) {
    if (d[i].cycle > sends_end) break;
    ++counted;
    (d[i].color == 1 ? c1 : c2)++;
    if (d[i].color == d[i - 1].color) ++same;
  }
  INFO("deliveries " << counted << ": color 1 " << c1 << ", color 2 " << c2 << ", repeats " << same);
  CHECK(counted >= n / 2);
  CHECK(same == 0);
  CHECK(std::abs(c1 - c2) <= 1);
  for (float v : r.fab->read_array(1, 0, "y1")) CHECK(v == 1.5f);
  for (float v : r.fab->read_array(1, 0, "y2")) CHECK(v == 1.5f);
  for (float v : r.fab->read_array(0, 0, "y")) CHECK(v == 2.5f);
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
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.deadlock_window = 1000;
  Run r(c, load({{"send.pe", kSend}}, fixtures::kRingLayout, c), opt);
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

// Fabric::set_port_reply (MemoryX's loss-scaling verdict): once the wavelets it answers have left,
// the callback's streams enter their input port at the cycles it gives, within the same run -- a
// reply due later than the deadlock window is not a deadlock -- and each run starts without the
// last run's reply.
TEST_CASE("wafer-fabric: a port reply answers output traffic within the run", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  const int N = 4, B = 6;
  // Row 0 carries color 1 from port "west" to "east"; row 1 color 2 from "back" to "east2".
  std::string l = R"({"fabric": {"width": 4, "height": 2}, "rects": [{"name": "g", "x": 0, "y": 0, "width": 4, "height": 2, "routes": [
      {"color": 1, "y": 0, "height": 1, "rx": ["W"], "tx": ["E"]}, {"color": 2, "y": 1, "height": 1, "rx": ["W"], "tx": ["E"]}]}],
    "ports": [{"name": "west", "dir": "in", "side": "W", "color": 1}, {"name": "east", "dir": "out", "side": "E", "color": 1},
              {"name": "back", "dir": "in", "side": "W", "y": 1, "color": 2}, {"name": "east2", "dir": "out", "side": "E", "y": 1, "color": 2}]})";
  FabricOptions opt;
  opt.deadlock_window = 200;
  Run r(c, load({}, l, c), opt);
  r.fab->set_port_stream("west", 0, std::vector<uint32_t>(B, 0x3f800000u));
  int64_t fired_at = -1, calls = 0;
  Fabric::PortReply rep;
  rep.from = {"east"};
  rep.count = B;
  rep.to = "back";
  rep.fn = [&](int64_t rel) {
    fired_at = rel;
    ++calls;
    return std::vector<std::pair<std::vector<uint32_t>, int64_t>>{{{7u, 8u, 9u}, rel + 500}};
  };
  r.fab->set_port_reply(rep);
  for (int run = 0; run < 2; ++run) {
    INFO("run " << run);
    r.go();
    REQUIRE_FALSE(r.fab->error());
    CHECK(calls == run + 1);
    CHECK(fired_at == (B - 1) + (N + 1));  // the B-th wavelet's exit (hop latency 1)
    const auto& out = r.fab->port_output("east2", 0);
    REQUIRE(out.size() == 3);
    for (int k = 0; k < 3; ++k) {
      CHECK(out[static_cast<size_t>(k)].first == static_cast<uint32_t>(7 + k));
      CHECK(out[static_cast<size_t>(k)].second == fired_at + 500 + k + (N + 1));
    }
  }
  rep.to = "east";
  CHECK_THROWS_WITH(r.fab->set_port_reply(rep), Contains("is an output port"));
  rep.to = "back";
  rep.from = {"nope"};
  CHECK_THROWS_WITH(r.fab->set_port_reply(rep), Contains("no such port"));
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

// ---------------------------------------------------------------------------------------------
// One timing contract per row of wafer.md's SIMD-width table (PE "SIMD width per cycle"), per op
// and preset, plus the stride rule, each run as one DSD op on the fabric. The expected widths are
// written here from the fact sheet, not read from isa/wafer:
//   fp16 ops (fmach fmulh faddh fsubh fmovh mov16 add16): 4 / 8 (WSE-2 / WSE-3)
//   fadds fsubs fmovs mov32 fmachs faddhs (and fmuls fmaxs fnegs, same class here): 2 / 4
//   conversions fh2s fs2h: 1 / 4;  fmacs: 1 / 1
//   stride 0/1 full; stride % 8 in {2,3,5,6} full; {1,7} width 2; 0 width 1 (4: width 1, assumption)
namespace {

int64_t sheet_width(Op op, bool wse3) {
  switch (op) {
    case Op::fmach: case Op::fmulh: case Op::faddh: case Op::fsubh: case Op::fmovh: case Op::mov16: case Op::add16: return wse3 ? 8 : 4;
    case Op::fh2s: case Op::fs2h: return wse3 ? 4 : 1;
    case Op::fmacs: return 1;
    default: return wse3 ? 4 : 2;
  }
}
int64_t sheet_stride_cap(int64_t stride, int64_t w) {
  if (stride == 0 || stride == 1) return w;
  const int64_t m = ((stride % 8) + 8) % 8;
  if (m == 1 || m == 7) return std::min<int64_t>(w, 2);
  if (m == 0 || m == 4) return 1;
  return w;
}

// `len` elements of `op`; source operands walk their arrays with `stride` (the destination with 1).
void simd_row(Op op, const std::string& preset, int64_t stride, int64_t len) {
  const OpInfo& info = op_info(op);
  std::string decls, args;
  for (size_t k = 0; k < info.roles.size(); ++k) {
    const std::string nm = "a" + std::to_string(k);
    if (info.roles[k] == Role::K) {
      args += ", 2.0";
      continue;
    }
    const Want w = info.types[k];
    const std::string ty = w == Want::f16 || w == Want::b16 ? "f16" : "f32";
    const int64_t st = k == 0 ? 1 : stride;
    const int64_t count = st == 0 ? 1 : (len - 1) * st + 1;
    decls += ".data " + nm + " " + ty + " " + std::to_string(count) + " fill=1\n";
    decls += ".dsd " + nm + "m mem1d " + nm + " len=" + std::to_string(len) + " stride=" + std::to_string(st) + "\n";
    args += (k ? ", " : "") + nm + "m";
  }
  const int64_t width = sheet_stride_cap(stride, sheet_width(op, preset == "wse3"));
  const int64_t expect = 16 + (len + width - 1) / width;  // dsd.setup_cycles 16 (wafer.md 3P ~15-17)
  INFO(std::string(op_name(op)) << " " << preset << " stride " << stride << ": width " << width);
  op_contract(preset, decls, std::string(op_name(op)) + " " + args, expect);
}

}  // namespace

#define SIMD_ROW(OP, PRESET)                                                                                        \
  TEST_CASE("wafer-fabric simd: " #OP " on " PRESET " (len 61, stride 1)", "[wafer-fabric][simd]") {                 \
    simd_row(Op::OP, PRESET, 1, 61);                                                                                \
  }
#define SIMD_ROWS(OP) SIMD_ROW(OP, "wse2") SIMD_ROW(OP, "wse3")
SIMD_ROWS(fmach) SIMD_ROWS(fmulh) SIMD_ROWS(faddh) SIMD_ROWS(fsubh) SIMD_ROWS(fmovh) SIMD_ROWS(mov16) SIMD_ROWS(add16)
SIMD_ROWS(fadds) SIMD_ROWS(fsubs) SIMD_ROWS(fmovs) SIMD_ROWS(mov32) SIMD_ROWS(fmachs) SIMD_ROWS(faddhs)
SIMD_ROWS(fmuls) SIMD_ROWS(fmaxs) SIMD_ROWS(fnegs)
SIMD_ROWS(fh2s) SIMD_ROWS(fs2h) SIMD_ROWS(fmacs)

#define SIMD_STRIDE(OP, STRIDE)                                                                                     \
  TEST_CASE("wafer-fabric simd: " #OP " on wse3 with source stride " #STRIDE " (len 40)", "[wafer-fabric][simd]") {  \
    simd_row(Op::OP, "wse3", STRIDE, 40);                                                                           \
  }
SIMD_STRIDE(faddh, 0) SIMD_STRIDE(faddh, 2) SIMD_STRIDE(faddh, 3) SIMD_STRIDE(faddh, 5) SIMD_STRIDE(faddh, 6)
SIMD_STRIDE(faddh, 7) SIMD_STRIDE(faddh, 9) SIMD_STRIDE(faddh, 8) SIMD_STRIDE(faddh, 16) SIMD_STRIDE(faddh, 4)
SIMD_STRIDE(fadds, 3) SIMD_STRIDE(fadds, 7) SIMD_STRIDE(fadds, 8) SIMD_STRIDE(fh2s, 15) SIMD_STRIDE(fs2h, 10)

// ---------------------------------------------------------------------------------------------
// SRAM bank conflicts (pe.bank_conflicts, wafer.md PE SRAM: two reads per cycle must hit banks with
// b1 % 4 != b2 % 4; 16-bit words interleaved over 8 banks): a group of elements whose two source
// reads start in conflicting banks costs one extra cycle.

TEST_CASE("wafer-fabric: with bank conflicts on, fadds over two arrays 256 bytes apart pays a cycle per group", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.bank_conflicts = true;
  // a at byte 0 (bank 0), b at byte 256 (word 128, bank 0): every group of 2 conflicts.
  op_contract(c, ".data a f32 64\n.data b f32 64\n.data d f32 64\n.dsd am mem1d a\n.dsd bm mem1d b\n.dsd dm mem1d d", "fadds dm, am, bm", 16 + 32 + 32);
}

TEST_CASE("wafer-fabric: with bank conflicts on, sources 4 bytes further apart (banks 0 and 2) run at full width", "[wafer-fabric]") {
  WaferConfig c = preset_config("wse2");
  c.bank_conflicts = true;
  op_contract(c, ".data a f32 64\n.data b f32 65\n.data d f32 64\n.dsd am mem1d a\n.dsd bm mem1d b off=1\n.dsd dm mem1d d", "fadds dm, am, bm", 16 + 32);
}

TEST_CASE("wafer-fabric: bank conflicts are off by default (wse2 preset)", "[wafer-fabric]") {
  CHECK_FALSE(preset_config("wse2").bank_conflicts);
  op_contract("wse2", ".data a f32 64\n.data b f32 64\n.data d f32 64\n.dsd am mem1d a\n.dsd bm mem1d b\n.dsd dm mem1d d", "fadds dm, am, bm", 16 + 32);
}

// ---------------------------------------------------------------------------------------------
// Control tasks: a control wavelet whose index half names a control task's id fires it (data half
// in wv); data wavelets on the same color still fire the data task.

TEST_CASE("wafer-fabric: a control wavelet fires the control task it names, after the data before it", "[wafer-fabric]") {
  const char* send = R"(
.data x f32 3 fill=1.5
.data c i32 1 fill=2621447     # (40 << 16) | 7: control task 40, data 7
.dsd xm mem1d x
.dsd cm mem1d c
.dsd out fabout f32 color=1 queue=2 len=3
.dsd ctl fabout i32 color=1 queue=2 len=1 control
.task main local id=8 active
  fmovs out, xm
  mov32 ctl, cm
  halt
)";
  const char* recv = R"(
.data y i32 2 fill=0
.dsd y0 mem1d y len=1
.dsd y1 mem1d y off=1 len=1
.task on_data data id=1 color=1
  add r0, r0, 1
  ret
.task on_ctl control id=40
  mov32 y0, wv
  mov32 y1, r0
  halt
)";
  const WaferConfig c = preset_config("wse2");
  const std::string layout = R"({"fabric": {"width": 4, "height": 1}, "rects": [
    {"name": "s", "x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe", "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}]},
    {"name": "m", "x": 1, "y": 0, "width": 2, "height": 1, "routes": [{"color": 1, "rx": ["W"], "tx": ["E"]}]},
    {"name": "r", "x": 3, "y": 0, "width": 1, "height": 1, "program": "recv.pe", "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}]}]})";
  Run r(c, load({{"send.pe", send}, {"recv.pe", recv}}, layout, c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  const auto y = r.fab->read_array(3, 0, "y");
  CHECK(y[0] == 7.0f);  // wv = the control wavelet's data half
  CHECK(y[1] == 3.0f);  // the three data wavelets fired on_data first
  const auto d = deliveries_at(*r.fab, 3, 0);
  REQUIRE(d.size() == 4);
  CHECK(d[3].payload == 2621447u);
  // The control task starts when the wavelet is readable and runs two one-element DSD ops and halt.
  CHECK(r.fab->halt_cycle(3, 0) >= d[3].cycle + 2 * (c.setup_cycles + 1) + 1);
  CHECK(r.fab->halt_cycle(3, 0) <= d[3].cycle + 2 * (c.setup_cycles + 1) + 1 + 1);
  CHECK(r.fab->stats().tasks_run == 1 + 3 + 1);
}

namespace {
void star_advance(int hop, int interval = 1) {
  // spcl/spatial-collectives modules/star.csl: every sender's route takes its own PE (RAMP) first,
  // then, once its `.advance_switch` fabout has sent its last wavelet, the senders beyond it (W).
  WaferConfig c = preset_config("wse2");
  c.hop_latency = hop;
  c.fmacs_interval = interval;  // (2: a sender makes a wavelet every other cycle)
  const std::string layout = R"({"fabric": {"width": 4, "height": 1}, "rects": [
    {"name": "s", "x": 0, "y": 0, "width": 3, "height": 1, "program": "send.pe", "params": {"val": "px + 1"},
     "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"], "switch": [{"rx": ["W"]}], "ring": false}]},
    {"name": "r", "x": 3, "y": 0, "width": 1, "height": 1, "program": "root.pe", "params": {"n": 48},
     "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}]}]})";
  Run r(c, load({{"send.pe", fixtures::kStarSend}, {"root.pe", fixtures::kStarRoot}}, layout, c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  // The nearest sender's values first, then the next one's: each switch opens after its PE's last.
  std::vector<float> want;
  for (float v : {3.0f, 2.0f, 1.0f}) want.insert(want.end(), 16, v);
  CHECK(r.fab->read_array(3, 0, "y") == want);
  const auto d = deliveries_at(*r.fab, 3, 0);
  REQUIRE(d.size() == 48);
  // The farther streams wait in the routers' buffers (16 values: more than a buffer holds), so the root
  // takes one wavelet a cycle throughout.
  if (interval == 1) {
    for (size_t i = 1; i < d.size(); ++i) CHECK(d[i].cycle == d[0].cycle + static_cast<int64_t>(i));
    // The first leaves PE 2 at setup + 1 and crosses one link: readable at setup + 1 + hop + 1.
    CHECK(d[0].cycle == c.setup_cycles + 2 + hop);
  }
  // The switch opens in the cycle after the last wavelet passes: the next stream's head, waiting in
  // the buffer, follows it at once (also when the sender was slower than the links).
  CHECK(d[16].cycle == d[15].cycle + 1);
  CHECK(d[32].cycle == d[31].cycle + 1);
}
}  // namespace

TEST_CASE("wafer-fabric: a fabout with advance switches its router after its last wavelet: the star reduce's streams reach the root one after another without a gap (hop latency 1)", "[wafer-fabric]") {
  star_advance(1);
}
TEST_CASE("wafer-fabric: a fabout with advance switches its router after its last wavelet: the star reduce's streams reach the root one after another without a gap (hop latency 2)", "[wafer-fabric]") {
  star_advance(2);
}
TEST_CASE("wafer-fabric: a fabout with advance from a sender at half rate (simd.fmacs_interval 2): the stream behind it follows its last wavelet in the next cycle", "[wafer-fabric]") {
  star_advance(1, 2);
}

TEST_CASE("wafer-fabric: the last wavelet of a fabout with advance stays data: a receiver with control task 0 reads a payload of 0 into its fabin", "[wafer-fabric]") {
  const char* send = R"(
.data x f32 4 fill=0           # fp32 0.0: an index half of 0, control task 0's id
.dsd xm mem1d x
.dsd out fabout f32 color=1 queue=2 len=4 advance
.task main local id=8 active
  fmovs out, xm
  halt
)";
  const char* recv = R"(
.data y f32 4 fill=7
.data f i32 1 fill=0
.dsd ym mem1d y
.dsd fm mem1d f
.dsd in fabin f32 color=1 queue=1 len=4
.task main local id=8 active
  fmovs ym, in
  halt
.task ctl control id=0
  mov32 fm, 1
  ret
)";
  const WaferConfig c = preset_config("wse2");
  const std::string layout = R"({"fabric": {"width": 2, "height": 1}, "rects": [
    {"name": "s", "x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe", "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}]},
    {"name": "r", "x": 1, "y": 0, "width": 1, "height": 1, "program": "recv.pe", "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}]}]})";
  Run r(c, load({{"send.pe", send}, {"recv.pe", recv}}, layout, c));
  r.go();
  INFO(r.fab->error().value_or(""));
  REQUIRE_FALSE(r.fab->error());
  CHECK(r.fab->read_array(1, 0, "y") == std::vector<float>{0, 0, 0, 0});
  CHECK(r.fab->read_array(1, 0, "f")[0] == 0.0f);  // (i32 0 reads as 0.0f) ctl never ran
  CHECK(r.fab->stats().tasks_run == 2);
}

TEST_CASE("wafer-fabric: a PE whose control task never gets its wavelet is reported waiting for it", "[wafer-fabric]") {
  const char* prog = ".data y i32 1\n.dsd ym mem1d y\n.task on_ctl control id=41\n  mov32 ym, wv\n  halt\n";
  const WaferConfig c = preset_config("wse2");
  FabricOptions o;
  o.deadlock_window = 100;
  Run r(c, load({{"p.pe", prog}}, R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "p", "x": 0, "y": 0, "width": 1, "height": 1, "program": "p.pe"}]})", c), o);
  r.go();
  REQUIRE(r.fab->error());
  CHECK_THAT(*r.fab->error(), Contains("'on_ctl' waits for a control wavelet naming id 41"));
}

// ---------------------------------------------------------------------------------------------
// Faults on the fabric: dropped wavelets and SRAM bits at a cycle.

TEST_CASE("wafer-fabric: dropping 3 wavelets on a link loses exactly those and the receiver is reported stuck", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  FabricOptions o;
  o.deadlock_window = 200;
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(5, 16, {4}), c), o);
  Fabric::WaveletDrop d;
  d.x = 2;
  d.y = 0;
  d.dir = Dir::E;
  d.color = 1;
  d.count = 3;
  r.fab->add_fault(d);
  r.go();
  REQUIRE(r.fab->error());
  CHECK_THAT(*r.fab->error(), Contains("deadlock"));
  CHECK_THAT(*r.fab->error(), Contains("PE (4,0)"));
  CHECK(deliveries_at(*r.fab, 4, 0).size() == 13);
  CHECK(r.fab->stats().dropped_wavelets == 3);
  REQUIRE(r.fab->faults_fired().size() == 1);
  // Wavelet 0 leaves router (2,0) at setup + 1 + 2 hops = 19; wavelets 1 and 2 follow a cycle apart.
  CHECK(r.fab->faults_fired()[0].count == 3);
  CHECK(r.fab->faults_fired()[0].first_cycle == c.setup_cycles + 1 + 2);
  CHECK(r.fab->faults_fired()[0].last_cycle == c.setup_cycles + 1 + 2 + 2);
  CHECK(r.fab->link_wavelets(2, 0, Dir::E) == 13);
  CHECK_THROWS_AS(r.fab->add_fault(Fabric::WaveletDrop{2, 0, Dir::N, 1, 0, 1}), InputError);  // color 1 never goes N there
}

TEST_CASE("wafer-fabric: an SRAM bit flipped at a cycle changes what is read after it, not before", "[wafer-fabric]") {
  // The sender streams x (1.5 each) from cycle 16 (setup), one element per cycle (fmovs width 2,
  // limited by the output queue and link); flip the sign of x[10] at cycle 20 and of x[1] at cycle 30.
  const WaferConfig c = preset_config("wse2");
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(3, 16, {2}), c));
  r.fab->add_fault(Fabric::SramFlip{0, 0, 10 * 4 + 3, 7, 20, -1});  // byte 3 bit 7 = sign of x[10]
  r.fab->add_fault(Fabric::SramFlip{0, 0, 1 * 4 + 3, 7, 30, -1});   // x[1] was sent long before
  r.fab->add_fault(Fabric::SramFlip{0, 0, 2 * 4 + 3, 7, 100000, -1});  // after the run's end: never fires
  r.go();
  REQUIRE_FALSE(r.fab->error());
  const auto y = r.fab->read_array(2, 0, "y");
  for (int i = 0; i < 16; ++i) CHECK(y[static_cast<size_t>(i)] == (i == 10 ? -1.5f : 1.5f));
  CHECK(r.fab->read_array(0, 0, "x")[1] == -1.5f);  // it did flip, after x[1] had left
  CHECK(r.fab->faults_fired()[0].count == 1);
  CHECK(r.fab->faults_fired()[0].first_cycle == 20);
  CHECK(r.fab->faults_fired()[1].first_cycle == 30);
  CHECK(r.fab->stats().cycles > 30);
  CHECK(r.fab->faults_fired()[2].count == 0);
  CHECK(r.fab->read_array(0, 0, "x")[2] == 1.5f);
}

// ---------------------------------------------------------------------------------------------
// Host-memory budget: a fabric that would not fit stops before it is built, naming what it needs;
// SRAM pages written during a run past the budget fail the run.

TEST_CASE("wafer-fabric: a host-memory budget below the fabric's needs stops load() with the figure", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  models::set_fs_resolution();
  LoadedLayout l = load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(64, 16, {63}), c);
  FabricOptions small;
  small.host_memory_budget = 4096;
  Fabric f("small", c, small);
  try {
    f.load(l);
    FAIL("load() should have thrown");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Contains("needs about") && Contains("MiB of host memory") && Contains("raise run.host_memory"));
  }
}

TEST_CASE("wafer-fabric: SRAM pages written past the host-memory budget fail the run", "[wafer-fabric]") {
  const char* prog = ".data x f32 4096 fill=1\n.data y f32 4096\n.dsd xm mem1d x\n.dsd ym mem1d y\n.task main local id=8 active\n  fmovs ym, xm\n  halt\n";
  const std::string layout = R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "p", "x": 0, "y": 0, "width": 1, "height": 1, "program": "p.pe"}]})";
  const WaferConfig c = preset_config("wse2");
  models::set_fs_resolution();
  LoadedLayout l = load({{"p.pe", prog}}, layout, c);
  Fabric free_fab("free", c, FabricOptions{});
  free_fab.load(l);
  const int64_t need = free_fab.estimated_host_bytes();
  REQUIRE(need > 16 * 1024);  // x's 32 pages at least
  FabricOptions o;
  o.host_memory_budget = need + 4 * FabricStats::kPageBytes;  // y needs 32 more pages; 4 are left
  Fabric tight("tight", c, o);
  tight.load(l);
  tight.start();
  free_fab.start();
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(free_fab.finished());
  CHECK_FALSE(free_fab.error());
  REQUIRE(tight.error());
  CHECK_THAT(*tight.error(), Contains("PE (0,0): SRAM pages written so far need") && Contains("raise run.host_memory"));
}

// ---------------------------------------------------------------------------------------------
// Point-to-point latency over 1..128 hops (one multicast row: receivers at 1, 2, 4, ..., 128 hops
// from the sender): the first wavelet is readable at setup + 1 + N hops + 1, i.e. 1.000 cycle per
// hop at router.hop_latency 1 and 2.000 at 2 (the 3P silicon figure). Printed as a table.
namespace {
void p2p_sweep(int64_t hop) {
  WaferConfig c = preset_config("wse2");
  c.hop_latency = hop;
  const std::vector<int> rx = {1, 2, 4, 8, 16, 32, 64, 128};
  Run r(c, load({{"send.pe", kSend}, {"recv.pe", kRecv}}, row_layout(129, 16, rx), c));
  r.go();
  REQUIRE_FALSE(r.fab->error());
  std::ostringstream table;
  table << "hops  first arrival  cycles/hop (hop latency " << hop << ")\n";
  for (const int n : rx) {
    const auto d = deliveries_at(*r.fab, n, 0);
    REQUIRE(d.size() == 16);
    CHECK(d[0].cycle == c.setup_cycles + 1 + n * hop + 1);
    table << n << "  " << d[0].cycle << "  " << static_cast<double>(d[0].cycle - (c.setup_cycles + 2)) / n << "\n";
  }
  WARN(table.str());
}
}  // namespace

TEST_CASE("wafer-fabric: point-to-point latency over 1..128 hops is 1 cycle per hop (hop latency 1)", "[wafer-fabric]") { p2p_sweep(1); }
TEST_CASE("wafer-fabric: point-to-point latency over 1..128 hops is 2 cycles per hop (hop latency 2)", "[wafer-fabric]") { p2p_sweep(2); }

// eager_memory_ops: memory-only DSD ops computed at issue give the same cycles, counters and values
// as element by element (the 8x8 GEMV micro kernel: fmacs over SRAM per x wavelet).
namespace {
// The run `b` of the 8x8 GEMV is `a`'s: cycles, counters, every PE's halt cycle, task ends and y,
// with fewer events (the point of both fast paths).
void check_same_gemv_run(const Fabric& a, const Fabric& b) {
  REQUIRE_FALSE(a.error());
  REQUIRE_FALSE(b.error());
  CHECK(a.stats().cycles == b.stats().cycles);
  CHECK(a.stats().busy_cycles == b.stats().busy_cycles);
  CHECK(a.stats().dsd_elements == b.stats().dsd_elements);
  CHECK(a.stats().instructions == b.stats().instructions);
  CHECK(a.stats().tasks_run == b.stats().tasks_run);
  CHECK(b.stats().events < a.stats().events);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      CHECK(a.halt_cycle(x, y) == b.halt_cycle(x, y));
      for (const char* task : {"main", "on_x", "reduce"}) CHECK(a.task_end(x, y, task) == b.task_end(x, y, task));
      CHECK(a.read_array(x, y, "y") == b.read_array(x, y, "y"));
    }
}
}  // namespace

TEST_CASE("wafer-fabric: eager memory-only ops give the same run as element by element", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  const SlowAndEager r(c, load_layout(kRoot + "/scenarios/wafer/micro/gemv_8x8.json", c));
  const Fabric &a = *r.slow, &b = *r.fast;
  check_same_gemv_run(a, b);
  REQUIRE(a.op_records().size() == b.op_records().size());
  for (size_t i = 0; i < a.op_records().size(); ++i) {
    CHECK(a.op_records()[i].start == b.op_records()[i].start);
    CHECK(a.op_records()[i].end == b.op_records()[i].end);
  }
}

// A PE whose ops are not recorded runs on past its memory-only ops (computed at issue) in local
// time, and is not woken at a task's end when nothing could fire then: the same run as element by
// element; the one recorded PE keeps its ops' records, in the same order.
TEST_CASE("wafer-fabric: PEs running on past memory-only ops give the same run", "[wafer-fabric]") {
  const WaferConfig c = preset_config("wse2");
  const SlowAndEager r(c, load_layout(kRoot + "/scenarios/wafer/micro/gemv_8x8.json", c), true);
  const Fabric &a = *r.slow, &b = *r.fast;
  check_same_gemv_run(a, b);
  std::vector<OpRecord> corner;
  for (const auto& o : a.op_records())
    if (o.x == 0 && o.y == 0) corner.push_back(o);
  REQUIRE(corner.size() == b.op_records().size());
  for (size_t i = 0; i < corner.size(); ++i) {
    CHECK(corner[i].instr == b.op_records()[i].instr);
    CHECK(corner[i].start == b.op_records()[i].start);
    CHECK(corner[i].end == b.op_records()[i].end);
  }
}

// The PE functions (mapper/wafer functions.cpp: the PEs have no exp, divide, tanh, erf or sqrt
// instruction), built into a one-PE program and run, against the C library.
namespace {
// A one-PE program: arrays x, r, t, u, v, w (n floats) with DSDs xm, rm, tm, um, vm, wm, and one task
// whose body `body` builds.
// (`more`: two more arrays, p and q, for functions of more temporaries.)
ProgramTemplate pe_function(const std::function<void(ProgramTemplate&)>& body, int64_t n, bool more = false) {
  ProgramTemplate t("f.pe");
  for (const char* a : {"x", "r", "t", "u", "v", "w", "p", "q"}) {
    if (!more && (*a == 'p' || *a == 'q')) continue;
    t.data(a, Elem::f32, n);
    t.mem1d(std::string(a) + "m", a);
  }
  t.task("main", TaskKind::local, 8, -1, -1, true);
  body(t);
  t.op(Op::halt, {});
  return t;
}
std::vector<float> run_pe_function(const std::function<void(ProgramTemplate&)>& body, const std::vector<float>& in, int64_t n,
                                   const std::string& result = "x") {
  const WaferConfig c = preset_config("wse2");
  const std::map<std::string, ProgramTemplate> progs{{"f.pe", pe_function(body, n)}};
  const std::string layout = R"({"fabric": {"width": 1, "height": 1}, "rects": [{"name": "pe", "x": 0, "y": 0, "width": 1, "height": 1, "program": "f.pe"}]})";
  Run r(c, load_layout_text(layout, "layout.json", "", c, nullptr, &progs));
  r.fab->write_array(0, 0, "x", in);
  r.go();
  REQUIRE_FALSE(r.fab->error());
  return r.fab->read_array(0, 0, result);
}
// Several functions at once (one elaboration per process): body i on PE (i, 0) of a 1-row
// fabric, each over its own copy of `in`; the results in order.
std::vector<std::vector<float>> run_pe_functions(const std::vector<std::function<void(ProgramTemplate&)>>& bodies, const std::vector<float>& in,
                                                 bool more = false) {
  const WaferConfig c = preset_config("wse2");
  const int64_t n = static_cast<int64_t>(in.size());
  std::map<std::string, ProgramTemplate> progs;
  nlohmann::json layout = {{"fabric", {{"width", bodies.size()}, {"height", 1}}}, {"rects", nlohmann::json::array()}};
  for (size_t i = 0; i < bodies.size(); ++i) {
    const std::string file = "f" + std::to_string(i) + ".pe";
    ProgramTemplate t = pe_function(bodies[i], n, more);
    progs.emplace(file, t);
    layout["rects"].push_back({{"name", "pe" + std::to_string(i)}, {"x", i}, {"y", 0}, {"width", 1}, {"height", 1}, {"program", file}});
  }
  Run r(c, load_layout_text(layout.dump(), "layout.json", "", c, nullptr, &progs));
  for (size_t i = 0; i < bodies.size(); ++i) r.fab->write_array(static_cast<int>(i), 0, "x", in);
  r.go();
  REQUIRE_FALSE(r.fab->error());
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < bodies.size(); ++i) out.push_back(r.fab->read_array(static_cast<int>(i), 0, "x"));
  return out;
}
}  // namespace

TEST_CASE("wafer-fabric: the PE exp (scaling and squaring of a Taylor polynomial) is within 5e-6 relative on [-20, 0] (measured 4.1e-6) and 1e-8 below", "[wafer-fabric]") {
  std::vector<float> in;
  for (int i = 0; i <= 400; ++i) in.push_back(-0.05f * static_cast<float>(i));  // 0 .. -20
  for (float v : {-25.0f, -50.0f, -80.0f, -200.0f, -1e30f}) in.push_back(v);
  const auto out = run_pe_function([](ProgramTemplate& t) { exp_ops(t, "xm", "tm"); }, in, static_cast<int64_t>(in.size()));
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = std::exp(static_cast<double>(in[i]));
    if (in[i] >= -20.0f) worst = std::max(worst, std::abs(out[i] - want) / want);
    else CHECK(std::abs(out[i] - want) <= 1e-8);
    CHECK(out[i] >= 0.0f);
  }
  INFO("worst relative error on [-20, 0]: " << worst);
  CHECK(worst <= 5e-6);  // fp32 rounding in the Horner steps, multiplied by 16 through the squarings
  CHECK(std::abs(out[0] - 1.0) <= 1e-6);
}

TEST_CASE("wafer-fabric: the PE reciprocal (Newton) is within 1e-6 relative over [1, 10]", "[wafer-fabric]") {
  std::vector<float> in;
  for (int i = 0; i <= 90; ++i) in.push_back(1.0f + 0.1f * static_cast<float>(i));
  const auto out = run_pe_function([](ProgramTemplate& t) { recip_ops(t, "rm", "xm", "um", 1.0, 10.0); }, in, static_cast<int64_t>(in.size()), "r");
  for (size_t i = 0; i < in.size(); ++i) CHECK(std::abs(out[i] * static_cast<double>(in[i]) - 1.0) <= 1e-6);
}

TEST_CASE("wafer-fabric: the PE tanh (expm1 polynomial, doubling, Newton reciprocal) is within 1e-6 relative on [-20, 20]", "[wafer-fabric]") {
  std::vector<float> in;
  for (int i = -400; i <= 400; ++i) in.push_back(0.05f * static_cast<float>(i));
  for (float v : {1e-6f, -3e-5f, 1e-3f, 0.3f, 50.0f, -1e30f}) in.push_back(v);
  const auto out = run_pe_function([](ProgramTemplate& t) { tanh_ops(t, "xm", "tm", "um", "rm"); }, in, static_cast<int64_t>(in.size()));
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = std::tanh(static_cast<double>(in[i]));
    const double err = std::abs(out[i] - want) / std::max(std::abs(want), 1e-30);
    if (in[i] != 0.0f) worst = std::max(worst, err);
    else CHECK(out[i] == 0.0f);
  }
  INFO("worst relative error: " << worst);
  CHECK(worst <= 1e-6);
}

TEST_CASE("wafer-fabric: the PE GELU (erf by Abramowitz-Stegun 7.1.26 with the exp polynomial) is within 2.5e-7 (1 + |x|) of 0.5 x (1 + erf(x / sqrt 2)) on [-10, 10]", "[wafer-fabric]") {
  std::vector<float> in;
  for (int i = -200; i <= 200; ++i) in.push_back(0.05f * static_cast<float>(i));
  for (float v : {1e-6f, -3e-5f, 1e-3f, 20.0f, -20.0f, 1e30f, -1e30f}) in.push_back(v);
  const auto out = run_pe_function([](ProgramTemplate& t) { gelu_ops(t, "xm", "tm", "um", "rm", "vm"); }, in, static_cast<int64_t>(in.size()));
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double x = in[i], want = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    const double err = std::abs(out[i] - want) / (1.0 + std::min(std::abs(x), 1e6));
    if (std::abs(x) <= 20) worst = std::max(worst, err);
  }
  INFO("worst error / (1 + |x|): " << worst);
  CHECK(worst <= 2.5e-7);
  CHECK(out[in.size() - 2] == 1e30f);   // gelu(x) = x for large x
  CHECK(out[in.size() - 1] == 0.0f);    // and 0 for large negative x
}

TEST_CASE("wafer-fabric: the PE rsqrt of LayerNorm (32 Newton steps from 0.01) is within 1e-6 relative on [1e-5, 3e4]", "[wafer-fabric]") {
  std::vector<float> in;
  for (double v = 1e-5; v <= 3e4; v *= 1.07) in.push_back(static_cast<float>(v));
  const auto out = run_pe_function([](ProgramTemplate& t) { rsqrt_ops(t, "rm", "xm", "tm"); }, in, static_cast<int64_t>(in.size()), "r");
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) worst = std::max(worst, std::abs(out[i] * std::sqrt(static_cast<double>(in[i])) - 1.0));
  INFO("worst relative error: " << worst);
  CHECK(worst <= 1e-6);
}

// The wide-range rsqrt and reciprocal (Adam's bias update: sqrt(v_hat) + eps and its reciprocal,
// whatever the gradients' scale) over fp32's range, 2^-120 to 2^120, against the C library.
TEST_CASE("wafer-fabric: the PE wide-range rsqrt and reciprocal are within a few ulp over 2^-120 .. 2^120", "[wafer-fabric]") {
  std::vector<float> in = {0.0f};  // (first: Adam's v_hat of a gradient that was always 0)
  for (double v = std::ldexp(1.0, -120); v <= std::ldexp(1.0, 120); v *= 1.2371) in.push_back(static_cast<float>(v));  // (SRAM: ~1100 values)
  for (int e = -120; e <= 120; e += 2)  // at and around powers of two (the scaling's thresholds)
    for (float v : {std::ldexp(1.0f, e), std::nextafter(std::ldexp(1.0f, e), 0.0f), std::nextafter(std::ldexp(1.0f, e), INFINITY)}) in.push_back(v);
  auto body = [](bool rsqrt) {  // (the result into x, which run_pe_functions reads)
    return [rsqrt](ProgramTemplate& t) {
      wide_ops(t, rsqrt, "rm", "xm", "tm", "um", "vm", "wm");
      t.op(Op::fmovs, {"xm", "rm"});
    };
  };
  const auto out = run_pe_functions({body(true), body(false)}, in);
  double worst_r = 0, worst_q = 0;
  for (size_t i = 1; i < in.size(); ++i) {
    const double x = in[i];
    worst_r = std::max(worst_r, std::abs(out[0][i] * std::sqrt(x) - 1.0));
    worst_q = std::max(worst_q, std::abs(out[1][i] * x - 1.0));
  }
  INFO("rsqrt worst " << worst_r << ", reciprocal worst " << worst_q << " over " << in.size() << " inputs");
  CHECK(worst_r <= 4e-7);
  CHECK(worst_q <= 4e-7);
  // 0: a finite rsqrt (that of 2^-120), so v_hat rsqrt(v_hat) = 0
  CHECK(std::abs(out[0][0] / std::ldexp(1.0, 60) - 1.0) <= 2e-7);
}

namespace {
Unary fn(Unary::Kind k, double a = 0, double b = 0) { return {k, a, b, "", {}}; }  // an elementwise function, no graph op
}  // namespace

// The estimate counts the exp and reciprocal generators' operations by constants (kExpOps,
// kRecipOps; the softmax and attention use them): they must be the DSD operations the generators
// build; and the elementwise functions' cycles (unary_cycles, from the template) are the
// instantiated program's.
TEST_CASE("wafer-fabric: the exp, reciprocal, rsqrt and elementwise generators build the operation counts the estimate uses", "[wafer-fabric]") {
  auto ops = [](const std::function<void(ProgramTemplate&)>& body) {
    const Program p = pe_function(body, 4).instantiate({});
    int n = 0;
    for (const auto& in : p.instrs) n += op_info(in.op).cls == OpClass::dsd ? 1 : 0;
    return n;
  };
  CHECK(ops([](ProgramTemplate& t) { exp_ops(t, "xm", "tm"); }) == kExpOps);
  CHECK(ops([](ProgramTemplate& t) { recip_ops(t, "rm", "xm", "um", 1.0, 2.0); }) == kRecipOps);
  CHECK(ops([](ProgramTemplate& t) { rsqrt_ops(t, "rm", "xm", "tm"); }) == 1 + 4 * kRsqrtIters);
  // For every elementwise function:
  using K = Unary::Kind;
  for (const Unary& u : {fn(K::relu), fn(K::leaky_relu, 0.1), fn(K::leaky_relu, 3.0), fn(K::clip, 0, 6), fn(K::tanh), fn(K::sigmoid),
                        fn(K::hard_sigmoid, 0.2, 0.5), fn(K::hard_swish), fn(K::swish, 1.0), fn(K::swish, 2.0), fn(K::gelu),
                        fn(K::gelu_tanh), fn(K::abs), fn(K::neg), fn(K::mul, 2.0), fn(K::add, 1.0), fn(K::elu, 1.0), fn(K::softplus), fn(K::mish),
                        fn(K::keep), fn(K::combine, 1, 1), fn(K::combine, 3, 0)}) {
    INFO("function " << static_cast<int>(u.kind));
    // unary_cycles (each op at its own width: fmacs is not SIMD) against the cycles of the
    // instantiated program's instructions over its 4-element arrays, on a preset whose widths differ.
    const WaferConfig cfg = preset_config("wse2");
    const Program p = pe_function([u](ProgramTemplate& t) { unary_ops(t, u, "xm", {"tm", "um", "rm", "vm", "wm", "pm"}); }, 4, true).instantiate({});
    int64_t cycles = 0;
    for (const auto& in : p.instrs) cycles += op_info(in.op).cls == OpClass::dsd ? instr_cycles(p, in, cfg) : 0;
    CHECK(unary_cycles(u, 4, cfg) == cycles);
  }
}

// Every elementwise function of the chain ends (compile.hpp Unary, elementwise.cpp) run on a PE
// over [-30, 30] and at extremes, against the formula in double precision: the piecewise ones
// within an fp32 rounding or two, the ones built on exp within 5e-6 relative (the exp
// polynomial's error) down to -20 -- sigmoid keeps that relative accuracy for negative inputs too,
// no 1 - sigma cancellation -- and within 1e-8 below, and GELU's tanh form within 2.5e-7 (1 + |x|).
TEST_CASE("wafer-fabric: the PE elementwise functions (Relu .. GELU tanh form, Elu, Softplus, Mish) match their formulas on [-30, 30]", "[wafer-fabric]") {
  using K = Unary::Kind;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<float> in;
  for (int i = -600; i <= 600; ++i) in.push_back(0.05f * static_cast<float>(i));
  for (float v : {1e-6f, -3e-5f, 1e-3f, -1e-3f, 50.0f, -50.0f, 87.0f, -87.0f}) in.push_back(v);
  struct Case {
    Unary u;
    std::function<double(double)> f;
    double rel, abs;  // |out - f| <= rel |f| + abs (1 + |x|)
    bool exp_tail = false;  // built on exp: below -20 within exp_ops' 1e-8, times (1 + |x|)
  };
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const std::vector<Case> cases = {
      {fn(K::relu), [](double x) { return std::max(x, 0.0); }, 0, 0},
      {fn(K::leaky_relu, 0.1), [](double x) { return x > 0 ? x : 0.1 * x; }, 1.2e-7, 0},
      {fn(K::leaky_relu, 3.0), [](double x) { return x > 0 ? x : 3.0 * x; }, 1.2e-7, 0},
      {fn(K::clip, 0, 6), [](double x) { return std::clamp(x, 0.0, 6.0); }, 0, 0},
      {fn(K::clip, -inf, 1.5), [](double x) { return std::min(x, 1.5); }, 0, 0},
      {fn(K::sigmoid), sig, 5e-6, 0, true},
      {fn(K::hard_sigmoid, 0.2, 0.5), [](double x) { return std::clamp(0.2 * x + 0.5, 0.0, 1.0); }, 0, 1.2e-7},
      {fn(K::hard_swish), [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, 0, 2.4e-7},
      {fn(K::swish, 1.0), [&](double x) { return x * sig(x); }, 5e-6, 0, true},
      {fn(K::swish, 1.702), [&](double x) { return x * sig(1.702 * x); }, 5e-6, 0, true},
      {fn(K::gelu_tanh), [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, 0, 2.5e-7},
      {fn(K::abs), [](double x) { return std::abs(x); }, 0, 0},
      {fn(K::neg), [](double x) { return -x; }, 0, 0},
      {fn(K::mul, 0.3), [](double x) { return 0.3 * x; }, 1.2e-7, 0},
      {fn(K::add, -0.7), [](double x) { return x - 0.7; }, 0, 6e-8},
      {fn(K::elu, 1.0), [](double x) { return x > 0 ? x : std::expm1(x); }, 1e-6, 0},
      {fn(K::elu, 1.6732632423543772), [](double x) { return x > 0 ? x : 1.6732632423543772 * std::expm1(x); }, 1e-6, 0},
      {fn(K::softplus), [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }, 5e-6, 0, true},
      {fn(K::mish), [](double x) { return x * std::tanh(std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)))); }, 5e-6, 0, true},
  };
  std::vector<std::function<void(ProgramTemplate&)>> bodies;
  for (const Case& c : cases) bodies.push_back([u = c.u](ProgramTemplate& t) { unary_ops(t, u, "xm", {"tm", "um", "rm", "vm"}); });
  const auto outs = run_pe_functions(bodies, in);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const std::vector<float>& out = outs[ci];
    INFO("function " << static_cast<int>(c.u.kind) << " a " << c.u.a << " b " << c.u.b);
    double worst = -1;
    size_t at = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const double want = c.f(in[i]);
      const double x = in[i], tail = c.exp_tail && x * (c.u.kind == K::swish ? c.u.a : 1.0) < -20 ? 1e-8 : 0.0;
      const double excess = std::abs(out[i] - want) - c.rel * std::abs(want) - (c.abs + tail) * (1 + std::abs(x));
      if (excess > worst) worst = excess, at = i;
    }
    INFO("worst at x " << in[at] << ": " << out[at] << " against " << c.f(in[at]));
    CHECK(worst <= 0);
  }
}

// An op of two values of a chain end (elementwise.cpp: keep, combine) as the wafer compiler emits
// it for x - tanh(x) (Tanhshrink), x / (1 + |x|) (Softsign), (3x + 1/4) / x (a divisor of either
// sign down to 1e-6: fp32's range by wide_ops) and x x, against the formula: within 2.4e-7
// absolute (tanh's) and an fp32 rounding, or 1e-6 relative for the divisions (Newton's 1 / |d| and three roundings).
// A zero divisor gives 0 (documented; ONNX's Div gives an infinity).
TEST_CASE("wafer-fabric: ops of two chain-end values (x - tanh x, x / (1 + |x|), (3x + 1/4) / x, x x) match their formulas on a PE", "[wafer-fabric]") {
  using K = Unary::Kind;
  using B = Unary::Bin;
  std::vector<float> in;
  for (int i = -600; i <= 600; ++i) in.push_back(0.05f * static_cast<float>(i));
  for (float v : {1e-6f, -3e-5f, 1e-3f, -1e-3f, 50.0f, -50.0f, 87.0f, -87.0f, 3e7f, -2e-20f}) in.push_back(v);
  struct Case {
    std::vector<Unary> us;
    std::function<double(double)> f;
    double rel, abs;  // |out - f| <= rel |f| + abs
  };
  auto comb = [](B b, bool first) { return fn(K::combine, static_cast<double>(b), first ? 1.0 : 0.0); };
  const std::vector<Case> cases = {
      {{fn(K::keep), fn(K::tanh), comb(B::sub, true)}, [](double x) { return x - std::tanh(x); }, 1.2e-7, 2.4e-7},
      {{fn(K::keep), fn(K::abs), fn(K::add, 1.0), comb(B::div, true)}, [](double x) { return x / (1 + std::abs(x)); }, 1e-6, 0},
      {{fn(K::keep), fn(K::mul, 3.0), fn(K::add, 0.25), comb(B::div, false)}, [](double x) { return x == 0 ? 0.0 : (3 * x + 0.25) / x; }, 1e-6, 0},
      {{fn(K::keep), comb(B::mul, false)}, [](double x) { return x * x; }, 6e-8, 1e-45},  // (an fp32 subnormal at -2e-20)
  };
  std::vector<std::function<void(ProgramTemplate&)>> bodies;
  for (const Case& c : cases)
    bodies.push_back([us = c.us](ProgramTemplate& t) {
      for (const Unary& u : us) unary_ops(t, u, "xm", {"tm", "um", "rm", "vm", "wm", "pm", "qm"});
    });
  const auto outs = run_pe_functions(bodies, in, true);
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    INFO("case " << ci);
    double worst = -1;
    size_t at = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const double want = c.f(in[i]);
      const double excess = std::abs(outs[ci][i] - want) - c.rel * std::abs(want) - c.abs;
      if (excess > worst) worst = excess, at = i;
    }
    INFO("worst at x " << in[at] << ": " << outs[ci][at] << " against " << c.f(in[at]));
    CHECK(worst <= 0);
  }
}

// The PE's 16-bit float formats (bf16, cbf16: isa/wafer/isa.hpp Elem) against an independent
// reference: round to nearest even written with double arithmetic (|x| / quantum rounded by
// nearbyint, the quantum 2^(e - mantissa bits) with e clamped at the smallest normal exponent;
// above the largest finite value: inf). Exhaustive over the rounding decisions: for every finite
// 16-bit pattern p, fs2h on the PE of p's value, of the midpoint between p and the next pattern
// (a tie) and of the two fp32 values either side of that midpoint; plus zeros, infinities, NaN and
// fp32 subnormals. And fh2s of all 65,536 patterns (copied in as bits by mov16) against widen_bits.
// 64 PEs of 4,096 values each (one elaboration per test case).
namespace {
double ref_round(float xf, int mbits, int bias, double maxv) {
  const double x = xf;
  if (std::isnan(x) || std::isinf(x)) return x;
  const double a = std::fabs(x);
  if (a == 0) return x;
  int e2 = 0;
  std::frexp(a, &e2);
  const int e = std::max(e2 - 1, 1 - bias);
  const double q = std::ldexp(1.0, e - mbits);
  const double r = std::nearbyint(a / q) * q;  // ties to even (the default rounding mode)
  const double v = r > maxv ? INFINITY : r;
  return std::signbit(x) ? -v : v;
}

void check_half_format(Elem e, FloatFormat f, int mbits, int bias) {
  const FormatInfo& fi = format_info(f);
  const double maxv = (2.0 - std::ldexp(1.0, -mbits)) * std::ldexp(1.0, (1 << fi.exponent_bits) - 2 - bias);
  const uint32_t exp_mask = ((1u << fi.exponent_bits) - 1) << mbits;
  std::vector<float> in;
  for (uint32_t p = 0; p < 0x10000; ++p) {
    if ((p & exp_mask) == exp_mask) continue;  // inf / NaN patterns
    const float v = widen_bits(p, f);
    in.push_back(v);
    const bool neg = p & 0x8000u;
    const uint32_t mag = p & 0x7fffu;
    const double next = mag + 1 == exp_mask ? maxv + std::ldexp(1.0, static_cast<int>(std::floor(std::log2(maxv))) - mbits)
                                                  : std::fabs(static_cast<double>(widen_bits(mag + 1, f)));
    const double mid = (std::fabs(static_cast<double>(v)) + next) / 2;  // exact in fp32 (one more bit)
    const float m = static_cast<float>(neg ? -mid : mid);
    REQUIRE(static_cast<double>(m) == (neg ? -mid : mid));
    in.push_back(m);
    in.push_back(std::nextafter(m, 0.0f));
    in.push_back(std::nextafter(m, neg ? -INFINITY : INFINITY));
  }
  for (float s : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1e-30f, 3.0e9f, 4.3e9f})
    in.push_back(s);
  constexpr int64_t kW = 8, kH = 8, kN = 4096, kP = 1024;
  REQUIRE(in.size() <= static_cast<size_t>(kW * kH * kN));
  in.resize(static_cast<size_t>(kW * kH * kN), 1.0f);
  const std::string t(elem_name(e));
  const std::string prog = ".data x f32 4096\n.data h " + t + " 4096\n.data pi i16 1024\n.data ph " + t + " 1024\n.data pw f32 1024\n" +
                           ".dsd xm mem1d x\n.dsd hm mem1d h\n.dsd pim mem1d pi\n.dsd phm mem1d ph\n.dsd pwm mem1d pw\n" +
                           ".task main local id=8 active\n  fs2h hm, xm\n  mov16 phm, pim\n  fh2s pwm, phm\n  halt\n";
  const WaferConfig cfg = preset_config("wse2");
  const std::string layout = R"({"fabric": {"width": 8, "height": 8}, "rects": [{"name": "pes", "x": 0, "y": 0, "width": 8, "height": 8, "program": "h.pe"}]})";
  Run r(cfg, load({{"h.pe", prog}}, layout, cfg));
  for (int64_t y = 0; y < kH; ++y)
    for (int64_t x = 0; x < kW; ++x) {
      const size_t pe = static_cast<size_t>(y * kW + x);
      r.fab->write_array(x, y, "x", std::span<const float>(in.data() + pe * kN, kN));
      std::vector<float> pats(kP);
      for (int64_t i = 0; i < kP; ++i) pats[static_cast<size_t>(i)] = static_cast<float>(static_cast<int16_t>(static_cast<uint16_t>(pe * kP + static_cast<size_t>(i))));
      r.fab->write_array(x, y, "pi", pats);
    }
  r.go();
  REQUIRE_FALSE(r.fab->error());
  int64_t bad = 0, inexact = 0, checked = 0;
  for (int64_t y = 0; y < kH; ++y)
    for (int64_t x = 0; x < kW; ++x) {
      const size_t pe = static_cast<size_t>(y * kW + x);
      const auto h = r.fab->read_array(x, y, "h");
      const auto w = r.fab->read_array(x, y, "pw");
      for (int64_t i = 0; i < kN; ++i) {
        const float xi = in[pe * kN + static_cast<size_t>(i)];
        const double want = ref_round(xi, mbits, bias, maxv);
        const float got = h[static_cast<size_t>(i)];
        const bool ok = std::isnan(want) ? std::isnan(got) : (static_cast<double>(got) == want && std::signbit(got) == std::signbit(want));
        if (!ok && bad++ < 5) UNSCOPED_INFO(t << " fs2h(" << xi << ") gave " << got << ", reference " << want);
        ++checked;
      }
      for (int64_t i = 0; i < kP; ++i) {
        const uint32_t p = static_cast<uint32_t>(pe * kP + static_cast<size_t>(i));
        const float want = widen_bits(p, f), got = w[static_cast<size_t>(i)];
        const bool ok = std::isnan(want) ? std::isnan(got) : (float_bits(got) == float_bits(want));
        if (!ok && bad++ < 5) UNSCOPED_INFO(t << " fh2s(0x" << std::hex << p << std::dec << ") gave " << got << ", widen_bits " << want);
      }
    }
  // Most inputs are not representable (the midpoints are ties: rounding them all up or all down
  // would fail half of them).
  for (float v : in) inexact += std::fabs(ref_round(v, mbits, bias, maxv) - v) > 0;
  CHECK(checked == kW * kH * kN);
  CHECK(inexact > 100000);
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("wafer-fabric: cbf16 fs2h and fh2s on a PE agree with an independent round-to-nearest-even over every rounding boundary", "[wafer-fabric][half]") {
  check_half_format(Elem::cbf16, FloatFormat::cbf16, 9, 31);
}

TEST_CASE("wafer-fabric: bf16 fs2h and fh2s on a PE agree with an independent round-to-nearest-even over every rounding boundary", "[wafer-fabric][half]") {
  check_half_format(Elem::bf16, FloatFormat::bf16, 7, 127);
}
