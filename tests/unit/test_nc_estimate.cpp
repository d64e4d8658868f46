// The NeuronCore compiler's estimate (mapper/neuroncore/estimate): the scheduled bundles replayed
// on the compiler's timing model. Each case builds a small program, schedules it and checks the
// predicted kernel times against the rules written out by hand from the cost table.
#include <catch2/catch.hpp>

#include "mapper/neuroncore/estimate.hpp"
#include "tests/unit/nc_test_config.hpp"

using namespace tessera;
using namespace tessera::neuroncore;

namespace {

double seconds(const Instr& in, Lane lane, const CoreConfig& cfg) { return static_cast<double>(instr_cycles(in, cfg)) / lane_clock_hz(lane, cfg); }

// exp of a [128, 512] fp32 SBUF tile at byte `from` into byte `to`, on the scalar engine.
Instr activation(int64_t to, int64_t from) {
  Instr a;
  a.op = Op::activation;
  a.func = Func::exp;
  a.dst = on_chip(Space::sbuf, DType::f32, 0, 128, to, {{512, 1}});
  a.src0 = on_chip(Space::sbuf, DType::f32, 0, 128, from, {{512, 1}});
  return a;
}

}  // namespace

TEST_CASE("nc-estimate: a result read on another engine waits one dependent gap, and kernels partition the time", "[nc-estimate]") {
  const CoreConfig cfg = preset_config();
  Compiled c;
  Emitter em(c.program);
  em.begin_kernel("produce");
  const Instr a = activation(0, 4096);
  em.emit(a, Lane::scalar);
  em.begin_kernel("consume");
  Instr v;
  v.op = Op::tensor_scalar;
  v.alu = Alu::multiply;
  v.imm[0] = 2.0;
  v.dst = on_chip(Space::sbuf, DType::f32, 0, 128, 8192, {{512, 1}});
  v.src0 = a.dst;  // reads what the activation writes
  em.emit(v, Lane::vector);
  em.schedule(48, &cfg);
  estimate_kernels(c, cfg);

  const double end_a = seconds(a, Lane::scalar, cfg);
  const double start_v = end_a + static_cast<double>(cfg.dependent_gap) / lane_clock_hz(Lane::vector, cfg);
  const double end_v = start_v + seconds(v, Lane::vector, cfg);
  REQUIRE(c.kernels.size() == 2);
  CHECK(c.kernels[0].seconds == Approx(end_a).epsilon(1e-12));
  CHECK(c.kernels[1].seconds == Approx(end_v - end_a).epsilon(1e-12));
  CHECK(c.predicted_s == Approx(end_v).epsilon(1e-12));
  CHECK(c.kernels[0].scalar_s == Approx(end_a).epsilon(1e-12));
  CHECK(c.kernels[1].vector_s == Approx(seconds(v, Lane::vector, cfg)).epsilon(1e-12));
}

TEST_CASE("nc-estimate: independent work on two engines overlaps, and a store of a result pays the trigger latency", "[nc-estimate]") {
  const CoreConfig cfg = preset_config();
  Compiled c;
  Emitter em(c.program);
  em.begin_kernel("k");
  const Instr a = activation(0, 4096);  // scalar
  em.emit(a, Lane::scalar);
  Instr v;  // vector, on other bytes: runs beside the activation
  v.op = Op::tensor_scalar;
  v.alu = Alu::add;
  v.imm[0] = 1.0;
  v.dst = on_chip(Space::sbuf, DType::f32, 0, 128, 16384, {{512, 1}});
  v.src0 = on_chip(Space::sbuf, DType::f32, 0, 128, 20480, {{512, 1}});
  em.emit(v, Lane::vector);
  const AccessPattern out = in_hbm(DType::f32, 128, 512, 0, {{512, 1}});
  em.dma(out, a.dst, Emitter::DmaClass::stream);  // the activation's result to HBM
  em.schedule(48, &cfg);
  estimate_kernels(c, cfg);

  // The store leaves its bundle one DMA-lane cycle after it issues; its operand is ready only when
  // the activation ends, so it starts then plus dma.trigger_latency and moves its bytes.
  const Instr& store = c.program.instrs[2];
  REQUIRE(store.op == Op::dma);
  int64_t bytes = 0, chunks = 0;
  dma_shape(store, bytes, chunks);
  const double end_a = seconds(a, Lane::scalar, cfg), end_v = seconds(v, Lane::vector, cfg);
  const double s0 = end_a + cfg.dma_trigger_latency;
  const double end_store = std::max(s0 + dma_transfer_seconds(bytes, chunks, cfg), s0 + static_cast<double>(bytes) / cfg.hbm_bandwidth) + cfg.hbm_latency;
  REQUIRE(c.kernels.size() == 1);
  CHECK(c.kernels[0].seconds == Approx(std::max({end_a, end_v, end_store})).epsilon(1e-12));
  CHECK(c.kernels[0].seconds < end_v + end_store);  // the vector op ran beside the activation and the store
  CHECK(c.kernels[0].bytes == Approx(static_cast<double>(bytes)));
}

TEST_CASE("nc-estimate: on NeuronCore-v2 the scalar engine waits while the vector engine holds the PSUM port", "[nc-estimate]") {
  const CoreConfig cfg = preset_config();
  REQUIRE(cfg.port_conflicts);
  Compiled c;
  Emitter em(c.program);
  em.begin_kernel("k");
  Instr s0 = activation(16384, 20480);  // a short scalar op (SBUF only), so the next one needs a bundle of its own
  s0.dst.dims[0].num = s0.src0.dims[0].num = 1;
  em.emit(s0, Lane::scalar);
  Instr v;  // vector: PSUM bank 0 -> SBUF, in the first bundle beside it
  v.op = Op::tensor_copy;
  v.dst = on_chip(Space::sbuf, DType::f32, 0, 128, 0, {{512, 1}});
  v.src0 = on_chip(Space::psum, DType::f32, 0, 128, 0, {{512, 1}});
  em.emit(v, Lane::vector);
  Instr a = activation(8192, 0);  // scalar: PSUM bank 1 -> SBUF, no data shared with either
  a.src0 = on_chip(Space::psum, DType::f32, 0, 128, 2048, {{512, 1}});
  em.emit(a, Lane::scalar);
  em.schedule(48, &cfg);
  REQUIRE(c.program.bundles.size() == 3);  // {s0, v}, {a}, halt
  estimate_kernels(c, cfg);
  // The second bundle could issue when s0 ends, but the copy holds the PSUM port until it ends.
  const double end_s0 = seconds(s0, Lane::scalar, cfg), end_v = seconds(v, Lane::vector, cfg);
  REQUIRE(end_s0 < end_v);
  CHECK(c.kernels[0].seconds == Approx(end_v + seconds(a, Lane::scalar, cfg)).epsilon(1e-12));
}
