// The NeuronCore compiler's estimate (mapper/neuroncore/estimate): the scheduled bundles replayed
// on the compiler's timing model. Each case builds a small program, schedules it and checks the
// predicted kernel times against the rules written out by hand from the cost table.
#include <catch2/catch.hpp>

#include "isa/neuroncore/dma_engines.hpp"
#include "mapper/neuroncore/estimate.hpp"
#include "tests/unit/nc_test_config.hpp"

using namespace tessera;
using namespace tessera::neuroncore;

namespace {

// The replay starts each instruction at its engine's next clock edge (isa/clock.hpp), as the core
// does; the rules below are written in continuous time, so they hold to within a few clock cycles.
constexpr double kEdge = 3e-9;

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
  CHECK(c.kernels[0].seconds == Approx(end_a).margin(kEdge));
  CHECK(c.kernels[1].seconds == Approx(end_v - end_a).margin(kEdge));
  CHECK(c.predicted_s == Approx(end_v).margin(kEdge));
  CHECK(c.kernels[0].scalar_s == Approx(end_a).margin(kEdge));
  CHECK(c.kernels[1].vector_s == Approx(seconds(v, Lane::vector, cfg)).margin(kEdge));
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
  CHECK(c.kernels[0].seconds == Approx(std::max({end_a, end_v, end_store})).margin(kEdge));
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
  CHECK(c.kernels[0].seconds == Approx(end_v + seconds(a, Lane::scalar, cfg)).margin(kEdge));
}

// The DMA engines' arbitration the core and the estimate share (isa/neuroncore/dma_engines.hpp).
TEST_CASE("nc-dma-engines: queues of one engine share it round-robin, a queue runs in order, HBM is shared", "[nc-estimate]") {
  // 2 engines x 4 queues (queue q on engine q % 2); HBM 100 bytes/s; times in seconds.
  auto piece = [](int32_t q, double ready, double work, double hbm = 0, std::vector<int32_t> after = {}, double issued = -1, double latency = 0) {
    DmaEngines::Piece p;
    p.queue = q;
    p.issued = issued < 0 ? ready : issued;
    p.ready = ready;
    p.work = work;
    p.hbm_bytes = hbm;
    p.after = std::move(after);
    p.latency = latency;
    return p;
  };
  SECTION("round-robin across queues, in order within one") {
    DmaEngines e(2, 4, 0, 0);
    e.reset(0);
    const int32_t a = e.submit(piece(0, 0, 1.0));   // engine 0, queue 0
    const int32_t b = e.submit(piece(2, 0, 0.2));   // engine 0, queue 2: shares engine 0 with a
    const int32_t c = e.submit(piece(1, 0, 1.0));   // engine 1 alone
    const int32_t d = e.submit(piece(0, 0, 0.5));   // queue 0 again: after a
    CHECK(e.end(b) == Approx(0.4));                  // half of engine 0 while a runs (first-come-first-served: 1.2)
    CHECK(e.end(a) == Approx(1.2));                  // half until b ends, then all of it
    CHECK(e.end(c) == Approx(1.0));
    CHECK(e.start(d) == Approx(1.2));                // in order behind a on its queue
    CHECK(e.end(d) == Approx(1.7));
  }
  SECTION("HBM bandwidth shared by the transfers through it") {
    DmaEngines e(2, 4, 100.0, 0);
    e.reset(0);
    // Each alone would move 100 bytes/s (100 bytes in 1 s); together they get 50 each.
    const int32_t a = e.submit(piece(0, 0, 1.0, 100));
    const int32_t b = e.submit(piece(1, 0, 1.0, 100));
    CHECK(e.end(a) == Approx(2.0));
    CHECK(e.end(b) == Approx(2.0));
    // An SBUF-to-SBUF transfer is not held to HBM's bandwidth.
    const int32_t c = e.submit(piece(0, 2.0, 1.0, 100));
    const int32_t d = e.submit(piece(1, 2.0, 1.0, 0));
    CHECK(e.end(c) == Approx(3.0));
    CHECK(e.end(d) == Approx(3.0));
  }
  SECTION("a transfer waiting for one in flight starts a trigger latency after it ends") {
    DmaEngines e(2, 4, 0, 0);
    e.reset(0);
    const int32_t a = e.submit(piece(0, 0, 1.0));
    const int32_t b = e.submit(piece(1, 0.5, 0.25, 0, {a}, 0.5, 0.3));  // issued at 0.5, reads what a writes
    CHECK(e.start(b) == Approx(1.3));
    CHECK(e.end(b) == Approx(1.55));
    // Ready at issue (its operand done before): no latency.
    const int32_t c = e.submit(piece(1, 2.0, 0.25, 0, {a}, 2.0, 0.3));
    CHECK(e.start(c) == Approx(2.0));
    // advance(): everything ending by then is finished.
    const int32_t d = e.submit(piece(0, 3.0, 1.0));
    e.advance(3.5);
    CHECK(!e.finished(d));
    e.advance(4.0);
    CHECK(e.finished(d));
    CHECK(e.drain() == Approx(4.0));
  }
}

// The scoreboard's footprints (isa.hpp): HBM rows of a strided pattern overlap only row by row, so
// the column tiles of one matmul output are independent (before, their byte ranges met and each
// tile's store waited for the previous one plus a trigger latency).
TEST_CASE("nc-footprint: HBM row sets overlap only where their rows meet", "[nc-estimate]") {
  // [128 rows of 3072 bf16] tiles of 512 columns.
  auto tile = [](int64_t col0, int32_t cols, int32_t rows = 128, int64_t row_stride = 3072) {
    return footprint(in_hbm(DType::bf16, rows, row_stride, col0 * 2, {{cols, 1}}));
  };
  CHECK(!tile(0, 512).overlaps(tile(512, 512)));
  CHECK(!tile(512, 512).overlaps(tile(0, 512)));
  CHECK(tile(0, 512).overlaps(tile(511, 2)));        // one column shared
  CHECK(tile(0, 512).overlaps(tile(0, 512)));
  CHECK(!tile(0, 512).overlaps(tile(512, 2560)));
  CHECK(tile(0, 3072).overlaps(tile(512, 512)));     // whole rows meet every tile
  // Rows shifted by whole rows: tile rows 64.. of one are rows 0.. of the other.
  CHECK(footprint(in_hbm(DType::bf16, 64, 3072, 64 * 3072 * 2, {{512, 1}})).overlaps(tile(0, 512)));
  CHECK(!footprint(in_hbm(DType::bf16, 64, 3072, 64 * 3072 * 2 + 1024, {{512, 1}})).overlaps(tile(0, 512)));
  // Different row strides: the byte ranges decide (conservative).
  CHECK(tile(0, 512, 128, 3072).overlaps(tile(512, 512, 64, 6144)));
}
