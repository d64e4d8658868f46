// Wafer fabric model speed: wavelet-hop events per second on a busy fabric. A 64 x 64 region where
// every row streams `n` fp32 wavelets from its west PE to its east PE over 63 router links (64
// parallel streams, color 1), with scenarios/wafer/micro/send.pe and recv.pe. One elaborated fabric
// serves every iteration (SystemC elaborates once per process).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <systemc>

#include "isa/wafer/asm.hpp"
#include "models/common/clock.hpp"
#include "models/wafer/fabric.hpp"

using namespace tessera;
using namespace tessera::wafer;

namespace {

std::string layout(int side, int n) {
  const std::string s = std::to_string(side), last = std::to_string(side - 1), mid = std::to_string(side - 2), ns = std::to_string(n);
  return R"({"fabric": {"width": )" + s + R"(, "height": )" + s + R"(}, "rects": [
    {"name": "senders", "x": 0, "y": 0, "width": 1, "height": )" + s + R"(, "program": "send.pe", "params": {"n": )" + ns + R"(},
     "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["E"]}]},
    {"name": "relays", "x": 1, "y": 0, "width": )" + mid + R"(, "height": )" + s + R"(, "routes": [{"color": 1, "rx": ["W"], "tx": ["E"]}]},
    {"name": "receivers", "x": )" + last + R"(, "y": 0, "width": 1, "height": )" + s + R"(, "program": "recv.pe", "params": {"n": )" + ns + R"(},
     "routes": [{"color": 1, "rx": ["W"], "tx": ["RAMP"]}]}]})";
}

struct Setup {
  WaferConfig cfg = preset_config("wse2");
  LoadedLayout l;
  std::unique_ptr<Fabric> fab;
  Setup() {
    models::set_fs_resolution();
    l = load_layout_text(layout(64, 2048), "bench.json", std::string(TESSERA_SOURCE_DIR) + "/scenarios/wafer/micro", cfg);
    fab = std::make_unique<Fabric>("fabric", cfg, FabricOptions{});
    fab->load(l);
  }
};

void BM_RowStreams64x64(benchmark::State& state) {
  static Setup s;
  int64_t hops = 0, events = 0, cycles = 0;
  for (auto _ : state) {
    s.fab->start();
    sc_core::sc_start();
    if (s.fab->error()) state.SkipWithError(s.fab->error()->c_str());
    hops += s.fab->stats().wavelet_hops + s.fab->stats().ramp_deliveries + s.fab->stats().ramp_injections;
    events += s.fab->stats().events;
    cycles += s.fab->stats().cycles;
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["hops/s"] = benchmark::Counter(static_cast<double>(hops), benchmark::Counter::kIsRate);
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["hops"] = static_cast<double>(hops) / it;
  state.counters["sim_cycles"] = static_cast<double>(cycles) / it;
}
BENCHMARK(BM_RowStreams64x64)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
