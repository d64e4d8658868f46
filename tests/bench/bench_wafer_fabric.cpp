// Wafer fabric model speed: wavelet-hop events per second on a busy fabric. A 64 x 64 region where
// every row streams `n` fp32 wavelets from its west PE to its east PE over 63 router links (64
// parallel streams, color 1), with scenarios/wafer/micro/send.pe and recv.pe. One elaborated fabric
// serves every iteration (SystemC elaborates once per process).
//
// Side by side in the same process and on the same workload: a naive baseline (naive_fabric.hpp:
// one sc_module + SC_METHOD per PE, wavelets handed on by timed sc_event notifications). It must
// produce the same hop count (injections + router links + deliveries), the same run length in
// cycles and the same received values, or the benchmark reports an error. The fabric benchmark
// reports `x_naive` = its hops/s over the baseline's (when both ran), and main() prints a summary.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <systemc>

#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/fabric.hpp"
#include "tests/bench/naive_fabric.hpp"

using namespace tessera;
using namespace tessera::wafer;

namespace {

constexpr float kValue = 1.5f;  // send.pe's fill value

std::string layout(int side, int n) {
  const std::string s = std::to_string(side), last = std::to_string(side - 1), mid = std::to_string(side - 2), ns = std::to_string(n);
  return R"({"fabric": {"width": )" + s + R"(, "height": )" + s + R"(}, "rects": [
    {"name": "senders", "x": 0, "y": 0, "width": 1, "height": )" + s + R"(, "program": "send.pe", "params": {"n": )" + ns + R"(},
     "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}]},
    {"name": "relays", "x": 1, "y": 0, "width": )" + mid + R"(, "height": )" + s + R"(, "routes": [{"color": 1, "rx": ["W"], "tx": ["E"]}]},
    {"name": "receivers", "x": )" + last + R"(, "y": 0, "width": 1, "height": )" + s + R"(, "program": "recv.pe", "params": {"n": )" + ns + R"(},
     "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}]}]})";
}

int first_op_width(const Fabric& fab, int64_t x, int64_t y, const WaferConfig& cfg) {
  const Program& p = *fab.program(x, y);
  return static_cast<int>(instr_width(p, p.instrs.at(static_cast<size_t>(p.tasks.at(0).entry)), cfg));
}

// One workload size: both models on it.
struct Workload {
  int side, n;
  LoadedLayout l;
  std::unique_ptr<Fabric> fab;
  std::unique_ptr<bench::NaiveRowFabric> naive;
};
struct Result {
  bool ran = false;
  int64_t hops = 0, cycles = 0;  // per run
  double hops_per_s = 0;
};

// Two sizes: 64 x 64 (4,096 PEs, 2,048 wavelets per row) and 256 x 256 (65,536 PEs -- the SC_METHOD
// count past which ARCHITECTURE.md decision 1 measured the kernel slowing down -- 512 per row).
constexpr int kSizes = 2;
constexpr int kSide[kSizes] = {64, 256}, kN[kSizes] = {2048, 512};

// Every model is built before the first sc_start (one elaboration per process).
struct Setup {
  WaferConfig cfg = preset_config("wse2");
  Workload w[kSizes];
  Result naive[kSizes], fabric[kSizes];
  Setup() {
    models::set_fs_resolution();
    for (int i = 0; i < kSizes; ++i) {
      Workload& k = w[i];
      k.side = kSide[i];
      k.n = kN[i];
      k.l = load_layout_text(layout(k.side, k.n), "bench.json", std::string(TESSERA_SOURCE_DIR) + "/scenarios/wafer/micro", cfg);
      k.fab = std::make_unique<Fabric>(("fabric" + std::to_string(k.side)).c_str(), cfg, FabricOptions{});
      k.fab->load(k.l);
      k.naive = std::make_unique<bench::NaiveRowFabric>(cfg, k.side, k.n, kValue, first_op_width(*k.fab, 0, 0, cfg),
                                                        first_op_width(*k.fab, k.side - 1, 0, cfg));
    }
  }
};
Setup& setup() {
  static Setup s;
  return s;
}

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void BM_Naive_RowStreams(benchmark::State& state) {
  Setup& s = setup();
  const int i = static_cast<int>(state.range(0));
  Workload& k = s.w[i];
  int64_t hops = 0, activations = 0, cycles = 0, run_hops = 0;
  Clock::duration wall{};
  for (auto _ : state) {
    const auto t0 = Clock::now();
    k.naive->start();
    sc_core::sc_start();
    wall += Clock::now() - t0;
    if (!k.naive->complete()) state.SkipWithError("naive baseline: a receiver did not get every wavelet");
    const auto& c = k.naive->counters();
    run_hops = c.injections + c.hops + c.deliveries;
    hops += run_hops;
    activations += c.activations;
    cycles = c.end_cycle - k.naive->start_cycle();
  }
  if (k.naive->received_sum() != double{kValue} * k.side * k.n) state.SkipWithError("naive baseline: wrong received values");
  const double it = static_cast<double>(state.iterations());
  state.SetLabel(std::to_string(k.side) + "x" + std::to_string(k.side));
  state.counters["hops/s"] = benchmark::Counter(static_cast<double>(hops), benchmark::Counter::kIsRate);
  state.counters["activations/s"] = benchmark::Counter(static_cast<double>(activations), benchmark::Counter::kIsRate);
  state.counters["hops"] = static_cast<double>(hops) / it;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  s.naive[i] = {true, run_hops, cycles, static_cast<double>(hops) / seconds(wall)};
}
BENCHMARK(BM_Naive_RowStreams)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_RowStreams(benchmark::State& state) {
  Setup& s = setup();
  const int i = static_cast<int>(state.range(0));
  Workload& k = s.w[i];
  int64_t hops = 0, events = 0, cycles = 0, run_hops = 0;
  Clock::duration wall{};
  for (auto _ : state) {
    const auto t0 = Clock::now();
    k.fab->start();
    sc_core::sc_start();
    wall += Clock::now() - t0;
    if (k.fab->error()) state.SkipWithError(k.fab->error()->c_str());
    const FabricStats& st = k.fab->stats();
    run_hops = st.wavelet_hops + st.ramp_deliveries + st.ramp_injections;
    hops += run_hops;
    events += st.events;
    cycles = st.cycles;
  }
  double sum = 0;
  for (int y = 0; y < k.side; ++y)
    for (float v : k.fab->read_array(k.side - 1, y, "y")) sum += v;
  if (sum != double{kValue} * k.side * k.n) state.SkipWithError("fabric: wrong received values");
  const double it = static_cast<double>(state.iterations());
  state.SetLabel(std::to_string(k.side) + "x" + std::to_string(k.side));
  state.counters["hops/s"] = benchmark::Counter(static_cast<double>(hops), benchmark::Counter::kIsRate);
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["hops"] = static_cast<double>(hops) / it;
  state.counters["events"] = static_cast<double>(events) / it;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  s.fabric[i] = {true, run_hops, cycles, static_cast<double>(hops) / seconds(wall)};
  if (s.naive[i].ran) {
    if (s.naive[i].hops != run_hops || s.naive[i].cycles != cycles)
      state.SkipWithError("the naive baseline and the fabric disagree on hops or cycles");
    state.counters["x_naive"] = s.fabric[i].hops_per_s / s.naive[i].hops_per_s;
  }
}
BENCHMARK(BM_RowStreams)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const Setup& s = setup();
  for (int i = 0; i < kSizes; ++i) {
    const Result &f = s.fabric[i], &nv = s.naive[i];
    if (nv.ran && f.ran)
      std::printf("row streams %dx%d, %d wavelets per row: fabric %.2f M hops/s, naive SC_METHOD-per-PE %.2f M hops/s, "
                  "ratio %.2fx; hops per run %lld vs %lld, cycles %lld vs %lld (%s)\n",
                  kSide[i], kSide[i], kN[i], f.hops_per_s / 1e6, nv.hops_per_s / 1e6, f.hops_per_s / nv.hops_per_s,
                  static_cast<long long>(f.hops), static_cast<long long>(nv.hops), static_cast<long long>(f.cycles),
                  static_cast<long long>(nv.cycles), f.hops == nv.hops && f.cycles == nv.cycles ? "equal" : "DIFFERENT");
  }
  return 0;
}
