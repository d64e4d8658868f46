// Timing contracts of the NeuronCore model: one test case per cost-table row. A single
// instruction of size N on an idle core must be unfinished at the start of its last cycle and
// finished exactly at its formula's cycle count, in its own clock domain. The expected counts are
// written out from shared/reference/neuroncore.md here, not taken from the cost table.
#include <catch2/catch.hpp>
#include <cmath>
#include <systemc>

#include "isa/neuroncore/asm.hpp"
#include "models/common/systemc_env.hpp"
#include "isa/neuroncore/validate.hpp"
#include "isa/params.hpp"
#include "models/neuroncore/core.hpp"

using namespace tessera;
using namespace tessera::neuroncore;

namespace {

CoreConfig config(const std::string& preset) {
  DiagnosticList d;
  const TargetDesc* t = target_of_preset(preset);
  return CoreConfig::from(ParamSet::resolve(*t, *t->find_preset(preset), {}, d));
}

// Runs `text` (one instruction in lane `lane`, optionally after set-up bundles that finish before
// it) and checks it completes at exactly `cycles` of its lane clock after it starts.
// `numerics = false` for instructions that need state a single instruction cannot have (a
// multiply_moving without a loaded stationary).
void contract(const std::string& text, Lane lane, int64_t cycles, const std::string& preset = "trn1",
              bool numerics = true) {
  models::set_fs_resolution();
  static CoreConfig cfg = config(preset);
  Program p = assemble(text, "contract.s");
  validate(p, cfg);
  CoreOptions opt;
  opt.numerics = numerics;
  static NeuronCore core("core", cfg, opt);
  core.load(p);
  const models::ClockDomain& ck = core.clock(lane);
  // The instruction is issued at time 0 on an idle core: it starts at cycle 0 of its clock.
  // sc_start(d) stops before the events at now + d; sc_start(SC_ZERO_TIME) then runs them, so each
  // check sees everything that happened up to and including that instant.
  sc_core::sc_start(sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(cycles - 1))));
  tessera::models::after_systemc();
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
  tessera::models::after_systemc();
  INFO(text);
  CHECK(core.retired(lane) == 0);
  sc_core::sc_start(sc_core::sc_time::from_value(static_cast<uint64_t>(ck.time_of(cycles) - ck.time_of(cycles - 1))));
  tessera::models::after_systemc();
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
  tessera::models::after_systemc();
  CHECK(core.retired(lane) == 1);
  REQUIRE(core.records().size() >= 1);
  const auto& r = core.records().front();
  CHECK(r.start == 0);
  CHECK(r.end == ck.time_of(cycles));
  CHECK(r.cycles == cycles);
  sc_core::sc_start();
  tessera::models::after_systemc();
  CHECK(core.finished());
  CHECK_FALSE(core.error());
}

}  // namespace

TEST_CASE("nc-timing: load_stationary 128x128 bf16 takes 128/4 = 32 cycles", "[nc-timing]") {
  contract("tensor: load_stationary sb.bf16[0:128]@0{128}", Lane::tensor, 32);
}
TEST_CASE("nc-timing: load_stationary fp32 takes 4x", "[nc-timing]") {
  contract("tensor: load_stationary sb.fp32[0:128]@0{128}", Lane::tensor, 128);
}
TEST_CASE("nc-timing: multiply_moving N=512 bf16 takes 512 cycles", "[nc-timing]") {
  contract("tensor: multiply_moving ps.fp32[0:128]@0{512}, sb.bf16[0:128]@0{512} start stop", Lane::tensor, 512, "trn1", false);
}
TEST_CASE("nc-timing: multiply_moving N=16 with M=128 takes min(64 M) = 64 cycles", "[nc-timing]") {
  contract("tensor: multiply_moving ps.fp32[0:128]@0{16}, sb.bf16[0:128]@0{16} start stop", Lane::tensor, 64, "trn1", false);
}
TEST_CASE("nc-timing: multiply_moving N=16 with M=32 takes max(min(64 32) 16) = 32 cycles", "[nc-timing]") {
  contract("tensor: multiply_moving ps.fp32[0:32]@0{16}, sb.bf16[0:128]@0{16} start stop", Lane::tensor, 32, "trn1", false);
}
TEST_CASE("nc-timing: multiply_moving fp32 takes 4x", "[nc-timing]") {
  contract("tensor: multiply_moving ps.fp32[0:128]@0{512}, sb.fp32[0:128]@0{512} start stop", Lane::tensor, 2048, "trn1", false);
}
TEST_CASE("nc-timing: tensor-engine transpose 128x100 takes max(P min(64 F)) = 128", "[nc-timing]") {
  contract("tensor: transpose ps.fp32[0:100]@0{128}, sb.fp32[0:128]@0{100}", Lane::tensor, 128);
}
TEST_CASE("nc-timing: tensor_tensor fp32 SBUF takes 2N", "[nc-timing]") {
  contract("vector: tensor_tensor sb.fp32[0:128]@0{1000}, sb.fp32[0:128]@4096{1000}, sb.fp32[0:128]@8192{1000} op=add", Lane::vector, 2000);
}
TEST_CASE("nc-timing: tensor_tensor with a PSUM input takes N", "[nc-timing]") {
  contract("vector: tensor_tensor sb.fp32[0:128]@0{500}, ps.fp32[0:128]@0{500}, sb.fp32[0:128]@8192{500} op=add", Lane::vector, 500);
}
TEST_CASE("nc-timing: tensor_tensor all-bf16 contiguous add takes N", "[nc-timing]") {
  contract("vector: tensor_tensor sb.bf16[0:128]@0{1000}, sb.bf16[0:128]@4096{1000}, sb.bf16[0:128]@8192{1000} op=add", Lane::vector, 1000);
}
TEST_CASE("nc-timing: tensor_tensor small N takes MIN_II = 64", "[nc-timing]") {
  contract("vector: tensor_tensor sb.fp32[0:128]@0{10}, sb.fp32[0:128]@4096{10}, sb.fp32[0:128]@8192{10} op=multiply", Lane::vector, 64);
}
TEST_CASE("nc-timing: tensor_scalar takes max(MIN_II N)", "[nc-timing]") {
  contract("vector: tensor_scalar sb.fp32[0:128]@0{300}, sb.fp32[0:128]@4096{300} op=multiply imm=2", Lane::vector, 300);
}
TEST_CASE("nc-timing: vector divide (reciprocal) takes 8N", "[nc-timing]") {
  contract("vector: tensor_scalar sb.fp32[0:128]@0{100}, sb.fp32[0:128]@4096{100} op=divide imm=2", Lane::vector, 800);
}
TEST_CASE("nc-timing: tensor_reduce bf16 add takes N/2", "[nc-timing]") {
  contract("vector: tensor_reduce sb.fp32[0:128]@0{1}, sb.bf16[0:128]@4096{1000} op=add", Lane::vector, 500);
}
TEST_CASE("nc-timing: tensor_reduce fp32 takes N", "[nc-timing]") {
  contract("vector: tensor_reduce sb.fp32[0:128]@0{1}, sb.fp32[0:128]@4096{1000} op=max", Lane::vector, 1000);
}
TEST_CASE("nc-timing: tensor_copy takes max(MIN_II N)", "[nc-timing]") {
  contract("vector: tensor_copy sb.bf16[0:128]@0{700}, sb.fp32[0:128]@4096{700}", Lane::vector, 700);
}
TEST_CASE("nc-timing: transpose32 takes max(MIN_II N)", "[nc-timing]") {
  contract("vector: transpose32 sb.fp32[0:32]@0{32}, sb.fp32[0:32]@4096{32}", Lane::vector, 64);
}
TEST_CASE("nc-timing: bn_stats takes max(MIN_II N)", "[nc-timing]") {
  contract("vector: bn_stats sb.fp32[0:128]@0{6}, sb.fp32[0:128]@4096{512}", Lane::vector, 512);
}
TEST_CASE("nc-timing: bn_aggr takes max(MIN_II 13N/3)", "[nc-timing]") {
  contract("vector: bn_aggr sb.fp32[0:128]@0{2}, sb.fp32[0:128]@4096{60}", Lane::vector, 260);
}
TEST_CASE("nc-timing: memset zero bf16 takes max(MIN_II N/2)", "[nc-timing]") {
  contract("vector: memset sb.bf16[0:128]@0{1000} imm=0", Lane::vector, 500);
}
TEST_CASE("nc-timing: memset nonzero takes max(MIN_II N)", "[nc-timing]") {
  contract("vector: memset sb.bf16[0:128]@0{1000} imm=1", Lane::vector, 1000);
}
TEST_CASE("nc-timing: select takes max(MIN_II 2N)", "[nc-timing]") {
  contract("vector: select sb.fp32[0:128]@0{100}, sb.fp32[0:128]@4096{100}, sb.fp32[0:128]@8192{100}, sb.fp32[0:128]@12288{100}", Lane::vector, 200);
}
TEST_CASE("nc-timing: activation takes max(MIN_II N)", "[nc-timing]") {
  contract("scalar: activation sb.fp32[0:128]@0{900}, sb.fp32[0:128]@4096{900} func=exp", Lane::scalar, 900);
}
TEST_CASE("nc-timing: activation with accumulate adds MIN_II", "[nc-timing]") {
  contract("scalar: activation sb.fp32[0:128]@0{900}, sb.fp32[0:128]@4096{900} func=exp acc=sb.fp32[0:128]@8192{1}", Lane::scalar, 964);
}
TEST_CASE("nc-timing: iota takes 150 + N on gpsimd", "[nc-timing]") {
  contract("gpsimd: iota sb.fp32[0:128]@0{100} base=0 pstep=1 fstep=1", Lane::gpsimd, 250);
}
TEST_CASE("nc-timing: affine_select takes 150 + N on gpsimd", "[nc-timing]") {
  contract("gpsimd: affine_select sb.fp32[0:128]@0{100}, sb.fp32[0:128]@4096{100} op=is_ge base=0 pstep=1 fstep=-1 fill=0", Lane::gpsimd, 250);
}
TEST_CASE("nc-timing: gather takes 150 + N on gpsimd", "[nc-timing]") {
  contract("gpsimd: gather sb.fp32[0:128]@0{64}, sb.fp32[0:128]@4096{64}, sb.int32[0:128]@8192{64}", Lane::gpsimd, 214);
}
TEST_CASE("nc-timing: partition_all_reduce over 128 partitions takes 150 + 7N", "[nc-timing]") {
  contract("gpsimd: partition_all_reduce sb.fp32[0:128]@0{10}, sb.fp32[0:128]@4096{10} op=add", Lane::gpsimd, 220);
}
TEST_CASE("nc-timing: sem_signal takes one cycle", "[nc-timing]") { contract("sync: sem_signal s0 value=1", Lane::sync, 1); }
TEST_CASE("nc-timing: a satisfied sem_wait takes one cycle", "[nc-timing]") { contract("sync: sem_wait s0 value=0", Lane::sync, 1); }
TEST_CASE("nc-timing: step_marker takes one cycle", "[nc-timing]") { contract("sync: step_marker step=0", Lane::sync, 1); }
TEST_CASE("nc-timing: set_reg takes one cycle", "[nc-timing]") { contract("control: set_reg r3 value=7", Lane::control, 1); }
TEST_CASE("nc-timing: add_reg takes one cycle", "[nc-timing]") { contract("control: add_reg r3 value=7", Lane::control, 1); }
TEST_CASE("nc-timing: dec_branch_nz takes one cycle", "[nc-timing]") {
  contract("control: dec_branch_nz r0 next\nnext:\nnop\n", Lane::control, 1);
}
TEST_CASE("nc-timing: branch_nz takes one cycle", "[nc-timing]") {
  contract("control: branch_nz r0 next\nnext:\nnop\n", Lane::control, 1);
}
TEST_CASE("nc-timing: jump takes one cycle", "[nc-timing]") { contract("control: jump next\nnext:\nnop\n", Lane::control, 1); }
TEST_CASE("nc-timing: halt takes one cycle", "[nc-timing]") { contract("control: halt", Lane::control, 1); }
TEST_CASE("nc-timing: trn2 vector engine moves 512 bf16 elements per cycle", "[nc-timing]") {
  // v3: 4x the v2 width for 16-bit operands, so N=2048 costs max(MIN_II, 2048/4) = 512.
  contract("vector: tensor_copy sb.bf16[0:128]@0{2048}, sb.bf16[0:128]@8192{2048}", Lane::vector, 512, "trn2");
}

TEST_CASE("nc-timing: a DMA of 8 KiB per partition finishes at bytes plus chunk overhead over engine bandwidth", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn2");
  Program p = assemble(".hbm x bf16 [4, 4096] @0\ndma0: dma sb.bf16[0:4]@0{4096}, hbm.bf16[4x4096]@0{4096}\n", "dma.s");
  validate(p, cfg);
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.records().size() == 1);
  const auto& r = core.records()[0];
  // Starts after the one-cycle descriptor issue at the access clock (1.2 GHz on trn2); moves
  // 32768 bytes + 4 chunks x (2048/9) bytes of overhead at 23 B/ns.
  const models::Femtos issued = core.clock(Lane::dma0).time_of(1);
  CHECK(r.start == issued);
  const double expect_ns = (32768.0 + 4 * 2048.0 / 9.0) / 23.0;
  CHECK(static_cast<double>(r.end - r.start) / 1e6 == Approx(expect_ns).epsilon(1e-9));
  CHECK(core.retired(Lane::dma0) == 1);
}

TEST_CASE("nc-timing: a DMA on queue=all splits into 16 pieces of 8 partitions and finishes with one piece", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn1");
  Program p = assemble(".hbm x bf16 [128, 4096] @0\ndma0: dma sb.bf16[0:128]@0{4096}, hbm.bf16[128x4096]@0{4096} queue=all\n", "dma.s");
  validate(p, cfg);
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  const models::Femtos issued = core.clock(Lane::dma0).time_of(1);
  // [DMA]: each transfer is parallelised over up to 16 engines. A piece moves 8 partitions x
  // 8 KiB = 65536 bytes + 8 chunks x (2048/9) bytes of overhead at 17 B/ns (trn1); the 16 pieces
  // run at once (HBM: 16 x 65536 B at 410 GB/s = 2.56 us, under one piece's 3.96 us).
  const double piece_ns = (65536.0 + 8 * 2048.0 / 9.0) / 17.0;
  const auto end = issued + static_cast<models::Femtos>(std::llround(piece_ns * 1e6));
  sc_core::sc_start(sc_core::sc_time::from_value(static_cast<uint64_t>(end - 2000)));  // 2 ps early
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
  tessera::models::after_systemc();
  CHECK(core.retired(Lane::dma0) == 0);
  sc_core::sc_start(sc_core::sc_time::from_value(4000));
  tessera::models::after_systemc();
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
  tessera::models::after_systemc();
  CHECK(core.retired(Lane::dma0) == 1);
  REQUIRE(core.records().size() == 1);
  CHECK(core.records()[0].start == issued);
  CHECK(static_cast<double>(core.records()[0].end - issued) / 1e6 == Approx(piece_ns).epsilon(1e-9));
  // One piece on queue 1 of each engine (queues 16..31), none elsewhere.
  const auto& st = core.stats();
  for (size_t q = 0; q < st.dma_queue_transfers.size(); ++q) {
    INFO("queue " << q);
    CHECK(st.dma_queue_transfers[q] == (q >= 16 && q < 32 ? 1 : 0));
    CHECK(st.dma_queue_bytes[q] == (q >= 16 && q < 32 ? 65536 : 0));
  }
}

TEST_CASE("nc-timing: a dependent instruction waits for its producer plus the hand-off gap", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn1");
  Program p = assemble(
      "scalar: activation sb.fp32[0:128]@4{1}, sb.fp32[0:128]@0{1} func=identity\n"
      "scalar: activation sb.fp32[0:128]@0{1}, sb.fp32[0:128]@4{1} func=identity\n",
      "dep.s");
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.records().size() == 2);
  const auto& ck = core.clock(Lane::scalar);
  CHECK(core.records()[0].end == ck.time_of(64));
  // NKI perf guide: dependent tiny activations 264 scalar cycles apart = 64 + isa.dependent_gap.
  CHECK(core.records()[1].start == ck.time_of(64 + 200));
  CHECK(core.records()[1].end == ck.time_of(264 + 64));
}

TEST_CASE("nc-timing: independent instructions in one bundle run in parallel on their lanes", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn1");
  Program p = assemble(
      "vector: tensor_copy sb.fp32[0:128]@0{1000}, sb.fp32[0:128]@8192{1000} | "
      "scalar: activation sb.fp32[0:128]@16384{1000}, sb.fp32[0:128]@24576{1000} func=relu\n",
      "par.s");
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.records().size() == 2);
  CHECK(core.records()[0].start == 0);
  CHECK(core.records()[1].start == 0);
  CHECK(core.stats().end_time == std::max(core.clock(Lane::vector).time_of(1000), core.clock(Lane::scalar).time_of(1000)));
}

TEST_CASE("nc-timing: v2 port conflict serialises vector and gpsimd on SBUF", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn1");
  Program p = assemble(
      "gpsimd: iota sb.fp32[0:128]@0{100} base=0 pstep=1 fstep=1\n"
      "vector: tensor_copy sb.fp32[0:128]@8192{1000}, sb.fp32[0:128]@16384{1000}\n",
      "port.s");
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.records().size() == 2);
  CHECK(core.records()[1].start >= core.records()[0].end);
  CHECK(core.stats().stall_fs[static_cast<size_t>(Stall::port_conflict)] > 0);
}

TEST_CASE("nc-timing: a semaphore wait nobody can satisfy is reported as a deadlock", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn1");
  Program p = assemble("sync: sem_signal s1 value=1\nsync: sem_wait s1 value=2\n", "dead.s");
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.error());
  CHECK(core.error()->find("bundle 1 lane sync") != std::string::npos);
  CHECK(core.error()->find("deadlock") != std::string::npos);
}

// [DMA]: an engine serves its queues round-robin. Two loads on queues 0 and 16 (both engine 0)
// signal s0; a wait for one signal issues when the short one ends, and the load after it (queue
// 32, engine 0 too) starts then, sharing the engine with the long one still running: the engines
// are run no further than the wait needs (before, a wait ran them to every signalling DMA's end).
TEST_CASE("nc-timing: a semaphore wait on DMAs runs the engines only as far as it needs", "[nc-timing]") {
  models::set_fs_resolution();
  static CoreConfig cfg = config("trn1");
  const std::string text =
      ".hbm x bf16 [8, 65536] @0\n"
      "dma0: dma sb.bf16[0:8]@0{1024}, hbm.bf16[8x65536]@0{1024} queue=0 signal=s0 | dma1: dma sb.bf16[8:8]@0{32768}, hbm.bf16[8x65536]@0{32768} queue=16 signal=s0\n"
      "sync: sem_wait s0 value=1\n"
      "dma0: dma sb.bf16[16:8]@0{1024}, hbm.bf16[8x65536]@4096{1024} queue=32\n";
  Program p = assemble(text, "sem.s");
  validate(p, cfg);
  NeuronCore core("core", cfg, CoreOptions{});
  core.load(p);
  sc_core::sc_start();
  tessera::models::after_systemc();
  REQUIRE(core.finished());
  REQUIRE_FALSE(core.error());
  std::vector<InstrRecord> dmas;
  for (const auto& r : core.records())
    if (p.instrs[static_cast<size_t>(r.instr)].op == Op::dma) dmas.push_back(r);
  REQUIRE(dmas.size() == 3);
  const auto& a = dmas[0];  // short
  const auto& b = dmas[1];  // long
  const auto& c = dmas[2];  // after the wait
  REQUIRE(a.end < b.end);
  CHECK(c.start < b.end);                  // it ran beside the long load, not after it
  CHECK(c.start >= a.end);                 // and not before the wait's signal
  CHECK(c.start - a.end < 2'000'000'000);  // within the trigger latency and a sequencer cycle of it (fs)
}
