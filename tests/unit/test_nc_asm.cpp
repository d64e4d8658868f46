// NeuronCore assembler, disassembler and hardware-rule validator (isa/neuroncore/asm.hpp,
// validate.hpp; syntax and rules in docs/neuroncore-asm.md).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/cost_table.hpp"
#include "isa/neuroncore/validate.hpp"
#include "isa/params.hpp"

using namespace tessera;
using namespace tessera::neuroncore;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

const std::string kRoot = TESSERA_SOURCE_DIR;

std::string dump(const std::vector<Diagnostic>& d) {
  std::string s;
  for (const auto& x : d) s += x.str() + "\n";
  return s;
}

CoreConfig trn1() {
  DiagnosticList d;
  const TargetDesc* t = target_of_preset("trn1");
  REQUIRE(t);
  ParamSet ps = ParamSet::resolve(*t, *t->find_preset("trn1"), {}, d);
  REQUIRE(d.empty());
  return CoreConfig::from(ps);
}

// Diagnostics of assembling `text` (empty if it assembles).
std::vector<Diagnostic> syntax_errors(const std::string& text) {
  try {
    (void)assemble(text, "t.s");
  } catch (const InputError& e) {
    return e.diagnostics();
  }
  return {};
}

// The single syntax error of `text`, checked to be on `line`.
Diagnostic one_syntax_error(const std::string& text, int line = 1) {
  auto d = syntax_errors(text);
  INFO(text);
  INFO(dump(d));
  REQUIRE(d.size() == 1);
  CHECK(d[0].where == "t.s:" + std::to_string(line));
  return d[0];
}

std::vector<Diagnostic> violations(const Program& p, const CoreConfig& c) {
  try {
    validate(p, c);
  } catch (const InputError& e) {
    return e.diagnostics();
  }
  return {};
}
std::vector<Diagnostic> violations(const std::string& text, const CoreConfig& c) { return violations(assemble(text, "v.s"), c); }
std::vector<Diagnostic> violations(const std::string& text) { return violations(text, trn1()); }

// Checks that the violations are exactly `messages` (substrings, in order), all at `where_prefix`.
void expect_violations(const std::vector<Diagnostic>& d, const std::string& where_prefix, const std::vector<std::string>& messages) {
  INFO(dump(d));
  REQUIRE(d.size() == messages.size());
  for (size_t i = 0; i < d.size(); ++i) {
    CHECK_THAT(d[i].where, StartsWith(where_prefix));
    CHECK_THAT(d[i].message, Contains(messages[i]));
  }
}
void expect_violation(const std::string& text, const std::string& where_prefix, const std::string& message) {
  INFO(text);
  expect_violations(violations(text), where_prefix, {message});
}
void expect_valid(const std::string& text, const CoreConfig& c) {
  INFO(text);
  std::string all;
  for (const auto& x : violations(text, c)) all += x.str() + "\n";
  CHECK(all == "");
}
void expect_valid(const std::string& text) { expect_valid(text, trn1()); }

// Every op, every option and operand form.
const char* kAllOps = R"(# every op kind
.hbm x  fp32 [128, 512] @0x0
.hbm y  bf16 [4, 8, 16] @4096    # decimal address
top:
dma0: dma sb.bf16[0:128]@0{128}, hbm.bf16[128x128]@0x0{128} | dma1: dma sb.fp32[0:128]@256{4:256,128}, hbm.fp32[128x4096]@0x10000{4,128} queue=5 signal=s3
vector: tensor_copy sb.fp32[0:128]@2048{512}, ps.fp32[0:128]@0{512} | tensor: load_stationary sb.bf16[0:128]@0{128}
tensor: multiply_moving ps.fp32[0:128]@0{512}, sb.bf16[0:128]@256{512} start stop | scalar: activation sb.fp32[0:128]@0{512}, ps.fp32[0:128]@0{512} func=gelu_tanh scale=0.125 bias=-1e-05 | gpsimd: iota sb.int32[0:128]@0{64} base=0 pstep=64 fstep=1
tensor: multiply_moving ps.fp32[0:64]@2048+r3*-512{8,64}, sb.bf16[64:64]@0{512:2} stop
tensor: multiply_moving ps.fp32[0:128]@4096{256}, sb.bf16[0:128]@0{256}
tensor: transpose ps.bf16[0:64]@0{128}, sb.bf16[0:128]@0{64}
vector: tensor_tensor sb.fp32[0:128]@0{512}, sb.fp32[0:128]@2048{512}, ps.fp32[0:128]@0{512} op=subtract
vector: tensor_scalar sb.fp32[0:128]@0{512}, sb.fp32[0:128]@0{512} op=multiply imm=2.5
vector: tensor_scalar sb.fp32[0:128]@0{512}, sb.fp32[0:128]@0{512} imm1=3 op1=add imm=-0.5 op=max
vector: tensor_reduce sb.fp32[0:128]@0{1}, sb.fp32[0:128]@0{2,2,2,64} op=max negate
vector: tensor_reduce sb.fp32[0:128]@0{1}, sb.fp32[0:128]@0{512:0} op=add
vector: transpose32 sb.bf16[0:32]@0{32}, sb.bf16[32:32]@0{32}
vector: bn_stats sb.fp32[0:128]@0{6}, sb.fp32[0:128]@64{512}
vector: bn_aggr sb.fp32[0:128]@0{2}, sb.fp32[0:128]@64{12}
inner:
also_inner:
vector: memset sb.bf16[0:128]@0+r15*2{1024} imm=0
vector: select sb.fp32[0:128]@0{8}, sb.uint8[0:128]@0{8}, sb.fp32[0:128]@64{8}, sb.fp32[0:128]@128{8}
scalar: activation sb.bf16[0:128]@0{512}, sb.bf16[0:128]@1024{512} func=exp bias=sb.fp32[0:128]@4096{1} acc=sb.fp32[0:128]@4100{1}
scalar: activation sb.bf16[0:128]@0{512}, sb.bf16[0:128]@1024{512} func=identity scale=-1 bias=2
gpsimd: affine_select sb.fp32[0:128]@0{128}, sb.fp32[0:128]@512{128} op=is_ge base=0 pstep=1 fstep=-1 fill=-inf
gpsimd: gather sb.fp32[0:128]@0{16}, sb.fp32[0:128]@64{512}, sb.int32[0:128]@2048{16}
gpsimd: partition_all_reduce sb.fp32[0:128]@0{64}, sb.fp32[0:128]@256{64} op=add
sync: sem_wait s31 value=2 | control: set_reg r0 value=4
sync: sem_signal s0 value=1 | control: add_reg r1 value=-3
sync: step_marker step=7 | control: dec_branch_nz r0 inner
nop
control: nop
control: branch_nz r1 top
control: jump also_inner
dma1: dma hbm.fp8_e4m3[1x0]@0x1000{16}, sb.fp8_e4m3[0:1]@0{16} | dma0: dma sb.fp16[0:2]@0{8}, sb.fp16[2:2]@0{8}
control: halt
)";

}  // namespace

TEST_CASE("nc-asm: every op kind round trips exactly", "[nc-asm]") {
  const Program p1 = assemble(kAllOps, "all.s");
  // Every op of the ISA (nop is an empty slot) appears.
  std::set<Op> seen;
  for (const auto& in : p1.instrs) seen.insert(in.op);
  for (int o = static_cast<int>(Op::load_stationary); o <= static_cast<int>(Op::halt); ++o) {
    INFO(op_name(static_cast<Op>(o)));
    CHECK(seen.count(static_cast<Op>(o)) == 1);
  }
  const std::string d1 = disassemble(p1);
  const Program p2 = assemble(d1, "round.s");
  CHECK(same_program(p1, p2));
  const std::string d2 = disassemble(p2);
  CHECK(d1 == d2);
  CHECK(p1.labels == p2.labels);
  REQUIRE(p2.hbm.size() == 2);
  CHECK(p2.hbm[1].name == "y");
  CHECK(p2.hbm[1].shape == std::vector<int64_t>{4, 8, 16});
  CHECK(p2.hbm[1].offset == 4096);
  // Canonical text: hex HBM addresses, slots in lane order, labels alone, dense strides dropped.
  CHECK_THAT(d1, Contains(".hbm y bf16 [4, 8, 16] @0x1000\n"));
  CHECK_THAT(d1, Contains("\ntensor: load_stationary sb.bf16[0:128]@0{128} | vector: tensor_copy sb.fp32[0:128]@2048{512}, ps.fp32[0:128]@0{512}\n"));
  CHECK_THAT(d1, Contains("dma1: dma sb.fp32[0:128]@256{4:256,128}, hbm.fp32[128x4096]@0x10000{4,128} queue=5 signal=s3\n"));
  CHECK_THAT(d1, Contains("\nalso_inner:\ninner:\nvector: memset sb.bf16[0:128]@0+r15*2{1024} imm=0\n"));
  CHECK_THAT(d1, Contains("vector: tensor_scalar sb.fp32[0:128]@0{512}, sb.fp32[0:128]@0{512} op=max imm=-0.5 op1=add imm1=3\n"));
  CHECK_THAT(d1, Contains("func=gelu_tanh scale=0.125 bias=-1e-05 | gpsimd: iota"));
  CHECK_THAT(d1, Contains("fill=-inf\n"));
  CHECK_THAT(d1, Contains("\nnop\nnop\n"));
  CHECK_THAT(d1, Contains("dma0: dma sb.fp16[0:2]@0{8}, sb.fp16[2:2]@0{8} | dma1: dma hbm.fp8_e4m3[1x0]@0x1000{16}"));
  // A field-level change is noticed by same_program.
  Program p3 = p2;
  p3.instrs[3].imm[0] = 0.126;
  CHECK_FALSE(same_program(p1, p3));
  p3 = p2;
  p3.instrs[0].dst.dims[0].stride = 2;
  CHECK_FALSE(same_program(p1, p3));
}

TEST_CASE("nc-asm: operands map to Instr fields as the spec says", "[nc-asm]") {
  const Program p = assemble(kAllOps, "all.s");
  auto in_at = [&](size_t bundle, Lane lane) -> const Instr& {
    const int32_t s = p.bundles.at(bundle).slot[static_cast<size_t>(lane)];
    REQUIRE(s >= 0);
    return p.instrs[static_cast<size_t>(s)];
  };
  // Bundle 0: two DMAs; strides of dims without one are dense.
  const Instr& d1 = in_at(0, Lane::dma1);
  CHECK(d1.op == Op::dma);
  CHECK(d1.queue == 5);
  CHECK(d1.sem == 3);
  CHECK(d1.dst.ndims == 2);
  CHECK(d1.dst.dims[0] == Dim{4, 256});
  CHECK(d1.dst.dims[1] == Dim{128, 1});
  CHECK(d1.src0.space == Space::hbm);
  CHECK(d1.src0.parts == 128);
  CHECK(d1.src0.part_stride == 4096);
  CHECK(d1.src0.offset == 0x10000);
  CHECK(d1.src0.dims[0] == Dim{4, 128});
  CHECK(in_at(0, Lane::dma0).queue == 0);
  CHECK(in_at(0, Lane::dma0).sem == -1);
  CHECK(in_at(0, Lane::dma0).line == 5);
  CHECK(p.bundles[0].line == 5);
  CHECK(p.labels.at("top") == 0);
  // Bundle 2: flags, activation defaults and bias immediate, iota immediates.
  CHECK(in_at(2, Lane::tensor).start);
  CHECK(in_at(2, Lane::tensor).stop);
  const Instr& act = in_at(2, Lane::scalar);
  CHECK(act.func == Func::gelu_tanh);
  CHECK(act.imm[0] == 0.125);
  CHECK(act.imm[1] == -1e-5);
  CHECK_FALSE(act.src1.present());
  CHECK(in_at(2, Lane::gpsimd).imm == std::array<double, 4>{0, 64, 1, 0});
  // Bundle 3: dynamic addressing with a negative scale; PSUM partitions; element strides.
  const Instr& mm = in_at(3, Lane::tensor);
  CHECK(mm.dst.offset == 2048);
  CHECK(mm.dst.offset_reg == 3);
  CHECK(mm.dst.reg_scale == -512);
  CHECK(mm.dst.dims[0] == Dim{8, 64});
  CHECK(mm.src0.part_start == 64);
  CHECK(mm.src0.dims[0] == Dim{512, 2});
  CHECK_FALSE(mm.start);
  // tensor_scalar defaults and explicit op1/imm1.
  CHECK(in_at(7, Lane::vector).alu == Alu::multiply);
  CHECK(in_at(7, Lane::vector).alu1 == Alu::bypass);
  CHECK(in_at(7, Lane::vector).imm[1] == 0);
  CHECK(in_at(8, Lane::vector).alu == Alu::max);
  CHECK(in_at(8, Lane::vector).alu1 == Alu::add);
  CHECK(in_at(8, Lane::vector).imm[0] == -0.5);
  CHECK(in_at(8, Lane::vector).imm[1] == 3);
  CHECK(in_at(9, Lane::vector).negate);
  CHECK(in_at(10, Lane::vector).src0.dims[0] == Dim{512, 0});
  // Labels on the same bundle; select and activation operands.
  CHECK(p.labels.at("inner") == 14);
  CHECK(p.labels.at("also_inner") == 14);
  const Instr& sel = in_at(15, Lane::vector);
  CHECK(sel.src0.dtype == DType::u8);
  CHECK(sel.src1.offset == 64);
  CHECK(sel.aux.offset == 128);
  const Instr& act2 = in_at(16, Lane::scalar);
  CHECK(act2.src1.offset == 4096);
  CHECK(act2.aux.offset == 4100);
  CHECK(act2.imm[0] == 1);  // scale default
  CHECK(in_at(17, Lane::scalar).imm[0] == -1);
  CHECK(in_at(17, Lane::scalar).imm[1] == 2);
  const Instr& af = in_at(18, Lane::gpsimd);
  CHECK(af.alu == Alu::is_ge);
  CHECK(af.imm[2] == -1);
  CHECK(af.imm[3] == -std::numeric_limits<double>::infinity());
  // Control and sync.
  CHECK(in_at(21, Lane::sync).sem == 31);
  CHECK(in_at(21, Lane::sync).imm[0] == 2);
  CHECK(in_at(21, Lane::control).reg == 0);
  CHECK(in_at(22, Lane::control).imm[0] == -3);
  CHECK(in_at(23, Lane::sync).imm[0] == 7);
  CHECK(in_at(23, Lane::control).target == 14);
  for (int l = 0; l < kLanes; ++l) {
    CHECK(p.bundles[24].slot[static_cast<size_t>(l)] == -1);
    CHECK(p.bundles[25].slot[static_cast<size_t>(l)] == -1);
  }
  CHECK(in_at(26, Lane::control).target == 0);
  CHECK(in_at(27, Lane::control).target == 14);
  CHECK(in_at(29, Lane::control).op == Op::halt);
  // Instructions are stored bundle by bundle in lane order.
  int32_t next = 0;
  for (const auto& b : p.bundles)
    for (int32_t s : b.slot)
      if (s >= 0) CHECK(s == next++);
}

TEST_CASE("nc-asm: single slots and access patterns print canonically", "[nc-asm]") {
  AccessPattern ap;
  ap.space = Space::sbuf;
  ap.dtype = DType::bf16;
  ap.part_start = 32;
  ap.parts = 32;
  ap.offset = 256;
  ap.offset_reg = 1;
  ap.reg_scale = 1024;
  ap.ndims = 2;
  ap.dims[0] = {4, 256};
  ap.dims[1] = {128, 1};
  CHECK(format_ap(ap) == "sb.bf16[32:32]@256+r1*1024{4:256,128}");
  ap.dims[0] = {4, 128};
  CHECK(format_ap(ap) == "sb.bf16[32:32]@256+r1*1024{4,128}");
  Instr in;
  in.op = Op::dma;
  in.dst = ap;
  in.src0 = ap;
  in.src0.space = Space::hbm;
  in.src0.part_start = 0;
  in.src0.part_stride = 512;
  in.src0.offset_reg = -1;
  in.src0.offset = 0x28000;
  in.queue = 2;
  CHECK(disassemble(in) == "dma0: dma sb.bf16[32:32]@256+r1*1024{4,128}, hbm.bf16[32x512]@0x28000{4,128} queue=2");
  CHECK(disassemble(in, Lane::dma1).substr(0, 9) == "dma1: dma");
  Instr h;
  h.op = Op::halt;
  CHECK(disassemble(h) == "control: halt");
}

TEST_CASE("nc-asm: programs built in code get labels for their branch targets", "[nc-asm]") {
  Program p;
  Instr set;
  set.op = Op::set_reg;
  set.reg = 2;
  set.imm[0] = 3;
  Instr dec;
  dec.op = Op::dec_branch_nz;
  dec.reg = 2;
  dec.target = 1;
  Instr halt;
  halt.op = Op::halt;
  p.instrs = {set, dec, halt};
  p.bundles.resize(3);
  for (int i = 0; i < 3; ++i) p.bundles[static_cast<size_t>(i)].slot[static_cast<size_t>(Lane::control)] = i;
  const std::string text = disassemble(p);
  CHECK(text == "control: set_reg r2 value=3\n_b1:\ncontrol: dec_branch_nz r2 _b1\ncontrol: halt\n");
  const Program q = assemble(text, "gen.s");
  CHECK(q.instrs[1].target == 1);
  CHECK(q.labels.at("_b1") == 1);
}

TEST_CASE("nc-asm: the docs example assembles and validates", "[nc-asm]") {
  const std::string doc = read_file(kRoot + "/docs/neuroncore-asm.md");
  const size_t h = doc.find("## Example");
  REQUIRE(h != std::string::npos);
  const size_t b = doc.find("```\n", h);
  REQUIRE(b != std::string::npos);
  const size_t e = doc.find("```", b + 4);
  REQUIRE(e != std::string::npos);
  const Program p = assemble(doc.substr(b + 4, e - b - 4), "docs/neuroncore-asm.md");
  CHECK(p.hbm.size() == 3);
  CHECK(p.bundles.size() >= 6);
  CHECK_NOTHROW(validate(p, trn1()));
  CHECK(same_program(p, assemble(disassemble(p), "again.s")));
}

namespace {

// A sequential interpreter of the few ops the GEMM kernel uses (fp32/bf16 only), independent of
// the model: it proves the kernel's addressing computes A @ B. DMAs complete at once, so
// semaphore waits are no-ops here.
struct MiniCore {
  const Program& p;
  const CoreConfig& c;
  std::vector<uint8_t> hbm, sb, ps;
  std::array<int64_t, kRegs> reg{};
  std::vector<float> stationary;  // [K][M]
  int64_t stat_k = 0, stat_m = 0;

  MiniCore(const Program& prog, const CoreConfig& cfg, size_t hbm_bytes)
      : p(prog), c(cfg), hbm(hbm_bytes), sb(static_cast<size_t>(cfg.partitions * cfg.sbuf_partition_bytes)),
        ps(static_cast<size_t>(cfg.partitions * cfg.psum_partition_bytes)) {}

  uint8_t* addr(const AccessPattern& ap, int64_t row, int64_t e) {
    const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
    int64_t byte = ap.offset + (ap.offset_reg >= 0 ? reg[static_cast<size_t>(ap.offset_reg)] * ap.reg_scale : 0);
    for (int i = ap.ndims - 1; i >= 0; --i) {
      const Dim& d = ap.dims[static_cast<size_t>(i)];
      byte += (e % d.num) * d.stride * es;
      e /= d.num;
    }
    if (ap.space == Space::hbm) return &hbm.at(static_cast<size_t>(byte + row * ap.part_stride * es));
    auto& mem = ap.space == Space::sbuf ? sb : ps;
    const int64_t pb = ap.space == Space::sbuf ? c.sbuf_partition_bytes : c.psum_partition_bytes;
    return &mem.at(static_cast<size_t>((ap.part_start + row) * pb + byte));
  }
  float get(const AccessPattern& ap, int64_t row, int64_t e) {
    const uint8_t* a = addr(ap, row, e);
    uint32_t bits = 0;
    if (ap.dtype == DType::bf16) {
      uint16_t h;
      std::memcpy(&h, a, 2);
      bits = static_cast<uint32_t>(h) << 16;
    } else {
      REQUIRE(ap.dtype == DType::f32);
      std::memcpy(&bits, a, 4);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  void put(const AccessPattern& ap, int64_t row, int64_t e, float v) {
    uint8_t* a = addr(ap, row, e);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (ap.dtype == DType::bf16) {
      REQUIRE((bits & 0xffff) == 0);  // test data is exact in bf16
      const uint16_t h = static_cast<uint16_t>(bits >> 16);
      std::memcpy(a, &h, 2);
    } else {
      REQUIRE(ap.dtype == DType::f32);
      std::memcpy(a, &bits, 4);
    }
  }
  void exec(const Instr& in, int32_t& pc, bool& halted) {
    switch (in.op) {
      case Op::dma: {
        const int64_t sf = in.src0.free_elems(), df = in.dst.free_elems();
        for (int64_t i = 0; i < in.src0.elems(); ++i) put(in.dst, i / df, i % df, get(in.src0, i / sf, i % sf));
        break;
      }
      case Op::load_stationary:
        stat_k = in.src0.parts;
        stat_m = in.src0.free_elems();
        stationary.assign(static_cast<size_t>(stat_k * stat_m), 0.f);
        for (int64_t k = 0; k < stat_k; ++k)
          for (int64_t m = 0; m < stat_m; ++m) stationary[static_cast<size_t>(k * stat_m + m)] = get(in.src0, k, m);
        break;
      case Op::multiply_moving:
        REQUIRE(in.src0.parts == stat_k);
        REQUIRE(in.dst.parts == stat_m);
        for (int64_t m = 0; m < stat_m; ++m)
          for (int64_t n = 0; n < in.src0.free_elems(); ++n) {
            float acc = in.start ? 0.f : get(in.dst, m, n);
            for (int64_t k = 0; k < stat_k; ++k) acc += stationary[static_cast<size_t>(k * stat_m + m)] * get(in.src0, k, n);
            put(in.dst, m, n, acc);
          }
        break;
      case Op::tensor_copy:
        for (int64_t r = 0; r < in.dst.parts; ++r)
          for (int64_t e = 0; e < in.dst.free_elems(); ++e) put(in.dst, r, e, get(in.src0, r, e));
        break;
      case Op::set_reg: reg[static_cast<size_t>(in.reg)] = static_cast<int64_t>(in.imm[0]); break;
      case Op::add_reg: reg[static_cast<size_t>(in.reg)] += static_cast<int64_t>(in.imm[0]); break;
      case Op::dec_branch_nz:
        if (--reg[static_cast<size_t>(in.reg)] != 0) pc = in.target - 1;
        break;
      case Op::halt: halted = true; break;
      case Op::sem_wait:
      case Op::sem_signal: break;
      default: FAIL("MiniCore does not run " << op_name(in.op));
    }
  }
  void run() {
    bool halted = false;
    int steps = 0;
    for (int32_t pc = 0; !halted && pc < static_cast<int32_t>(p.bundles.size()); ++pc) {
      REQUIRE(++steps < 10000);
      const int32_t at = pc;
      for (int32_t s : p.bundles[static_cast<size_t>(at)].slot)
        if (s >= 0) exec(p.instrs[static_cast<size_t>(s)], pc, halted);
    }
    REQUIRE(halted);
  }
};

}  // namespace

TEST_CASE("nc-asm: the hand-written 256x256x256 bf16 GEMM assembles validates and computes A@B", "[nc-asm]") {
  const Program p = assemble_file(kRoot + "/scenarios/neuroncore/micro/gemm256_bf16.s");
  const CoreConfig c = trn1();
  REQUIRE_NOTHROW(validate(p, c));
  const HbmTensor *a = p.find_hbm("a"), *b = p.find_hbm("b"), *cc = p.find_hbm("c");
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(cc);
  CHECK(a->dtype == DType::bf16);
  CHECK(b->dtype == DType::bf16);
  CHECK(cc->dtype == DType::f32);
  CHECK(a->shape == std::vector<int64_t>{256, 256});
  CHECK(cc->shape == std::vector<int64_t>{256, 256});
  // A loop (dec_branch_nz to a label) with register-addressed operands.
  bool loop = false, dynamic = false;
  for (const auto& in : p.instrs) {
    loop = loop || (in.op == Op::dec_branch_nz && p.labels.count("mloop") && in.target == p.labels.at("mloop"));
    for (const AccessPattern* ap : {&in.dst, &in.src0}) dynamic = dynamic || ap->offset_reg >= 0;
  }
  CHECK(loop);
  CHECK(dynamic);
  CHECK(same_program(p, assemble(disassemble(p), "again.s")));

  // Run it on small integers (exact in bf16 and in the fp32 sums) and compare with A @ B.
  MiniCore core(p, c, static_cast<size_t>(cc->offset + 256 * 256 * 4));
  auto av = [](int i, int k) { return static_cast<float>((i * 7 + k * 3) % 11 - 5); };
  auto bv = [](int k, int j) { return static_cast<float>((k * 5 + j * 13) % 9 - 4); };
  AccessPattern ha;
  ha.space = Space::hbm;
  ha.dtype = DType::bf16;
  ha.parts = 1;
  ha.dims[0] = {256 * 256, 1};
  AccessPattern hb = ha;
  ha.offset = a->offset;
  hb.offset = b->offset;
  for (int i = 0; i < 256; ++i)
    for (int k = 0; k < 256; ++k) {
      core.put(ha, 0, i * 256 + k, av(i, k));
      core.put(hb, 0, i * 256 + k, bv(i, k));
    }
  core.run();
  AccessPattern hc = ha;
  hc.dtype = DType::f32;
  hc.offset = cc->offset;
  int wrong = 0;
  for (int i = 0; i < 256; ++i)
    for (int j = 0; j < 256; ++j) {
      double want = 0;
      for (int k = 0; k < 256; ++k) want += static_cast<double>(av(i, k)) * bv(k, j);
      if (core.get(hc, 0, i * 256 + j) != static_cast<float>(want)) ++wrong;
    }
  CHECK(wrong == 0);
}

// ---------------------------------------------------------------------------------------------
// Syntax errors.

TEST_CASE("nc-asm: syntax errors name file and line and all come at once", "[nc-asm]") {
  const std::string text =
      ".hbm a bf16 [128, 128] @0x0\n"
      "vectr: tensor_copy sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{4}\n"
      "vector: tensor_cpy sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{4}\n"
      "# a comment\n"
      "vector: tensor_copy sb.bf61[0:128]@0{4}, sb.fp32[0:128]@16{4} | tensor: load_stationary sb.bf16[0:128]@0{-4}\n"
      "loop:\n"
      "vector: tensor_tensor sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{4}, sb.fp32[0:128]@32{4} op=ad\n"
      "control: jump lop\n";
  std::vector<Diagnostic> d;
  try {
    (void)assemble(text, "kern.s");
    FAIL("assembled");
  } catch (const InputError& e) {
    d = e.diagnostics();
    CHECK_THAT(std::string(e.what()), Contains("kern.s:7: unknown ALU op"));
  }
  INFO(dump(d));
  REQUIRE(d.size() == 6);
  CHECK(d[0].where == "kern.s:2");
  CHECK_THAT(d[0].message, Contains("unknown lane 'vectr'"));
  CHECK_THAT(d[0].hint, Contains("did you mean 'vector'?"));
  CHECK(d[1].where == "kern.s:3");
  CHECK_THAT(d[1].message, Contains("unknown op 'tensor_cpy'"));
  CHECK_THAT(d[1].hint, Contains("'tensor_copy'"));
  CHECK(d[2].where == "kern.s:5");
  CHECK_THAT(d[2].message, Contains("unknown dtype 'bf61'"));
  CHECK_THAT(d[2].hint, Contains("'bf16'"));
  CHECK(d[3].where == "kern.s:5");
  CHECK_THAT(d[3].message, Contains("dim count -4"));
  CHECK(d[4].where == "kern.s:7");
  CHECK_THAT(d[4].hint, Contains("'add'"));
  CHECK(d[5].where == "kern.s:8");
  CHECK_THAT(d[5].message, Contains("unknown label 'lop'"));
  CHECK_THAT(d[5].hint, Contains("'loop'"));
}

TEST_CASE("nc-asm: malformed operands are rejected", "[nc-asm]") {
  const std::string good = "sb.fp32[0:128]@0{4}";
  auto slot = [&](const std::string& ap) { return "vector: tensor_copy " + good + ", " + ap + "\n"; };
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0{4:-1}")).message, Contains("negative stride -1"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0{0}")).message, Contains("dim count 0"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0{1,2,2,1,1}")).message, Contains("5 free dims, at most 4"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:0]@0{4}")).message, Contains("zero partitions"));
  CHECK_THAT(one_syntax_error(slot("sbuf.fp32[0:128]@0{4}")).message, Contains("unknown memory space 'sbuf'"));
  CHECK_THAT(one_syntax_error(slot("sb.fp64[0:128]@0{4}")).message, Contains("unknown dtype 'fp64'"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[128]@0{4}")).message, Contains("bad partitions"));
  CHECK_THAT(one_syntax_error(slot("hbm.fp32[0:128]@0{4}")).hint, Contains("[ROWSxROW_STRIDE]"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@-4{4}")).message, Contains("bad offset '-4'"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0+r16*4{4}")).message, Contains("register r16 out of range r0-r15"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0+r1{4}")).message, Contains("bad dynamic offset"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0")).message, Contains("malformed operand"));
  CHECK_THAT(one_syntax_error(slot("sb.fp32[0:128]@0{4")).message, Contains("unclosed bracket"));
  CHECK_THAT(one_syntax_error("vector: tensor_copy " + good + " " + good + "\n").message, Contains("expected ','"));
  CHECK_THAT(one_syntax_error("vector: tensor_copy " + good + ",\n").message, Contains("trailing ','"));
  CHECK_THAT(one_syntax_error("vector: tensor_copy " + good + "\n").message, Contains("tensor_copy takes 2 operands, got 1"));
  CHECK_THAT(one_syntax_error("vector: tensor_copy " + good + ", " + good + ", " + good + "\n").message, Contains("unexpected operand"));
}

TEST_CASE("nc-asm: bad lanes ops options registers and labels are rejected", "[nc-asm]") {
  const std::string ap = "sb.fp32[0:128]@0{4}";
  const std::string hb = "hbm.fp32[128x4]@0x0{4}";
  auto e = one_syntax_error("dma0: tensor_copy " + ap + ", " + ap + "\n");
  CHECK_THAT(e.message, Contains("tensor_copy runs on lane vector, not dma0"));
  CHECK_THAT(e.hint, StartsWith("write `vector: tensor_copy"));
  CHECK_THAT(one_syntax_error("vector: dma " + ap + ", " + hb + "\n").message, Contains("dma runs on lane dma0 or dma1, not vector"));
  CHECK_THAT(one_syntax_error("dma1: dma " + ap + ", " + hb + " | dma1: dma " + ap + ", " + hb + "\n").message,
             Contains("lane dma1 used twice in one bundle"));
  CHECK_THAT(one_syntax_error("control: nop | control: halt\n").message, Contains("lane control used twice"));
  CHECK_THAT(one_syntax_error("vector: nop\n").message, Contains("nop runs on lane control"));
  CHECK_THAT(one_syntax_error("halt\n").hint, Contains("write `control: halt`"));
  CHECK_THAT(one_syntax_error("nop | control: halt\n").message, Contains("bare 'nop'"));
  CHECK_THAT(one_syntax_error("vector: tensor_copy " + ap + ", " + ap + " | \n").message, Contains("empty slot"));
  e = one_syntax_error("dma0: dma " + ap + ", " + hb + " queu=1\n");
  CHECK_THAT(e.message, Contains("unknown option 'queu' for dma"));
  CHECK_THAT(e.hint, Contains("did you mean 'queue'?"));
  CHECK_THAT(one_syntax_error("dma0: dma " + ap + ", " + hb + " queue=1 queue=2\n").message, Contains("'queue' given twice"));
  CHECK_THAT(one_syntax_error("dma0: dma " + ap + ", " + hb + " queue=40000\n").message, Contains("bad DMA queue"));
  CHECK_THAT(one_syntax_error("dma0: dma " + ap + ", " + hb + " signal=s32\n").message, Contains("semaphore s32 out of range s0-s31"));
  CHECK_THAT(one_syntax_error("dma0: dma " + ap + ", " + hb + " queue=1, signal=s1\n").message, Contains("unexpected ','"));
  CHECK_THAT(one_syntax_error("vector: tensor_scalar " + ap + ", " + ap + " op=add\n").message, Contains("tensor_scalar needs imm="));
  CHECK_THAT(one_syntax_error("vector: tensor_scalar " + ap + ", " + ap + " op=add imm=x\n").message, Contains("bad number in 'imm=x'"));
  CHECK_THAT(one_syntax_error("vector: tensor_scalar " + ap + ", " + ap + " op=add imm=nan\n").message, Contains("bad number"));
  auto d = syntax_errors("vector: tensor_scalar " + ap + " op=add imm=1, " + ap + "\n");
  REQUIRE(d.size() == 2);
  CHECK_THAT(d[0].message, Contains("operand `" + ap + "` after the options"));
  CHECK_THAT(d[1].message, Contains("tensor_scalar takes 2 operands, got 1"));
  CHECK_THAT(one_syntax_error("scalar: activation " + ap + ", " + ap + " func=gelu_tan\n").hint, Contains("'gelu_tanh'"));
  CHECK_THAT(one_syntax_error("tensor: multiply_moving " + ap + ", " + ap + " strat\n").message, Contains("unexpected operand `strat`"));
  CHECK_THAT(one_syntax_error("control: set_reg r16 value=1\n").message, Contains("register r16 out of range r0-r15"));
  CHECK_THAT(one_syntax_error("control: set_reg x1 value=1\n").message, Contains("expected a register"));
  CHECK_THAT(one_syntax_error("control: set_reg r1 value=1.5\n").message, Contains("not an integer"));
  CHECK_THAT(one_syntax_error("sync: sem_wait s32 value=1\n").message, Contains("semaphore s32 out of range"));
  CHECK_THAT(one_syntax_error("sync: step_marker\n").message, Contains("step_marker needs step="));
  CHECK_THAT(one_syntax_error("l:\ncontrol: dec_branch_nz r1, l\n", 2).message, Contains("unexpected ','"));
  CHECK_THAT(one_syntax_error("control: halt\nx:\n", 2).message, Contains("label 'x' names no bundle"));
  CHECK_THAT(one_syntax_error("x:\nx:\ncontrol: halt\n", 2).message, Contains("label 'x' defined twice"));
  CHECK_THAT(one_syntax_error("vector: | control: halt\n").message, Contains("lane vector has no op"));
  CHECK_THAT(one_syntax_error("vector:\ncontrol: halt\n").message, Contains("'vector:' has no instruction"));
  CHECK_THAT(one_syntax_error("loop: control: halt\n").hint, Contains("a label goes on its own line"));
  CHECK_THAT(one_syntax_error("control: jump 9lives\n").message, Contains("bad label"));
  CHECK_THAT(one_syntax_error(".hmb a fp32 [4] @0\n").hint, Contains("'.hbm'"));
  CHECK_THAT(one_syntax_error(".hbm a fp32 [4, 0] @0\n").message, Contains("bad dimension '0'"));
  CHECK_THAT(one_syntax_error(".hbm a fp32 [4] 0x10\n").message, Contains("bad address"));
  CHECK_THAT(one_syntax_error(".hbm a fp32 [4] @0\n.hbm a fp32 [4] @16\n", 2).message, Contains("declared twice"));
  CHECK_THROWS_AS(assemble_file(kRoot + "/no/such/file.s"), InputError);
}

// ---------------------------------------------------------------------------------------------
// Hardware rules.

TEST_CASE("nc-asm: rule partition start alignment", "[nc-asm]") {
  expect_violation("vector: tensor_copy sb.fp32[16:48]@0{64}, sb.fp32[64:48]@1024{64}\n", "bundle 0 lane vector (v.s:1)",
                   "dst partition start 16 for 48 partitions: operands over 33-64 partitions start at 0 or 64");
  expect_violation("nop\nvector: memset sb.fp32[8:16]@0{4} imm=0\n", "bundle 1 lane vector (v.s:2)",
                   "partition start 8 for 16 partitions: operands over <= 32 partitions start at 0, 32, 64 or 96");
  expect_violation("scalar: activation sb.fp32[0:96]@0{4}, ps.fp32[32:96]@0{4} func=relu\n", "bundle 0 lane scalar",
                   "src partition start 32 for 96 partitions: operands over more than 64 partitions start at 0");
  expect_valid("vector: tensor_copy sb.fp32[96:32]@0{64}, sb.fp32[64:32]@1024{64}\nvector: tensor_copy sb.fp32[64:64]@0{64}, sb.fp32[0:64]@0{64}\n"
               "vector: memset sb.fp32[0:33]@0{64} imm=0\n");
  // DMA engines address partitions one by one.
  expect_valid("dma0: dma sb.fp32[5:10]@0{4}, hbm.fp32[10x4]@0x0{4}\n");
}

TEST_CASE("nc-asm: rule partitions within the SBUF", "[nc-asm]") {
  expect_violation("vector: memset sb.fp32[0:129]@0{4} imm=0\n", "bundle 0 lane vector", "dst partitions 0-128 outside the 128 partitions [0, 128)");
  expect_violation("dma1: dma sb.fp32[100:30]@0{4}, hbm.fp32[30x4]@0x0{4}\n", "bundle 0 lane dma1", "partitions 100-129 outside the 128 partitions");
}

TEST_CASE("nc-asm: rule SBUF PSUM and HBM bounds", "[nc-asm]") {
  expect_violation("vector: memset sb.fp32[0:128]@196600{4} imm=0\n", "bundle 0 lane vector",
                   "dst SBUF bytes [196600, 196616) beyond the 196608 bytes of a partition (sbuf.partition_bytes)");
  // Strided extent: (3 * 16384 + 1) * 4 bytes.
  expect_violation("vector: memset sb.fp32[0:128]@0{4:16384} imm=0\n", "bundle 0 lane vector", "SBUF bytes [0, 196612)");
  // Dynamic offsets: only the static part is checked.
  expect_valid("vector: memset sb.fp32[0:128]@196600+r1*4096{2} imm=0\n");
  expect_violation("vector: memset ps.fp32[0:128]@16380{2} imm=0\n", "bundle 0 lane vector",
                   "dst PSUM bytes [16380, 16388) beyond the 16384 bytes of a partition (psum.partition_bytes)");
  expect_violation("dma0: dma sb.fp32[0:1]@0{4}, hbm.fp32[1x4]@0x3FFFFFFF8{4}\n", "bundle 0 lane dma0",
                   "src HBM bytes [17179869176, 17179869192) beyond the HBM capacity of 17179869184 bytes");
  // The last byte of the last row counts: row 1 starts at 16 GiB.
  expect_violation("dma0: dma sb.fp32[0:2]@0{1}, hbm.fp32[2x4294967296]@0x0{1}\n", "bundle 0 lane dma0", "src HBM bytes [0, 17179869188)");
  expect_valid("dma0: dma sb.fp32[0:2]@0{1}, hbm.fp32[2x4294967295]@0x0{1}\n");
}

TEST_CASE("nc-asm: rule HBM declarations fit and do not overlap", "[nc-asm]") {
  auto d = violations(".hbm a fp32 [128, 128] @0x0\n.hbm b fp32 [4] @0xfff0\n.hbm c bf16 [1024, 1024, 1024, 9] @0x10000\ncontrol: halt\n");
  INFO(dump(d));
  REQUIRE(d.size() == 2);
  CHECK(d[0].where == ".hbm c");
  CHECK_THAT(d[0].message, Contains("beyond the HBM capacity"));
  CHECK(d[1].where == ".hbm b");
  CHECK_THAT(d[1].message, Contains("HBM tensors 'a' and 'b' overlap"));
}

TEST_CASE("nc-asm: rule tensor engine load_stationary", "[nc-asm]") {
  CoreConfig c = trn1();
  c.tensor_rows = 64;
  expect_violations(violations("tensor: load_stationary sb.bf16[0:128]@0{128}\n", c), "bundle 0 lane tensor",
                    {"load_stationary K = 128 partitions exceeds tensor.rows 64"});
  expect_violation("tensor: load_stationary sb.bf16[0:128]@0{256}\n", "bundle 0 lane tensor", "load_stationary M = 256 elements exceeds tensor.cols 128");
  expect_violation("tensor: load_stationary ps.bf16[0:128]@0{128}\n", "bundle 0 lane tensor", "src in ps: the tensor engine reads SBUF");
}

TEST_CASE("nc-asm: rule tensor engine multiply_moving", "[nc-asm]") {
  const std::string src = "sb.bf16[0:128]@0{512}";
  expect_valid("tensor: multiply_moving ps.fp32[0:128]@14336{512}, " + src + " start stop\n");
  expect_violation("tensor: multiply_moving sb.fp32[0:128]@0{512}, " + src + "\n", "bundle 0 lane tensor", "dst in sb: multiply_moving writes PSUM");
  expect_violation("tensor: multiply_moving ps.bf16[0:128]@0{512}, " + src + "\n", "bundle 0 lane tensor", "dst bf16: multiply_moving accumulates fp32 in PSUM");
  expect_violation("tensor: multiply_moving ps.fp32[0:128]@0{512}, ps.bf16[0:128]@0{512}\n", "bundle 0 lane tensor", "src in ps: the tensor engine reads SBUF");
  expect_violations(violations("tensor: multiply_moving ps.fp32[0:128]@0{1024}, sb.bf16[0:128]@0{1024}\n"), "bundle 0 lane tensor",
                    {"multiply_moving N = 1024 exceeds tensor.max_moving_free 512", "cross a bank boundary: the tensor engine writes one 2048-byte PSUM bank"});
  expect_violation("tensor: multiply_moving ps.fp32[0:128]@0{256}, " + src + "\n", "bundle 0 lane tensor", "dst has 256 elements per partition, src N = 512");
  expect_violation("nop\nnop\ntensor: multiply_moving ps.fp32[0:128]@1024{512}, " + src + "\n", "bundle 2 lane tensor (v.s:3)",
                   "dst PSUM bytes [1024, 3072) cross a bank boundary");
  CoreConfig c = trn1();
  c.tensor_cols = 64;
  c.tensor_rows = 32;
  expect_violations(violations("tensor: multiply_moving ps.fp32[0:128]@0{512}, " + src + "\n", c), "bundle 0 lane tensor",
                    {"multiply_moving M = 128 dst partitions exceeds tensor.cols 64", "multiply_moving K = 128 src partitions exceeds tensor.rows 32"});
}

TEST_CASE("nc-asm: rule tensor engine transpose", "[nc-asm]") {
  expect_valid("tensor: transpose ps.bf16[0:64]@0{128}, sb.bf16[0:128]@0{64}\n");
  expect_violation("tensor: transpose sb.bf16[0:64]@0{128}, sb.bf16[0:128]@0{64}\n", "bundle 0 lane tensor", "dst in sb: transpose writes PSUM");
  expect_violation("tensor: transpose ps.bf16[0:128]@0{64}, sb.bf16[0:128]@0{64}\n", "bundle 0 lane tensor",
                   "dst [128 x 64] is not the transpose of src [128 x 64]");
}

TEST_CASE("nc-asm: rule engine operands live in SBUF or PSUM", "[nc-asm]") {
  expect_violation("vector: tensor_copy sb.fp32[0:128]@0{4}, hbm.fp32[128x4]@0x0{4}\n", "bundle 0 lane vector",
                   "src in hbm: vector ops read and write SBUF or PSUM, not HBM");
  expect_violation("gpsimd: iota hbm.int32[128x64]@0x0{64} base=0 pstep=1 fstep=1\n", "bundle 0 lane gpsimd", "dst in hbm: gpsimd ops");
  expect_violation("scalar: activation sb.fp32[0:128]@0{4}, sb.fp32[0:128]@0{4} func=relu acc=hbm.fp32[128x1]@0x0{1}\n", "bundle 0 lane scalar",
                   "acc in hbm: scalar ops");
}

TEST_CASE("nc-asm: rule operand shapes agree", "[nc-asm]") {
  expect_violation("vector: tensor_tensor sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{4}, sb.fp32[0:64]@32{4} op=add\n", "bundle 0 lane vector",
                   "dst [128 x 4] and src1 [64 x 4] differ: tensor_tensor is elementwise");
  expect_violation("vector: tensor_copy sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{2,4}\n", "bundle 0 lane vector",
                   "dst [128 x 4] and src [128 x 8] differ");
  expect_violation("vector: tensor_reduce sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{512} op=add\n", "bundle 0 lane vector",
                   "dst [128 x 4]: a tensor_reduce result is [128 x 1]");
  expect_violation("vector: bn_stats sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{512}\n", "bundle 0 lane vector", "a bn_stats result is [128 x 6]");
  expect_violation("vector: bn_aggr sb.fp32[0:128]@0{2}, sb.fp32[0:128]@16{8}\n", "bundle 0 lane vector", "bn_aggr reads bn_stats records of 6");
  expect_violation("vector: transpose32 sb.fp32[0:32]@0{16}, sb.fp32[32:32]@0{16}\n", "bundle 0 lane vector", "transpose32 transposes 32x32 blocks");
  expect_violation("scalar: activation sb.fp32[0:128]@0{4}, sb.fp32[0:128]@0{4} func=relu bias=sb.fp32[0:128]@64{4}\n", "bundle 0 lane scalar",
                   "bias [128 x 4]: an activation bias is [128 x 1]");
  expect_violation("vector: select sb.fp32[0:128]@0{4}, sb.uint8[0:128]@0{4}, sb.fp32[0:128]@64{4}, sb.fp32[0:128]@128{5}\n", "bundle 0 lane vector",
                   "dst [128 x 4] and on_false [128 x 5] differ");
  expect_violation("gpsimd: gather sb.fp32[0:128]@0{16}, sb.fp32[0:128]@64{512}, sb.fp32[0:128]@2048{16}\n", "bundle 0 lane gpsimd",
                   "gather indices are an integer dtype");
  expect_violation("gpsimd: gather sb.fp32[0:128]@0{16}, sb.fp32[0:128]@64{512}, sb.int32[0:128]@2048{8}\n", "bundle 0 lane gpsimd", "gather shapes");
}

TEST_CASE("nc-asm: rule DMA endpoints counts and queues", "[nc-asm]") {
  const std::string sb = "sb.fp32[0:128]@0{4}";
  expect_valid("dma0: dma " + sb + ", sb.fp32[0:128]@64{2,2}\ndma1: dma hbm.fp32[128x4]@0x0{4}, " + sb + " queue=127 signal=s31\n");
  expect_violation("dma0: dma ps.fp32[0:128]@0{4}, hbm.fp32[128x4]@0x0{4}\n", "bundle 0 lane dma0",
                   "PSUM is not a DMA endpoint: DMAs move HBM<->SBUF and SBUF<->SBUF");
  expect_violation("dma1: dma " + sb + ", ps.fp32[0:128]@0{4}\n", "bundle 0 lane dma1", "PSUM is not a DMA endpoint");
  expect_violation("dma0: dma hbm.fp32[128x4]@0x0{4}, hbm.fp32[128x4]@0x1000{4}\n", "bundle 0 lane dma0", "dma between two HBM operands");
  expect_violation("dma0: dma " + sb + ", hbm.fp32[64x4]@0x0{4}\n", "bundle 0 lane dma0", "dma moves 256 src elements [64 x 4] into 512 dst elements [128 x 4]");
  expect_violation("dma0: dma " + sb + ", hbm.bf16[128x4]@0x0{4}\n", "bundle 0 lane dma0", "dma copies bytes: dst fp32 and src bf16 differ");
  CoreConfig c = trn1();
  c.dma_engines = 2;
  c.dma_queues_per_engine = 4;
  expect_violations(violations("dma0: dma " + sb + ", hbm.fp32[128x4]@0x0{4} queue=8\n", c), "bundle 0 lane dma0", {"DMA queue 8 outside [0, 8)"});
  // Spread over every engine: queue=all is each engine's queue 1, allN its queue N.
  expect_violations(violations("dma0: dma " + sb + ", hbm.fp32[128x4]@0x0{4} queue=all4\n", c), "bundle 0 lane dma0",
                    {"DMA queue all4: engines have queues 0-3"});
  CHECK(violations("dma0: dma " + sb + ", hbm.fp32[128x4]@0x0{4} queue=all3\n", c).empty());
}

TEST_CASE("nc-asm: spread DMA queues round trip and reject junk", "[nc-asm]") {
  const std::string text = ".hbm x fp32 [128, 4] @0x0\ndma0: dma sb.fp32[0:128]@0{4}, hbm.fp32[128x4]@0x0{4} queue=all | "
                           "dma1: dma hbm.fp32[128x4]@0x0{4}, sb.fp32[0:128]@0{4} queue=all2\n";
  const Program p = assemble(text, "spread.s");
  REQUIRE(p.instrs.size() == 2);
  CHECK(p.instrs[0].queue == kQueueAll);
  CHECK(p.instrs[1].queue == -2);
  CHECK(disassemble(p) == text);
  CHECK_THROWS_WITH(assemble("dma0: dma sb.fp32[0:128]@0{4}, hbm.fp32[128x4]@0x0{4} queue=allx\n", "bad.s"),
                    Contains("bad DMA queue in 'queue=allx'") && Contains("allN spreads over queue N"));
}

TEST_CASE("nc-asm: rule lanes registers semaphores and targets in programs built in code", "[nc-asm]") {
  Program p = assemble(
      "loop:\n"
      "vector: tensor_copy sb.fp32[0:128]@0{4}, sb.fp32[0:128]@16{4} | dma0: dma sb.fp32[0:128]@0{4}, hbm.fp32[128x4]@0x0{4}\n"
      "sync: sem_signal s1 value=1 | control: set_reg r1 value=3\n"
      "control: dec_branch_nz r1 loop\n"
      "control: halt\n",
      "code.s");
  REQUIRE_NOTHROW(validate(p, trn1()));
  // Move the vector op to the scalar lane and the dma to the vector lane.
  auto& b0 = p.bundles[0].slot;
  std::swap(b0[static_cast<size_t>(Lane::vector)], b0[static_cast<size_t>(Lane::scalar)]);
  std::swap(b0[static_cast<size_t>(Lane::dma0)], b0[static_cast<size_t>(Lane::vector)]);
  p.instrs[0].src0.offset_reg = 20;
  p.instrs[2].sem = 40;                // sem_signal
  p.instrs[3].reg = 16;                // set_reg
  p.instrs[4].target = 9;              // dec_branch_nz
  p.labels["gone"] = 4;
  const auto d = violations(p, trn1());
  INFO(dump(d));
  REQUIRE(d.size() == 7);
  CHECK(d[0].where == "label gone");
  CHECK_THAT(d[0].message, Contains("label names bundle 4, outside the program's 4 bundles"));
  CHECK(d[1].where == "bundle 0 lane vector (code.s:2)");
  CHECK_THAT(d[1].message, Contains("dma in lane vector: it runs on lane dma0 or dma1"));
  CHECK(d[2].where == "bundle 0 lane scalar (code.s:2)");
  CHECK_THAT(d[2].message, Contains("tensor_copy in lane scalar: it runs on lane vector"));
  CHECK_THAT(d[3].message, Contains("src offset register r20 outside r0-r15"));
  CHECK(d[4].where == "bundle 1 lane sync (code.s:3)");
  CHECK_THAT(d[4].message, Contains("semaphore s40 outside s0-s31"));
  CHECK(d[5].where == "bundle 1 lane control (code.s:3)");
  CHECK_THAT(d[5].message, Contains("register r16 outside r0-r15"));
  CHECK(d[6].where == "bundle 2 lane control (code.s:4)");
  CHECK_THAT(d[6].message, Contains("branch target bundle 9 outside the program's 4 bundles"));
}

TEST_CASE("nc-asm: every violation of a program is reported at once", "[nc-asm]") {
  const auto d = violations(
      "vector: memset sb.fp32[8:16]@0{4} imm=0 | dma1: dma ps.fp32[0:1]@0{4}, hbm.fp32[1x4]@0x0{4}\n"
      "nop\n"
      "tensor: load_stationary sb.bf16[0:128]@0{256}\n");
  INFO(dump(d));
  REQUIRE(d.size() == 3);
  CHECK(d[0].where == "bundle 0 lane vector (v.s:1)");
  CHECK(d[1].where == "bundle 0 lane dma1 (v.s:1)");
  CHECK(d[2].where == "bundle 2 lane tensor (v.s:3)");
  try {
    validate(assemble("vector: memset sb.fp32[8:16]@0{4} imm=0\n", "w.s"), trn1());
    FAIL("validated");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), StartsWith("bundle 0 lane vector (w.s:1): dst partition start 8"));
  }
}

// tensor_scalar's operands may be [P,1] values per partition (NKI's tensor_scalar): imm= an AP
// goes to src1, imm1= an AP to aux; printed back the same way; the validator wants [P,1].
TEST_CASE("nc-asm: tensor_scalar operands per partition", "[nc-asm]") {
  const std::string text =
      "vector: tensor_scalar sb.fp32[0:128]@0{512}, sb.fp32[0:128]@2048{512} op=subtract imm=sb.fp32[0:128]@4096{1} op1=multiply "
      "imm1=sb.fp32[0:128]@4100{1}\n"
      "vector: tensor_scalar sb.fp32[0:128]@0{512}, sb.fp32[0:128]@2048{512} op=multiply imm=sb.fp32[0:128]@4096{1}\n";
  const Program p = assemble(text, "ts.s");
  REQUIRE(p.instrs.size() >= 2);
  CHECK(p.instrs[0].src1.present());
  CHECK(p.instrs[0].aux.present());
  CHECK(p.instrs[0].src1.offset == 4096);
  CHECK(p.instrs[0].aux.offset == 4100);
  CHECK(p.instrs[1].src1.present());
  CHECK(!p.instrs[1].aux.present());
  const std::string d = disassemble(p);
  CHECK_THAT(d, Contains("op=subtract imm=sb.fp32[0:128]@4096{1} op1=multiply imm1=sb.fp32[0:128]@4100{1}"));
  CHECK(same_program(p, assemble(d, "round.s")));
  CHECK_NOTHROW(validate(p, trn1()));
  // An operand that is not [P,1] is refused.
  const Program bad = assemble("vector: tensor_scalar sb.fp32[0:128]@0{512}, sb.fp32[0:128]@2048{512} op=add imm=sb.fp32[0:128]@4096{2}\n", "bad.s");
  try {
    validate(bad, trn1());
    FAIL("validate accepted a [128,2] tensor_scalar operand");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Contains("tensor_scalar operand"));
  }
}
