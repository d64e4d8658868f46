// The fabric on several host threads (FabricOptions::threads, models/wafer/stripes.cpp): a run in
// stripes of PE rows must give what the sequential run gives -- outputs bit for bit, every
// counter, the summary the default trace draws, task ends, and the same words for a deadlock,
// the watchdog or a failure. Each case runs the same layout on fabrics of 1 and N threads in one
// elaboration and compares them.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <systemc>

#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "models/common/systemc_env.hpp"
#include "models/wafer/fabric.hpp"
#include "tests/unit/wafer_fixtures.hpp"

using namespace tessera;
using namespace tessera::wafer;
using Catch::Matchers::Contains;

namespace {

const std::string kRoot = TESSERA_SOURCE_DIR;

LoadedLayout load_text(const std::map<std::string, std::string>& files, const std::string& layout, const WaferConfig& c) {
  const auto d = std::filesystem::temp_directory_path() / ("tessera_wafer_stripes_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  for (const auto& [name, text] : files) std::ofstream(d / name) << text;
  LoadedLayout l = load_layout_text(layout, (d / "layout.json").string(), d.string(), c);
  std::filesystem::remove_all(d);
  return l;
}

// Fabrics of the same layout on 1 and on each of `threads` host threads, run together.
struct Runs {
  WaferConfig cfg;
  LoadedLayout layout;
  std::vector<std::unique_ptr<Fabric>> fabs;
  Runs(WaferConfig c, LoadedLayout l, const std::vector<int>& threads, FabricOptions opt = {}) : cfg(std::move(c)), layout(std::move(l)) {
    models::set_fs_resolution();
    opt.summary = true;
    opt.task_ends = true;
    std::vector<int> all{1};
    all.insert(all.end(), threads.begin(), threads.end());
    for (int n : all) {
      opt.threads = n;
      fabs.push_back(std::make_unique<Fabric>(("fabric_t" + std::to_string(n)).c_str(), cfg, opt));
      fabs.back()->load(layout);
    }
  }
  void go() {
    for (auto& f : fabs) f->start();
    sc_core::sc_start();
    models::after_systemc();
    for (auto& f : fabs) REQUIRE(f->finished());
  }
};

void same_series(const BinSeries& a, const BinSeries& b) {
  CHECK(a.width == b.width);
  CHECK(a.count == b.count);
  CHECK(a.weight == b.weight);
}

void same_span(const Span& a, const Span& b) {
  CHECK(a.first == b.first);
  CHECK(a.last == b.last);
  CHECK(a.count == b.count);
}

// Everything a report, trace or test reads from a run, run `k` against the sequential run.
void same_run(const Runs& r, size_t k, const std::vector<std::string>& arrays) {
  const Fabric& a = *r.fabs[0];
  const Fabric& b = *r.fabs[k];
  INFO("threads used " << b.threads_used());
  CHECK(a.error().value_or("") == b.error().value_or(""));
  const FabricStats& x = a.stats();
  const FabricStats& y = b.stats();
  CHECK(x.cycles == y.cycles);
  CHECK(x.busy_cycles == y.busy_cycles);
  CHECK(x.stall_cycles == y.stall_cycles);
  CHECK(x.instructions == y.instructions);
  CHECK(x.dsd_elements == y.dsd_elements);
  CHECK(x.tasks_run == y.tasks_run);
  CHECK(x.wavelet_hops == y.wavelet_hops);
  CHECK(x.ramp_deliveries == y.ramp_deliveries);
  CHECK(x.ramp_injections == y.ramp_injections);
  CHECK(x.color_hops == y.color_hops);
  CHECK(x.in_queue_high_water == y.in_queue_high_water);
  CHECK(x.out_queue_high_water == y.out_queue_high_water);
  CHECK(x.router_buffer_high_water == y.router_buffer_high_water);
  CHECK(x.sram_pages == y.sram_pages);
  const FabricSummary& s = a.summary();
  const FabricSummary& t = b.summary();
  same_series(s.busy, t.busy);
  same_series(s.delivered, t.delivered);
  same_series(s.hops, t.hops);
  REQUIRE(s.phases.size() == t.phases.size());
  for (size_t i = 0; i < s.phases.size(); ++i) same_span(s.phases[i].span, t.phases[i].span);
  REQUIRE(s.sent.size() == t.sent.size());
  for (size_t i = 0; i < s.sent.size(); ++i) same_span(s.sent[i], t.sent[i]), same_span(s.received[i], t.received[i]);
  REQUIRE(a.stuck_pes().size() == b.stuck_pes().size());
  for (size_t i = 0; i < a.stuck_pes().size(); ++i) CHECK(a.stuck_pes()[i].what == b.stuck_pes()[i].what);
  REQUIRE(a.stuck_routers().size() == b.stuck_routers().size());
  // Per-PE records (trace detail kernel and above), in the sequential order.
  REQUIRE(a.deliveries().size() == b.deliveries().size());
  for (size_t i = 0; i < a.deliveries().size(); ++i) {
    const DeliveryRecord &p = a.deliveries()[i], &q = b.deliveries()[i];
    CHECK((p.x == q.x && p.y == q.y && p.color == q.color && p.queue == q.queue && p.payload == q.payload && p.cycle == q.cycle));
  }
  REQUIRE(a.op_records().size() == b.op_records().size());
  for (size_t i = 0; i < a.op_records().size(); ++i) {
    const OpRecord &p = a.op_records()[i], &q = b.op_records()[i];
    CHECK((p.x == q.x && p.y == q.y && p.instr == q.instr && p.async == q.async && p.thread == q.thread && p.start == q.start && p.end == q.end && p.elements == q.elements));
  }
  REQUIRE(a.task_records().size() == b.task_records().size());
  for (size_t i = 0; i < a.task_records().size(); ++i) {
    const TaskRecord &p = a.task_records()[i], &q = b.task_records()[i];
    CHECK((p.x == q.x && p.y == q.y && p.task == q.task && p.start == q.start && p.end == q.end));
  }
  const LoadedLayout& L = r.layout;
  for (int64_t py = 0; py < L.layout.height; ++py)
    for (int64_t px = 0; px < L.layout.width; ++px) {
      if (!a.program(px, py)) continue;
      CHECK(a.halted(px, py) == b.halted(px, py));
      CHECK(a.halt_cycle(px, py) == b.halt_cycle(px, py));
      CHECK(a.busy_cycles(px, py) == b.busy_cycles(px, py));
      for (const auto& name : arrays)
        for (const auto& d : a.program(px, py)->data)
          if (d.name == name) CHECK(a.read_array(px, py, name) == b.read_array(px, py, name));
      for (const auto& tk : a.program(px, py)->tasks) CHECK(a.task_end(px, py, tk.name) == b.task_end(px, py, tk.name));
    }
}

}  // namespace

TEST_CASE("wafer-stripes: the gemv_8x8 example on 2, 3 and 8 threads (one row each) equals the sequential run, records too, twice", "[wafer-stripes]") {
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.record = true;  // every PE's deliveries, ops and tasks, in the sequential order
  Runs r(c, load_layout(kRoot + "/scenarios/wafer/micro/gemv_8x8.json", c), {2, 3, 8}, opt);
  for (int run = 0; run < 2; ++run) {  // a second run starts from the SRAM the first left
    r.go();
    REQUIRE_FALSE(r.fabs[0]->error());
    for (int py = 0; py < 8; ++py)
      for (float v : r.fabs[0]->read_array(7, py, "y")) CHECK((run == 0 ? v == 72.0f : v > 72.0f));
    CHECK(r.fabs[1]->threads_used() == 2);
    CHECK(r.fabs[2]->threads_used() == 3);
    CHECK(r.fabs[3]->threads_used() == 8);
    for (size_t k = 1; k < r.fabs.size(); ++k) same_run(r, k, {"y"});
  }
}

TEST_CASE("wafer-stripes: a cyclic route over two stripes deadlocks at the same cycle with the same words on 2 threads", "[wafer-stripes]") {
  // The 2x2 ring of test_wafer_fabric.cpp (wafer_fixtures.hpp): color 1 E, S, W, N, never
  // delivered; it crosses the stripes' boundary both ways.
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.deadlock_window = 1000;
  Runs r(c, load_text({{"send.pe", fixtures::kSend}}, fixtures::kRingLayout, c), {2}, opt);
  r.go();
  REQUIRE(r.fabs[0]->error());
  CHECK_THAT(*r.fabs[0]->error(), Contains("deadlock"));
  CHECK(r.fabs[1]->threads_used() == 2);
  same_run(r, 1, {"x"});
}

TEST_CASE("wafer-stripes: spinning tasks on two stripes stop at the watchdog's cycle on 2 threads as on one", "[wafer-stripes]") {
  const char* spin = R"(
.task main local id=8 active
top:
  jmp top
)";
  // Row 0: a spinning PE and a sender whose wavelets go south to a receiver in row 3 (the watchdog
  // stops the run while they travel); rows 1-2 relay; row 3 spins too.
  const std::string layout = R"({"fabric": {"width": 2, "height": 4}, "rects": [
    {"name": "spin0", "x": 0, "y": 0, "width": 1, "height": 1, "program": "spin.pe"},
    {"name": "snd", "x": 1, "y": 0, "width": 1, "height": 1, "program": "send.pe", "params": {"n": 300}, "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["S"]}]},
    {"name": "mid", "x": 1, "y": 1, "width": 1, "height": 2, "routes": [{"color": 1, "rx": ["N"], "tx": ["S"]}]},
    {"name": "rcv", "x": 1, "y": 3, "width": 1, "height": 1, "program": "recv.pe", "params": {"n": 300}, "routes": [{"color": 1, "rx": ["N"], "tx": ["RAMP"]}]},
    {"name": "spin3", "x": 0, "y": 3, "width": 1, "height": 1, "program": "spin.pe"}]})";
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.max_cycles = 150;
  Runs r(c, load_text({{"spin.pe", spin}, {"send.pe", fixtures::kSend}, {"recv.pe", fixtures::kRecv}}, layout, c), {2, 4}, opt);
  r.go();
  REQUIRE(r.fabs[0]->error());
  CHECK_THAT(*r.fabs[0]->error(), Contains("watchdog"));
  CHECK(r.fabs[1]->threads_used() == 2);
  same_run(r, 1, {"y"});
  same_run(r, 2, {"y"});
}

TEST_CASE("wafer-stripes: failures on two stripes in one cycle report the first in the sequential order on 2 threads", "[wafer-stripes]") {
  // Every PE moves a DSD out of its data area in the same cycle: the sequential run names the first
  // PE by key, (0,0); so must a run on 2 and 4 threads, whichever worker fails first in wall time.
  const char* send = R"(
.data x f32 16
.dsd xm mem1d x
.task main local id=8 active
  dsd_off xm, 100000
  halt
)";
  const std::string layout = R"({"fabric": {"width": 2, "height": 4}, "rects": [
    {"name": "all", "x": 0, "y": 0, "width": 2, "height": 4, "program": "send.pe"}]})";
  const WaferConfig c = preset_config("wse2");
  Runs r(c, load_text({{"send.pe", send}}, layout, c), {2, 4});
  for (int round = 0; round < 5; ++round) {  // a race, if there were one, would show in some rounds
    r.go();
    REQUIRE(r.fabs[0]->error());
    CHECK_THAT(*r.fabs[0]->error(), Contains("PE (0,0): ") && Contains("leaves the data area"));
    CHECK(r.fabs[1]->threads_used() == 2);
    CHECK(r.fabs[1]->error().value_or("") == *r.fabs[0]->error());
    CHECK(r.fabs[2]->error().value_or("") == *r.fabs[0]->error());
  }
}

TEST_CASE("wafer-stripes: a failure on one stripe ends a run on 2 threads with its message", "[wafer-stripes]") {
  // Both PEs write pages past the host-memory budget: which crosses it first depends on the
  // threads' timing (the budget counts every worker's pages), so only the words are checked.
  const char* ok = ".data x f32 4096 fill=1\n.data y f32 4096\n.dsd xm mem1d x\n.dsd ym mem1d y\n.task main local id=8 active\n  fmovs ym, xm\n  halt\n";
  const std::string layout = R"({"fabric": {"width": 1, "height": 2}, "rects": [
    {"name": "a", "x": 0, "y": 0, "width": 1, "height": 1, "program": "ok.pe"},
    {"name": "b", "x": 0, "y": 1, "width": 1, "height": 1, "program": "ok.pe"}]})";
  const WaferConfig c = preset_config("wse2");
  models::set_fs_resolution();
  LoadedLayout l = load_text({{"ok.pe", ok}}, layout, c);
  Fabric free_fab("free", c, FabricOptions{});
  free_fab.load(l);
  FabricOptions o;
  o.threads = 2;
  o.host_memory_budget = free_fab.estimated_host_bytes() + 4 * FabricStats::kPageBytes;  // y needs 32 pages a PE
  Fabric tight("tight", c, o);
  tight.load(l);
  tight.start();
  sc_core::sc_start();
  models::after_systemc();
  REQUIRE(tight.finished());
  CHECK(tight.threads_used() == 2);
  REQUIRE(tight.error());
  CHECK_THAT(*tight.error(), Contains("SRAM pages written so far need") && Contains("raise run.host_memory"));
}

TEST_CASE("wafer-stripes: SRAM flips and wavelet drops across a stripe boundary give the sequential run on 2 and 3 threads", "[wafer-stripes]") {
  // The 8 x 8 GEMV's column multicast (color 1, south) loses two wavelets leaving row 3 -- into
  // the second stripe on 2 threads -- so PEs below wait for ever (a deadlock report); bits of
  // PE (2,5)'s and PE (6,1)'s memory flip mid-run.
  const WaferConfig c = preset_config("wse2");
  FabricOptions opt;
  opt.record = true;
  opt.deadlock_window = 2000;
  Runs r(c, load_layout(kRoot + "/scenarios/wafer/micro/gemv_8x8.json", c), {2, 3}, opt);
  for (auto& f : r.fabs) {
    f->add_fault(Fabric::WaveletDrop{0, 3, Dir::S, 1, 0, 2});
    f->add_fault(Fabric::SramFlip{2, 5, 3, 6, 40, -1});
    f->add_fault(Fabric::SramFlip{6, 1, 7, 5, 25, -1});
  }
  r.go();
  REQUIRE(r.fabs[0]->error());
  CHECK_THAT(*r.fabs[0]->error(), Contains("deadlock"));
  for (size_t k = 1; k < r.fabs.size(); ++k) {
    CHECK(r.fabs[k]->threads_used() == static_cast<int>(k) + 1);
    same_run(r, k, {"y"});
    const auto& a = r.fabs[0]->faults_fired();
    const auto& b = r.fabs[k]->faults_fired();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK((a[i].count == b[i].count && a[i].first_cycle == b[i].first_cycle && a[i].last_cycle == b[i].last_cycle));
    CHECK(r.fabs[0]->stats().dropped_wavelets == r.fabs[k]->stats().dropped_wavelets);
  }
  CHECK(r.fabs[0]->faults_fired()[0].count == 2);
}

TEST_CASE("wafer-stripes: a star up a column whose switches advance on each sender's last wavelet (fabout advance) gives the sequential run on 2, 4 and 8 threads", "[wafer-stripes]") {
  // spcl/spatial-collectives modules/star.csl along a column of 8 PEs, rooted at the top: each
  // sender's route takes its own PE first, then (position 1) the senders below it. On 8 threads
  // every row is its own stripe, so each switch is advanced by a wavelet from the stripe below
  // the one holding the streams it then lets through.
  const WaferConfig c = preset_config("wse2");
  const std::string layout = R"({"fabric": {"width": 1, "height": 8}, "rects": [
    {"name": "r", "x": 0, "y": 0, "width": 1, "height": 1, "program": "root.pe", "params": {"n": 112},
     "routes": [{"color": 1, "rx": ["S"], "tx": ["RAMP"]}]},
    {"name": "s", "x": 0, "y": 1, "width": 1, "height": 7, "program": "send.pe", "params": {"val": "py + 2"},
     "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["N"], "switch": [{"rx": ["S"]}], "ring": false}]}]})";
  FabricOptions opt;
  opt.record = true;
  Runs r(c, load_text({{"send.pe", fixtures::kStarSend}, {"root.pe", fixtures::kStarRoot}}, layout, c), {2, 4, 8}, opt);
  r.go();
  REQUIRE_FALSE(r.fabs[0]->error());
  std::vector<float> want;
  for (int row = 1; row < 8; ++row) want.insert(want.end(), 16, static_cast<float>(row + 1));  // nearest first
  CHECK(r.fabs[0]->read_array(0, 0, "y") == want);
  for (size_t k = 1; k < r.fabs.size(); ++k) {
    CHECK(r.fabs[k]->threads_used() == (k == 1 ? 2 : k == 2 ? 4 : 8));
    same_run(r, k, {"y"});
  }
}
