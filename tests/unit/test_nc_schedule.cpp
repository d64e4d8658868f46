// The NeuronCore compiler's list scheduler (mapper/neuroncore/emit): where it places instructions
// in bundles. Timing follows from placement (bundles issue in order, each when all its operands
// are ready), so these are the placement rules the compiled kernels' overlap depends on.
#include <catch2/catch.hpp>

#include "mapper/neuroncore/emit.hpp"
#include "tests/unit/nc_test_config.hpp"

using namespace tessera;
using namespace tessera::neuroncore;

namespace {

// Bundle index holding instruction `i` of the program.
int bundle_of(const Program& p, int32_t i) {
  for (size_t b = 0; b < p.bundles.size(); ++b)
    for (int32_t s : p.bundles[b].slot)
      if (s == i) return static_cast<int>(b);
  return -1;
}

}  // namespace

TEST_CASE("nc-schedule: DMAs on one queue keep their order but may share a bundle, dma0 first", "[nc-schedule]") {
  Program p;
  Emitter em(p);
  em.begin_kernel("k");
  for (int i = 0; i < 4; ++i) em.dma(on_chip(Space::sbuf, DType::bf16, 0, 128, i * 1024, {{512, 1}}),
                                     in_hbm(DType::bf16, 128, 512, i * 131072, {{512, 1}}), Emitter::DmaClass::spread);
  em.schedule(48, nullptr);
  // Four independent loads on the spread queue: two bundles, each dma0 then dma1, in program order.
  REQUIRE(p.bundles.size() == 3);  // + halt
  CHECK(p.bundles[0].slot[static_cast<size_t>(Lane::dma0)] == 0);
  CHECK(p.bundles[0].slot[static_cast<size_t>(Lane::dma1)] == 1);
  CHECK(p.bundles[1].slot[static_cast<size_t>(Lane::dma0)] == 2);
  CHECK(p.bundles[1].slot[static_cast<size_t>(Lane::dma1)] == 3);
  for (int i = 0; i < 4; ++i) CHECK(p.instrs[static_cast<size_t>(i)].queue == kQueueAll);
}

TEST_CASE("nc-schedule: a reader of a long result on another engine goes where the stream has caught up with it", "[nc-schedule]") {
  const CoreConfig cfg = preset_config();
  for (const bool timed : {false, true}) {
    Program p;
    Emitter em(p);
    em.begin_kernel("k");
    // Tile 0: a 512-column matmul into PSUM bank 0; then tile 1's matmuls into bank 1 (each
    // 512 tensor cycles = 183 ns at 2.8 GHz); then a vector add reading bank 0.
    auto mm = [&](int64_t bank, int64_t sb_off) {
      Instr ls;
      ls.op = Op::load_stationary;
      ls.src0 = on_chip(Space::sbuf, DType::bf16, 0, 128, sb_off, {{128, 1}});
      em.emit(ls, Lane::tensor);
      Instr m;
      m.op = Op::multiply_moving;
      m.dst = on_chip(Space::psum, DType::f32, 0, 128, bank * 2048, {{512, 1}});
      m.src0 = on_chip(Space::sbuf, DType::bf16, 0, 128, 4096 + sb_off, {{512, 1}});
      m.start = m.stop = true;
      em.emit(m, Lane::tensor);
    };
    mm(0, 0);
    for (int i = 0; i < 4; ++i) mm(1, 256 * (i + 1));
    Instr add;
    add.op = Op::tensor_tensor;
    add.alu = Alu::add;
    add.dst = on_chip(Space::sbuf, DType::f32, 0, 128, 65536, {{512, 1}});
    add.src0 = add.dst;
    add.src1 = on_chip(Space::psum, DType::f32, 0, 128, 0, {{512, 1}});
    em.emit(add, Lane::vector);
    em.schedule(48, timed ? &cfg : nullptr);
    const int producer = bundle_of(p, 1), reader = bundle_of(p, 10);
    INFO("timed " << timed);
    if (!timed) {
      CHECK(reader == producer + 1);  // right after: its bundle (and tile 1's load_stationary) waits
    } else {
      // 183 ns of matmul + the 200-cycle hand-off gap at the vector clock (179 ns at 1.12 GHz)
      // = 362 ns: past two of tile 1's 183 ns matmuls (and their loads), into the bundle after.
      CHECK(bundle_of(p, 3) == producer + 2);  // tile 1's first matmul
      CHECK(reader == bundle_of(p, 5) + 1);
    }
  }
}

namespace {
Instr vec_op(int64_t off) {
  Instr v;
  v.op = Op::tensor_scalar;
  v.alu = Alu::add;
  v.dst = on_chip(Space::sbuf, DType::f32, 0, 128, off, {{64, 1}});
  v.src0 = v.dst;
  return v;
}
void prefetch_dma(Emitter& em, int64_t i) {
  em.dma(on_chip(Space::sbuf, DType::bf16, 0, 128, 100000 + i * 2048, {{1024, 1}}), in_hbm(DType::bf16, 128, 1024, i * 262144, {{1024, 1}}),
         Emitter::DmaClass::prefetch);
}
}  // namespace

TEST_CASE("nc-schedule: held prefetches go out one after every N instructions, in the kernel then emitting", "[nc-schedule]") {
  Program p;
  Emitter em(p);
  em.begin_kernel("a");
  em.begin_hold();
  for (int i = 0; i < 3; ++i) prefetch_dma(em, i);
  em.end_hold();
  CHECK(em.size() == 0);  // held, not emitted
  em.begin_kernel("b");
  em.release(2);
  for (int i = 0; i < 5; ++i) em.emit(vec_op(i * 256), Lane::vector);  // one DMA after the 2nd and the 4th
  CHECK(em.size() == 7);
  em.flush_held();  // the third
  CHECK(em.size() == 8);
  em.schedule(48, nullptr);
  // Program order: v0 v1 D0 v2 v3 D1 v4 D2; the DMAs belong to kernel b (1), where they went out.
  const std::vector<bool> is_dma{false, false, true, false, false, true, false, true};
  for (size_t i = 0; i < is_dma.size(); ++i) {
    INFO("instruction " << i);
    CHECK((p.instrs[i].op == Op::dma) == is_dma[i]);
    CHECK(p.instrs[i].kernel == 1);
    if (is_dma[i]) CHECK(p.instrs[i].queue == kQueuePrefetch);
  }
  // A prefetch is not hoisted above the instruction it was released after (it has no dependency
  // to hold it there): D1 in the bundle of v3 or later.
  CHECK(bundle_of(p, 5) >= bundle_of(p, 4));
  CHECK(bundle_of(p, 2) >= bundle_of(p, 1));
}

TEST_CASE("nc-schedule: weights held for the next kernel are its first instructions", "[nc-schedule]") {
  Program p;
  Emitter em(p);
  em.begin_kernel("a");
  em.emit(vec_op(0), Lane::vector);
  em.begin_hold();
  prefetch_dma(em, 0);
  prefetch_dma(em, 1);
  em.end_hold_for_next_kernel();
  em.emit(vec_op(256), Lane::vector);  // still kernel a: the held DMAs wait
  CHECK(em.size() == 2);
  em.begin_kernel("b");  // its own weights first, before anything of b can read them
  CHECK(em.size() == 4);
  em.emit(vec_op(512), Lane::vector);
  em.schedule(48, nullptr);
  CHECK(p.instrs[2].op == Op::dma);
  CHECK(p.instrs[3].op == Op::dma);
  CHECK(p.instrs[2].kernel == 1);
  CHECK(p.instrs[3].kernel == 1);
  CHECK(p.instrs[4].kernel == 1);
  // With no kernel begun, flush_held emits them where it is called.
  Program q;
  Emitter e2(q);
  e2.begin_kernel("a");
  e2.begin_hold();
  prefetch_dma(e2, 0);
  e2.end_hold_for_next_kernel();
  e2.flush_held();
  CHECK(e2.size() == 1);
}
