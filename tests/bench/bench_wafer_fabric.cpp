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

constexpr int kSide = 64, kN = 2048;
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

// Both models are built before the first sc_start (one elaboration per process).
struct Setup {
  WaferConfig cfg = preset_config("wse2");
  LoadedLayout l;
  std::unique_ptr<Fabric> fab;
  std::unique_ptr<bench::NaiveRowFabric> naive;
  Setup() {
    models::set_fs_resolution();
    l = load_layout_text(layout(kSide, kN), "bench.json", std::string(TESSERA_SOURCE_DIR) + "/scenarios/wafer/micro", cfg);
    fab = std::make_unique<Fabric>("fabric", cfg, FabricOptions{});
    fab->load(l);
    naive = std::make_unique<bench::NaiveRowFabric>(cfg, kSide, kN, kValue, first_op_width(*fab, 0, 0, cfg),
                                                    first_op_width(*fab, kSide - 1, 0, cfg));
  }
};
Setup& setup() {
  static Setup s;
  return s;
}

struct Result {
  bool ran = false;
  int64_t hops = 0, cycles = 0;  // per run
  double hops_per_s = 0;
};
Result naive_result, fabric_result;

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void BM_Naive_RowStreams64x64(benchmark::State& state) {
  Setup& s = setup();
  int64_t hops = 0, activations = 0, cycles = 0, run_hops = 0;
  Clock::duration wall{};
  for (auto _ : state) {
    const auto t0 = Clock::now();
    s.naive->start();
    sc_core::sc_start();
    wall += Clock::now() - t0;
    if (!s.naive->complete()) state.SkipWithError("naive baseline: a receiver did not get every wavelet");
    const auto& c = s.naive->counters();
    run_hops = c.injections + c.hops + c.deliveries;
    hops += run_hops;
    activations += c.activations;
    cycles = c.end_cycle - s.naive->start_cycle();
  }
  if (s.naive->received_sum() != double{kValue} * kSide * kN) state.SkipWithError("naive baseline: wrong received values");
  const double it = static_cast<double>(state.iterations());
  state.counters["hops/s"] = benchmark::Counter(static_cast<double>(hops), benchmark::Counter::kIsRate);
  state.counters["activations/s"] = benchmark::Counter(static_cast<double>(activations), benchmark::Counter::kIsRate);
  state.counters["hops"] = static_cast<double>(hops) / it;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  naive_result = {true, run_hops, cycles, static_cast<double>(hops) / seconds(wall)};
}
BENCHMARK(BM_Naive_RowStreams64x64)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_RowStreams64x64(benchmark::State& state) {
  Setup& s = setup();
  int64_t hops = 0, events = 0, cycles = 0, run_hops = 0;
  Clock::duration wall{};
  for (auto _ : state) {
    const auto t0 = Clock::now();
    s.fab->start();
    sc_core::sc_start();
    wall += Clock::now() - t0;
    if (s.fab->error()) state.SkipWithError(s.fab->error()->c_str());
    const FabricStats& st = s.fab->stats();
    run_hops = st.wavelet_hops + st.ramp_deliveries + st.ramp_injections;
    hops += run_hops;
    events += st.events;
    cycles = st.cycles;
  }
  double sum = 0;
  for (int y = 0; y < kSide; ++y)
    for (float v : s.fab->read_array(kSide - 1, y, "y")) sum += v;
  if (sum != double{kValue} * kSide * kN) state.SkipWithError("fabric: wrong received values");
  const double it = static_cast<double>(state.iterations());
  state.counters["hops/s"] = benchmark::Counter(static_cast<double>(hops), benchmark::Counter::kIsRate);
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["hops"] = static_cast<double>(hops) / it;
  state.counters["events"] = static_cast<double>(events) / it;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  fabric_result = {true, run_hops, cycles, static_cast<double>(hops) / seconds(wall)};
  if (naive_result.ran) {
    if (naive_result.hops != run_hops || naive_result.cycles != cycles)
      state.SkipWithError("the naive baseline and the fabric disagree on hops or cycles");
    state.counters["x_naive"] = fabric_result.hops_per_s / naive_result.hops_per_s;
  }
}
BENCHMARK(BM_RowStreams64x64)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (naive_result.ran && fabric_result.ran)
    std::printf("row streams %dx%d, %d wavelets per row: fabric %.2f M hops/s, naive SC_METHOD-per-PE %.2f M hops/s, "
                "ratio %.2fx; hops per run %lld vs %lld, cycles %lld vs %lld (%s)\n",
                kSide, kSide, kN, fabric_result.hops_per_s / 1e6, naive_result.hops_per_s / 1e6,
                fabric_result.hops_per_s / naive_result.hops_per_s, static_cast<long long>(fabric_result.hops),
                static_cast<long long>(naive_result.hops), static_cast<long long>(fabric_result.cycles),
                static_cast<long long>(naive_result.cycles),
                fabric_result.hops == naive_result.hops && fabric_result.cycles == naive_result.cycles ? "equal" : "DIFFERENT");
  return 0;
}
