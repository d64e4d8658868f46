// NeuronCore model speed: simulated instructions per second of a long timing-only program
// (>= 1M dynamic instructions through a counted loop), with and without the per-instruction
// event record. One elaborated core serves every iteration (SystemC elaborates once per process).
#include <benchmark/benchmark.h>

#include <memory>
#include <systemc>

#include "isa/neuroncore/asm.hpp"
#include "isa/params.hpp"
#include "models/common/clock.hpp"
#include "models/neuroncore/core.hpp"

using namespace tessera;
using namespace tessera::neuroncore;

namespace {

// 4 instructions per iteration on 4 lanes; independent operands, so the lanes overlap.
const char* kLoop = R"(
control: set_reg r0 value=250000
loop:
vector: tensor_scalar sb.fp32[0:128]@0{64}, sb.fp32[0:128]@4096{64} op=multiply imm=2 | scalar: activation sb.fp32[0:128]@8192{64}, sb.fp32[0:128]@12288{64} func=relu | gpsimd: iota sb.fp32[0:128]@16384{64} base=0 pstep=1 fstep=1 | control: dec_branch_nz r0 loop
control: halt
)";

NeuronCore& core(bool record) {
  static std::unique_ptr<NeuronCore> cores[2];
  static bool made = false;
  if (!made) {
    made = true;
    models::set_fs_resolution();
    DiagnosticList d;
    const TargetDesc* t = target_of_preset("trn1");
    const CoreConfig cfg = CoreConfig::from(ParamSet::resolve(*t, *t->find_preset("trn1"), {}, d));
    CoreOptions fast;
    fast.numerics = false;
    fast.record = false;
    CoreOptions rec = fast;
    rec.record = true;
    cores[0] = std::make_unique<NeuronCore>("fast", cfg, fast);
    cores[1] = std::make_unique<NeuronCore>("recorded", cfg, rec);
  }
  return *cores[record ? 1 : 0];
}

void BM_TimingOnlyLoop(benchmark::State& state) {
  static Program p = assemble(kLoop, "bench.s");
  NeuronCore& c = core(state.range(0) != 0);
  int64_t instrs = 0;
  for (auto _ : state) {
    c.load(p);
    sc_core::sc_start();
    for (int l = 0; l < kLanes; ++l) instrs += c.stats().instructions[static_cast<size_t>(l)];
  }
  state.counters["instructions/s"] = benchmark::Counter(static_cast<double>(instrs), benchmark::Counter::kIsRate);
  state.counters["instructions"] = static_cast<double>(instrs) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_TimingOnlyLoop)->Arg(0)->Arg(1)->ArgNames({"record"})->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
