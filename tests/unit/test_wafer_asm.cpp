// Wafer PE assembler, disassembler, validator, layout loader and the ISA tables
// (isa/wafer/isa.hpp, asm.hpp; syntax and rules in docs/wafer-asm.md).
#include <catch2/catch.hpp>

#include <bit>
#include <set>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/wafer/asm.hpp"
#include "isa/wafer/isa.hpp"

using namespace tessera;
using namespace tessera::wafer;
using Catch::Matchers::Contains;

namespace {

const std::string kRoot = TESSERA_SOURCE_DIR;
const std::string kMicro = kRoot + "/scenarios/wafer/micro";

std::string dump(const std::vector<Diagnostic>& d) {
  std::string s;
  for (const auto& x : d) s += x.str() + "\n";
  return s;
}

std::vector<Diagnostic> asm_errors(const std::string& text, const Bindings& b = {}, const std::string& pe = {}) {
  try {
    (void)assemble(text, "t.pe", b, pe);
  } catch (const InputError& e) {
    return e.diagnostics();
  }
  return {};
}

// The single error of `text`, on `line`, whose message contains `msg`.
void one_error(const std::string& text, int line, const std::string& msg) {
  auto d = asm_errors(text);
  INFO(text);
  INFO(dump(d));
  REQUIRE(d.size() == 1);
  CHECK(d[0].where == "t.pe:" + std::to_string(line));
  CHECK_THAT(d[0].message, Contains(msg));
}

std::vector<Diagnostic> violations(const std::string& text, const WaferConfig& c) {
  DiagnosticList d;
  validate(assemble(text, "v.pe"), c, d);
  return d.items();
}

std::vector<Diagnostic> layout_errors(const std::string& json, const WaferConfig& c) {
  try {
    (void)load_layout_text(json, "l.json", kMicro, c);
  } catch (const InputError& e) {
    return e.diagnostics();
  }
  return {};
}

bool any_contains(const std::vector<Diagnostic>& d, const std::string& where, const std::string& msg) {
  for (const auto& x : d)
    if (x.where == where && x.message.find(msg) != std::string::npos) return true;
  return false;
}

// Every instruction, every DSD kind, every task kind and option.
const char* kAll = R"(# every op and DSD kind
.param n = 8
.param c = 3
.data a f32 $n fill=1.5
.data b f32 2*$n
.data h f16 16 fill=-0.25
.data g f16 16
.data q i32 8
.data k i16 8
.dsd am mem1d a
.dsd bm mem1d b off=1 len=8 stride=2
.dsd bneg mem1d b off=15 len=8 stride=-2
.dsd b4 mem4d b dims=2:8,2:1,2:2,1:0
.dsd hm mem1d h len=8
.dsd gm mem1d g off=8
.dsd qm mem1d q
.dsd km mem1d k
.dsd in fabin f32 color=$c queue=1 len=8
.dsd hin fabin f16 color=4 queue=0 len=8
.dsd out fabout f32 color=5 queue=2 len=8 control
.dsd hout fabout f16 color=6 queue=3 len=8 index
.dsd fq fifo a
.dsd adv fabout f32 color=7 queue=4 len=8 advance
.task main local id=0 active
  fmacs am, am, bm, 2.0
  fmacs am, am, in, r3
top:
  fmach hm, hm, gm, wv
  fmachs am, am, hm, 0.5
  fadds am, bm, b4
  faddh hm, hm, hin
  faddhs am, am, hm
  fsubs out, am, 1.0
  fsubh hout, hm, gm
  fmuls am, am, bneg
  fmulh hm, gm, hm
  fmaxs am, am, 0.0
  fnegs fq, am
  fmovs am, fq
  fmovh hm, gm
  mov16 km, hm
  mov32 qm, am
  add16 km, km, 1
  fh2s am, hm
  fs2h hout, am async activate=recv unblock=ctl
  fmovs out, in async unblock=recv
  mov r0, 5
  mov r1, px
  add r2, r1, py
  sub r3, r2, -7
  mul r4, r3, 0x10
  dsd_off bm, r4
  dsd_len in, 8
  jmp tail
tail:
  bz r0, top
  bnz r1, top
  loop r2, tail
  activate recv
  block ctl
  unblock recv
  nop
  blz r3, top
  ret
.task recv data id=3 color=3 queue=1 blocked
  fmovs am, wv
  halt
.task ctl control id=40
  mov r5, inf
  mov r6, -3.5e-08
  ret
)";

}  // namespace

TEST_CASE("wafer-asm: opcode table matches the enum") {
  std::set<std::string_view> names;
  for (int i = 0; i < kOps; ++i) {
    const OpInfo& info = op_info(static_cast<Op>(i));
    CHECK(static_cast<int>(info.op) == i);
    CHECK(names.insert(info.name).second);
    if (info.cls == OpClass::dsd) CHECK(info.types.size() == info.roles.size());
    CHECK(info.roles.size() <= 4);
  }
  CHECK(sizeof(Instr) <= 48);
  CHECK(sizeof(Dsd) <= 32);
  CHECK(sizeof(Route) <= 10);
}

TEST_CASE("wafer-asm: every instruction and DSD kind round trips") {
  const Program p = assemble(kAll, "all.pe");
  const std::string text = disassemble(p);
  INFO(text);
  const Program q = assemble(text, "again.pe");
  CHECK(same_program(p, q));
  CHECK(disassemble(q) == text);
  std::set<Op> seen;
  for (const auto& in : p.instrs) seen.insert(in.op);
  CHECK(static_cast<int>(seen.size()) == kOps);
  std::set<DsdKind> kinds;
  for (const auto& d : p.dsds) kinds.insert(d.kind);
  CHECK(kinds.size() == 5);
}

TEST_CASE("wafer-asm: decoded fields") {
  const Program p = assemble(kAll, "all.pe");
  CHECK(p.params.at("n") == 8);
  REQUIRE(p.data.size() == 6);
  CHECK(p.data[0].addr == 0);
  CHECK(p.data[1].addr == 32);
  CHECK(p.data[1].count == 16);
  CHECK(p.data[2].addr == 96);   // f16 x 16 = 32 bytes
  CHECK(p.data[4].addr == 160);  // after g (f16 x 16)
  CHECK(p.data[5].addr == 192);
  CHECK(p.data_bytes() == 208);
  CHECK(p.data[2].has_fill);
  CHECK(p.data[2].fill == -0.25f);
  const Dsd& bm = p.dsds[1];
  CHECK(bm.base == 36);
  CHECK(bm.dims[0].len == 8);
  CHECK(bm.dims[0].stride == 2);
  CHECK(bm.elems() == 8);
  CHECK(bm.byte_range() == std::pair<int64_t, int64_t>{36, 96});
  const Dsd& bneg = p.dsds[2];
  CHECK(bneg.byte_range() == std::pair<int64_t, int64_t>{32 + 1 * 4, 32 + 16 * 4});
  const Dsd& b4 = p.dsds[3];
  CHECK(b4.kind == DsdKind::mem4d);
  CHECK(b4.ndims == 4);
  CHECK(b4.elems() == 8);
  const Dsd& in = p.dsds[8];
  CHECK(in.kind == DsdKind::fabin);
  CHECK(in.color == 3);
  CHECK(in.queue == 1);
  CHECK(in.length == 8);
  CHECK(p.dsds[10].control);
  CHECK(p.dsds[11].index);
  CHECK(!p.dsds[10].advance);
  CHECK(p.dsds[13].advance);
  CHECK(!p.dsds[13].control);
  CHECK(p.dsds[12].kind == DsdKind::fifo);
  CHECK(p.dsds[12].length == 8);
  REQUIRE(p.tasks.size() == 3);
  CHECK(p.tasks[0].active);
  CHECK(p.tasks[1].kind == TaskKind::data);
  CHECK(p.tasks[1].color == 3);
  CHECK(p.tasks[1].queue == 1);
  CHECK(p.tasks[1].blocked);
  CHECK(p.tasks[2].kind == TaskKind::control);
  CHECK(p.tasks[2].id == 40);
  CHECK(p.tasks[0].end == p.tasks[1].entry);
  const Instr& f0 = p.instrs[0];
  CHECK(f0.op == Op::fmacs);
  CHECK(f0.a[3].kind == OpndKind::imm_f);
  CHECK(std::bit_cast<float>(f0.a[3].v) == 2.0f);
  CHECK(p.instrs[1].a[2].kind == OpndKind::dsd);
  CHECK(p.instrs[1].a[3] == Operand{OpndKind::reg, 3});
  CHECK(p.instrs[2].a[3].kind == OpndKind::wv);
  CHECK(p.labels.at("top") == 2);
  const Instr& fs2h = p.instrs[19];
  CHECK(fs2h.op == Op::fs2h);
  CHECK(fs2h.async);
  CHECK(fs2h.on_activate == 1);
  CHECK(fs2h.on_unblock == 2);
  const Instr& sub = p.instrs[24];
  CHECK(sub.op == Op::sub);
  CHECK(sub.a[2] == Operand{OpndKind::imm_i, -7});
  CHECK(p.instrs[25].a[2] == Operand{OpndKind::imm_i, 16});
  CHECK(p.instrs[22].a[1].kind == OpndKind::px);
  const Instr& loop = p.instrs[31];
  CHECK(loop.op == Op::loop);
  CHECK(loop.a[1] == Operand{OpndKind::label, p.labels.at("tail")});
  CHECK(p.instrs[32].a[0] == Operand{OpndKind::task, 1});
  const Instr& blz = p.instrs[36];
  CHECK(blz.op == Op::blz);
  CHECK(blz.a[0] == Operand{OpndKind::reg, 3});
  CHECK(disassemble(p, p.instrs[19]) == "fs2h hout, am async activate=recv unblock=ctl");
  CHECK(disassemble(p, p.instrs[p.tasks[2].entry + 1]) == "mov r6, -3.5e-08");
  CHECK(instr_length(p, p.instrs[12]) == 8);  // fnegs fq, am: the fifo takes am's length
}

TEST_CASE("wafer-asm: arrays with disjoint live ranges share addresses") {
  // a (always), y0 live 0..1, h (always), y1 live 1..2, y2 live 2..3 (clear of y1, not of y0's
  // bytes: it takes them), y3 live 3..4 (live with y2: the gap between y2 and h is too short; y1's
  // bytes are free again and it runs on past them).
  const Program p = assemble(
      ".data a f32 4\n.data y0 f32 16 live=0..1\n.data h f16 3\n.data y1 f32 8 live=1..2\n.data y2 f32 12 live=2..3\n"
      ".data y3 f32 10 live=3..4\n.dsd m mem1d y2\n",
      "live.pe");
  REQUIRE(p.data.size() == 6);
  CHECK(p.data[0].addr == 0);
  CHECK(p.data[1].addr == 16);   // y0: after a
  CHECK(p.data[2].addr == 80);   // h: after y0 (always live)
  CHECK(p.data[3].addr == 88);   // y1: live with y0 and h, after both (h's 6 bytes aligned)
  CHECK(p.data[4].addr == 16);   // y2: y0's bytes (0..1 and 2..3 do not meet), 48 of its 64
  CHECK(p.data[5].addr == 88);   // y3: 40 bytes; 64..80 is too short, y1 (88..120) is dead
  CHECK(p.data_bytes() == 128);
  CHECK(p.dsds[0].base == 16);
  CHECK(p.data[4].live_lo == 2);
  CHECK(p.data[4].live_hi == 3);
  // Without live= every array is live with every other: declaration order, as before.
  const Program q = assemble(".data a f32 4\n.data b f16 3\n.data c f32 2\n", "seq.pe");
  CHECK(q.data[1].addr == 16);
  CHECK(q.data[2].addr == 24);
  // The text form keeps the ranges: assemble(disassemble(p)) is p.
  const std::string text = disassemble(p);
  CHECK(text.find(".data y2 f32 12 live=2..3") != std::string::npos);
  CHECK(same_program(assemble(text, "again.pe"), p));
  Program r = p;
  r.data[4].live_hi = 4;
  CHECK_FALSE(same_program(r, p));
}

TEST_CASE("wafer-asm: syntax errors name file and line") {
  const std::string head = ".data a f32 8\n.dsd am mem1d a\n.task t local id=0\n";  // instructions from line 4
  one_error(head + "  fadd am, am, am\n", 4, "unknown instruction 'fadd'");
  one_error(head + "  fadds am, am\n", 4, "takes 3 operand(s), got 2");
  one_error(head + "  fadds am, am, bm\n", 4, "unknown DSD 'bm'");
  one_error(head + "  fh2s am, am\n", 4, "operand 2 of fh2s: DSD 'am' is f32, fh2s wants a 16-bit float (f16, bf16, cbf16)");
  one_error(head + "  mov r16, 1\n", 4, "register r16 out of range");
  one_error(head + "  mov am, 1\n", 4, "expected a register");
  one_error(head + "  jmp nowhere\n  ret\n", 4, "unknown label 'nowhere'");
  one_error(head + "  activate nobody\n", 4, "unknown task 'nobody'");
  one_error(head + "  fmovs am, am activate=t\n", 4, "activate= needs async");
  one_error(head + "  fmovs am, am async\n", 4, "async needs a fabin or fabout operand");
  one_error(head + "  ret async\n", 4, "unexpected 'async'");
  one_error(head + "  fmovs am, am bogus=1\n", 4, "unexpected 'bogus=1'");
  one_error(head + "  fmovs am am\n", 4, "takes 2 operand(s), got 1");
  one_error(".data a f32 8\n.data b f32 4\n.dsd am mem1d a\n.dsd bm mem1d b\n.task t local id=0\n  fadds am, am, bm\n", 6, "operand lengths differ");
  one_error(".data a f32 8\n.dsd am mem1d a off=4 len=8\n", 2, "reaches outside array 'a'");
  one_error(".data a f32 8 live=3..1\n", 1, "bad live=3..1");
  one_error(".data a f32 8 live=2\n", 1, "bad live=2");
  one_error(".data a f32 8 fill=1 live=0..2\n", 1, "fill= needs it live throughout");
  one_error(".data a f32 8\n.dsd am mem1d a stride=2\n", 2, "missing len=");
  one_error(".data a f32 8\n.dsd am mem4d a dims=2:4,2:1,1:1,1:1,1:1\n", 2, "bad dims=");
  one_error(".dsd x fabin f32 color=32 queue=1 len=4\n", 1, "bad color=32");
  one_error(".dsd x fabin f32 color=1 queue=8 len=4\n", 1, "bad queue=8");
  one_error(".dsd x fabin f32 color=1 len=4\n", 1, "missing queue=");
  one_error(".dsd x fabout f32 color=1 queue=1 len=4 index\n", 1, "'index' needs a 16-bit type");
  one_error(".dsd x fabin f32 color=1 queue=1 len=4 advance\n", 1, "unexpected 'advance'");
  one_error(".dsd x fabin f32 color=1 queue=1 len=4\n.task t local id=0\n  fmovs x, x\n", 3, "cannot be a destination");
  one_error(".dsd x fabout f32 color=1 queue=1 len=4\n.task t local id=0\n  fmovs x, x\n", 3, "cannot be a source");
  one_error(".data a f32 8\n.data a f32 8\n", 2, "declared twice");
  one_error(".data px f32 8\n", 1, "bad array name 'px'");
  one_error(".data a f64 8\n", 1, "unknown type 'f64'");
  one_error(".dsd a mem2d x\n", 1, "unknown DSD kind 'mem2d'");
  one_error(".task t local id=0\n  ret\n.task u local id=0\n  ret\n", 3, "task id 0 already used");
  one_error(".task t data id=1 color=2\n  ret\n.task u data id=2 color=2\n  ret\n", 3, "already fires data task 't'");
  one_error(".task t data id=1 color=2 active\n  ret\n", 1, "unexpected 'active'");
  one_error(".task t local id=1 color=2\n  ret\n", 1, "unexpected 'color=2'");
  one_error(".task t local id=1\n", 1, "task 't' has no instructions");
  one_error("  ret\n", 1, "instruction outside a task");
  one_error(".task t local id=1\n  ret\nend:\n.task u local id=2\n  ret\n", 3, "label 'end' ends task 't'");
  one_error(".task t local id=1\n  jmp x\n.task u local id=2\nx:\n  ret\n", 2, "is in another task");
  one_error(".bogus 1\n", 1, "unknown directive '.bogus'");
  one_error(".data a f32 $m\n", 1, "unknown parameter '$m'");
  one_error(".param m\n.data a f32 $m\n", 2, "parameter '$m' has no value");
  one_error(".param m\n.param m\n", 2, "declared twice");
  one_error(".if 1\n.data a f32 4\n", 1, ".if without .endif");
  one_error(".endif\n", 1, ".endif without .if");
  one_error(".if 0\n.else\n.else\n.endif\n", 3, ".else given twice");
  one_error(".if x\n.endif\n", 1, "bad .if condition 'x'");
  // Every mistake of a file comes at once, in line order.
  auto d = asm_errors(".data a f64 8\n.task t local id=0\n  fadd x\n  mov r99, 1\n");
  INFO(dump(d));
  REQUIRE(d.size() == 3);
  CHECK(d[0].where == "t.pe:1");
  CHECK(d[1].where == "t.pe:3");
  CHECK(d[2].where == "t.pe:4");
  CHECK_THAT(d[1].hint, Contains("did you mean"));
}

TEST_CASE("wafer-asm: parameters are substituted per PE") {
  const std::string text = ".param n = 4\n.param col\n.data a f32 $n\n.dsd i fabin f32 color=$col queue=1 len=$n\n.task t local id=0\n  mov r0, $n\n  ret\n";
  const Program p = assemble(text, "p.pe", {{"col", 7}});
  CHECK(p.data[0].count == 4);
  CHECK(p.dsds[0].color == 7);
  CHECK(p.instrs[0].a[1] == Operand{OpndKind::imm_i, 4});
  const Program q = assemble(text, "p.pe", {{"col", 2}, {"n", 16}});
  CHECK(q.data[0].count == 16);
  CHECK(q.params.at("n") == 16);
  // Errors of an instance name file, line and PE.
  auto d = asm_errors(text, {{"col", 40}}, "PE (3,1)");
  INFO(dump(d));
  REQUIRE(d.size() == 1);
  CHECK(d[0].where == "t.pe:4 PE (3,1)");
  d = asm_errors(text, {{"col", 1}, {"colour", 2}}, "PE (0,0)");
  REQUIRE(d.size() == 1);
  CHECK(d[0].where == "t.pe PE (0,0)");
  CHECK_THAT(d[0].message, Contains("declares no `.param colour`"));
  CHECK_THAT(d[0].hint, Contains("col"));
  d = asm_errors(text);
  REQUIRE(d.size() == 1);
  CHECK(d[0].where == "t.pe:4");
  CHECK_THAT(d[0].message, Contains("'$col' has no value"));
}

TEST_CASE("wafer-asm: conditional assembly") {
  const std::string text = R"(.param on = 1
.data a f32 4
.if $on
.data b f32 4
.else
.data c f32 4
.if 1
.data d f32 4
.endif
.endif
.if !$on
.data e f32 4
.else
.data f f32 4 fill=$undeclared_but_skipped_no
.endif
)";
  auto d = asm_errors(text);
  INFO(dump(d));
  REQUIRE(d.size() == 1);  // only the taken branch is substituted
  CHECK(d[0].where == "t.pe:14");
  const Program p = assemble(".param on = 1\n.if $on\n.data b f32 4\n.else\n.data c f32 4\n.if 1\n.data d f32 4\n.endif\n.endif\n", "c.pe");
  REQUIRE(p.data.size() == 1);
  CHECK(p.data[0].name == "b");
  const Program q = assemble(".param on = 1\n.if $on\n.data b f32 4\n.else\n.data c f32 4\n.if 1\n.data d f32 4\n.endif\n.endif\n", "c.pe", {{"on", 0}});
  REQUIRE(q.data.size() == 2);
  CHECK(q.data[1].name == "d");
}

TEST_CASE("wafer-asm: validator checks the preset rules") {
  const WaferConfig w2 = preset_config("wse2"), w3 = preset_config("wse3");
  CHECK(violations(kAll, w2).empty());
  const std::string big = ".data a f32 11264\n.task t local id=63\n  ret\n";  // 45056 bytes = 44 KiB
  CHECK(violations(big, w2).empty());
  auto d = violations(".data a f32 11264\n.data b f16 1\n.task t local id=64\n  ret\n", w2);
  INFO(dump(d));
  REQUIRE(d.size() == 2);
  CHECK(d[0].where == "v.pe:3");
  CHECK_THAT(d[0].message, Contains("id 64 out of range"));
  CHECK(d[1].where == "v.pe");
  CHECK_THAT(d[1].message, Contains("data needs 45058 bytes of SRAM, 45056 available"));
  d = violations(".dsd o fabout f32 color=24 queue=6 len=4\n.dsd i fabin f32 color=2 queue=7 len=4\n.task t data id=1 color=30\n  ret\n", w2);
  INFO(dump(d));
  REQUIRE(d.size() == 3);
  CHECK(d[0].where == "v.pe:3");
  CHECK_THAT(d[0].message, Contains("color 30 is not routable"));
  CHECK(d[1].where == "v.pe:1");
  CHECK_THAT(d[1].message, Contains("color 24 is not routable"));
  CHECK_THAT(d[2].message, Contains("output queue 6, which has depth 0"));
  // WSE-3 has output queues 6 and 7.
  CHECK(violations(".dsd o fabout f32 color=2 queue=6 len=4\n.task t local id=0\n  ret\n", w3).empty());
  CHECK_THROWS_AS(validate(assemble(big + ".task u local id=64\n  ret\n", "x.pe"), w2), InputError);
}

TEST_CASE("wafer-asm: SIMD width rule per op dtype and stride") {
  const WaferConfig w2 = preset_config("wse2"), w3 = preset_config("wse3");
  struct Row {
    Op op;
    int64_t stride, wse2, wse3;
  };
  // Full widths (wafer.md): fp16 4/8, fp32 2/4, conversions 1/4, fmacs 1/1.
  const Row rows[] = {
      {Op::fmach, 1, 4, 8}, {Op::fmulh, 0, 4, 8}, {Op::faddh, 2, 4, 8}, {Op::fsubh, 3, 4, 8}, {Op::fmovh, 5, 4, 8},
      {Op::mov16, 6, 4, 8}, {Op::add16, 10, 4, 8}, {Op::fmach, 9, 2, 2}, {Op::fmach, 7, 2, 2}, {Op::fmach, 15, 2, 2},
      {Op::fmach, 8, 1, 1}, {Op::fmach, 16, 1, 1}, {Op::fmach, 4, 1, 1}, {Op::fmach, -1, 2, 2}, {Op::fmach, -2, 4, 8},
      {Op::fadds, 1, 2, 4}, {Op::fsubs, 0, 2, 4}, {Op::fmovs, 3, 2, 4}, {Op::mov32, 7, 2, 2}, {Op::fmachs, 8, 1, 1},
      {Op::faddhs, 2, 2, 4}, {Op::fmuls, 1, 2, 4}, {Op::fmaxs, 1, 2, 4}, {Op::fnegs, 1, 2, 4},
      {Op::fh2s, 1, 1, 4}, {Op::fs2h, 7, 1, 2}, {Op::fs2h, 8, 1, 1},
      {Op::fmacs, 1, 1, 1}, {Op::fmacs, 8, 1, 1}, {Op::mov, 1, 1, 1},
  };
  for (const auto& r : rows) {
    INFO(std::string(op_name(r.op)) << " stride " << r.stride);
    CHECK(simd_width(r.op, r.stride, w2) == r.wse2);
    CHECK(simd_width(r.op, r.stride, w3) == r.wse3);
  }
  CHECK(stride_width_cap(0) == 0);
  CHECK(stride_width_cap(1) == 0);
  CHECK(stride_width_cap(9) == 2);
  CHECK(stride_width_cap(12) == 1);
}

TEST_CASE("wafer-asm: cost formula rows") {
  const WaferConfig w2 = preset_config("wse2"), w3 = preset_config("wse3");
  for (const auto& r : cost_rows()) {
    CHECK(!r.what.empty());
    CHECK(!r.formula.empty());
    CHECK(!r.source.empty());
  }
  CHECK(w2.setup_cycles == 16);
  CHECK(dsd_op_cycles(4096, 8, w3) == 16 + 512);
  CHECK(dsd_op_cycles(7, 2, w2) == 16 + 4);
  CHECK(dsd_op_cycles(0, 4, w2) == 16);
  const Program p = assemble(R"(.data a f32 64
.data h f16 64
.data g f16 64
.dsd am mem1d a
.dsd a2 mem1d a len=32 stride=2
.dsd a8 mem1d a len=8 stride=8
.dsd hm mem1d h
.dsd gm mem1d g
.dsd in fabin f32 color=1 queue=1 len=64
.task t local id=0 active
  fadds am, am, am
  fadds a2, a2, a2
  fmovs a8, a8
  faddh hm, hm, gm
  fh2s am, hm
  fmacs am, am, in, 2.0
  fmovs am, in
  mov r0, 1
  ret
)", "c.pe");
  struct Row {
    int index;
    int64_t wse2, wse3;
  };
  const Row rows[] = {{0, 16 + 32, 16 + 16}, {1, 16 + 16, 16 + 8}, {2, 16 + 8, 16 + 8}, {3, 16 + 16, 16 + 8},
                      {4, 16 + 64, 16 + 16}, {5, 16 + 64, 16 + 64}, {6, 16 + 32, 16 + 16}, {7, 1, 1}, {8, 1, 1}};
  for (const auto& r : rows) {
    INFO(disassemble(p, p.instrs[static_cast<size_t>(r.index)]));
    CHECK(instr_cycles(p, p.instrs[static_cast<size_t>(r.index)], w2) == r.wse2);
    CHECK(instr_cycles(p, p.instrs[static_cast<size_t>(r.index)], w3) == r.wse3);
  }
}

TEST_CASE("wafer-asm: wavelets directions and routes") {
  const Wavelet w = Wavelet::make16(5, 0x1234, 0xabcd, true);
  CHECK(w.payload == 0x1234abcdu);
  CHECK(w.index() == 0x1234);
  CHECK(w.data() == 0xabcd);
  CHECK(w.control);
  CHECK(opposite(Dir::E) == Dir::W);
  CHECK(opposite(Dir::N) == Dir::S);
  CHECK(dir_dx(Dir::E) == 1);
  CHECK(dir_dy(Dir::N) == -1);
  CHECK(format_dirset(dir_bit(Dir::E) | dir_bit(Dir::RAMP)) == "{E,RAMP}");
  Route r;
  r.pos[0] = {dir_bit(Dir::W), dir_bit(Dir::RAMP)};
  r.pos[1] = {dir_bit(Dir::W), dir_bit(Dir::E)};
  r.npos = 2;
  CHECK(r.next(0) == 1);
  CHECK(r.next(1) == 1);
  r.ring = true;
  CHECK(r.next(1) == 0);
  CHECK(r.tx_any() == (dir_bit(Dir::RAMP) | dir_bit(Dir::E)));
}

TEST_CASE("wafer-asm: parameter expressions") {
  struct Row {
    const char* text;
    int64_t value;
  };
  const Row rows[] = {{"px*16", 48}, {"px + py * width", 3 + 2 * 8}, {"px == width - 1", 0}, {"py == 2", 1}, {"-px % 2", -1},
                      {"(px + 1) * (py + 1) / 4", 3}, {"px >= 3", 1}, {"px < 3", 0}, {"px != 3", 0}, {"height", 4}, {"7", 7}};
  for (const auto& r : rows) {
    INFO(r.text);
    ParamExpr e;
    REQUIRE(ParamExpr::compile(r.text, e) == "");
    int64_t v = 0;
    REQUIRE(e.eval(3, 2, 8, 4, v));
    CHECK(v == r.value);
  }
  ParamExpr e;
  CHECK_THAT(ParamExpr::compile("px * pz", e), Contains("unknown name 'pz'"));
  CHECK_THAT(ParamExpr::compile("(px", e), Contains("missing ')'"));
  CHECK_THAT(ParamExpr::compile("px 3", e), Contains("unexpected"));
  REQUIRE(ParamExpr::compile("4 / px", e) == "");
  int64_t v = 0;
  CHECK_FALSE(e.eval(0, 0, 1, 1, v));
}

TEST_CASE("wafer-asm: micro scenarios load and validate") {
  for (const char* preset : {"wse2", "wse3"}) {
    const WaferConfig c = preset_config(preset);
    const LoadedLayout p2p = load_layout(kMicro + "/p2p_row.json", c);
    CHECK(p2p.programs.size() == 2);
    CHECK(p2p.program_at(0, 0) == 0);
    CHECK(p2p.program_at(3, 0) == kNoProgram);
    CHECK(p2p.program_at(7, 0) == 1);
    REQUIRE(p2p.route_at(3, 0, 1));
    CHECK(p2p.route_at(3, 0, 1)->pos[0].tx == dir_bit(Dir::E));
    CHECK(p2p.route_at(3, 0, 2) == nullptr);

    const LoadedLayout rr = load_layout(kMicro + "/row_reduce.json", c);
    CHECK(rr.programs.size() == 4);  // val = px + 1 differs per PE
    const Program& last = rr.programs[rr.program_at(3, 0)];
    CHECK(last.params.at("last") == 1);
    CHECK(last.params.at("first") == 0);
    CHECK(last.data[0].fill == 4.0f);
    REQUIRE(last.dsds.size() == 3);  // `.if !$last` dropped to_east
    CHECK(rr.program_at(3, 0) != rr.program_at(2, 0));
    CHECK(last.dsd_names[2] == "from_west");
    CHECK(last.dsds[2].color == 1);  // in_color = 2 - 3 % 2
    const Program& first = rr.programs[rr.program_at(0, 0)];
    REQUIRE(first.dsds.size() == 3);
    CHECK(first.dsd_names[2] == "to_east");
    CHECK(first.instrs[0].op == Op::fmovs);
    CHECK(last.instrs[0].op == Op::fadds);
    CHECK(last.instrs.size() == 2);

    const LoadedLayout g = load_layout(kMicro + "/gemv_8x8.json", c);
    CHECK(g.programs.size() == 16);  // (px, top)
    CHECK(g.pe_program[0].size() == 64);
    const Program& top = g.programs[g.program_at(2, 0)];
    CHECK(top.params.at("top") == 1);
    CHECK(top.params.at("xv") == 3);
    CHECK(top.data[0].count == 16);
    CHECK(g.route_at(5, 7, 1)->pos[0].tx == dir_bit(Dir::RAMP));
    // Text round trip of every instance.
    for (const auto* l : {&p2p, &rr, &g})
      for (const auto& prog : l->programs) CHECK(same_program(prog, assemble(disassemble(prog), "rt.pe")));
  }
}

TEST_CASE("wafer-asm: layout errors carry JSON pointers") {
  const WaferConfig c = preset_config("wse2");
  auto d = layout_errors(R"({"rects": [{"x": 0, "y": 0, "width": 2, "height": 1, "progam": "send.pe",
      "routes": [{"color": 1, "rx": ["RAMP"], "tx": ["EAST"]}, {"color": 40, "rx": [], "tx": []}, {"colour": 1}]}]})", c);
  INFO(dump(d));
  CHECK(any_contains(d, "l.json /rects/0/progam", "unknown key 'progam'"));
  CHECK(any_contains(d, "l.json /rects/0/routes/0/tx/0", "expected one of N S E W RAMP"));
  CHECK(any_contains(d, "l.json /rects/0/routes/1/color", "expected an integer in 0..31"));
  CHECK(any_contains(d, "l.json /rects/0/routes/2/colour", "unknown key 'colour'"));
  CHECK(any_contains(d, "l.json /rects/0/routes/2", "missing key 'color'"));
  d = layout_errors(R"({"schema": "x", "fabric": {"width": 4000}, "rects": [
      {"x": 0, "y": 0, "width": 3, "height": 1}, {"x": 2, "y": 0, "width": 3, "height": 2, "program": "send.pe", "params": {"n": "px *"}}]})", c);
  INFO(dump(d));
  CHECK(any_contains(d, "l.json /schema", "unknown schema"));
  CHECK(any_contains(d, "l.json /fabric/width", "expected an integer in 1..750"));
  CHECK(any_contains(d, "l.json /rects/1", "overlaps rectangle 'rect0' at PE (2,0)"));
  CHECK(any_contains(d, "l.json /rects/1/params/n", "bad expression"));
  d = layout_errors("{\"rects\": [", c);
  REQUIRE(d.size() == 1);
  CHECK_THAT(d[0].message, Contains("not valid JSON"));
  // Programs: unreadable file, a parameter the program does not declare, an instance's errors with its PE.
  d = layout_errors(R"({"fabric": {"width": 4, "height": 1}, "rects": [
      {"x": 0, "y": 0, "width": 1, "height": 1, "program": "nope.pe"},
      {"x": 1, "y": 0, "width": 2, "height": 1, "program": "send.pe", "params": {"n": "100000 * px", "m": 1}}]})", c);
  INFO(dump(d));
  CHECK(any_contains(d, "l.json /rects/0/program", "cannot read program"));
  CHECK(any_contains(d, kMicro + "/send.pe PE (1,0)", "declares no `.param m`"));
  CHECK(any_contains(d, kMicro + "/send.pe:4 PE (1,0)", "bad count '0'"));
  CHECK(any_contains(d, kMicro + "/send.pe:5 PE (2,0)", "len=100000 (the default) is out of range 1..65535"));
}

TEST_CASE("wafer-asm: route consistency names PE and color") {
  const WaferConfig c = preset_config("wse2");
  auto d = layout_errors(R"({"fabric": {"width": 4, "height": 3}, "rects": [
      {"x": 0, "y": 0, "width": 4, "height": 1, "routes": [{"color": 3, "rx": ["W"], "tx": ["E"]}]},
      {"x": 0, "y": 1, "width": 2, "height": 1, "routes": [{"color": 5, "rx": ["RAMP"], "tx": ["S", "E"]},
                                                          {"color": 5, "x": 1, "rx": ["W"], "tx": []}]},
      {"x": 2, "y": 1, "width": 2, "height": 1, "routes": [{"color": 6, "rx": ["N"], "tx": ["RAMP", "W"]},
                                                          {"color": 30, "rx": [], "tx": []}]}]})", c);
  INFO(dump(d));
  CHECK(any_contains(d, "PE (3,0)", "color 3: tx E leaves the 4x3 fabric"));
  CHECK(any_contains(d, "PE (1,1)", "color 5 is routed twice"));
  CHECK(any_contains(d, "PE (0,1)", "color 5: tx S into PE (0,2), which has no route for color 5 (and 1 more PE(s)"));
  CHECK(any_contains(d, "PE (2,1)", "color 6: tx RAMP but the PE runs no program"));
  CHECK(any_contains(d, "PE (3,1)", "color 6: tx W into PE (2,1), whose rx {N} does not include E"));
  CHECK(any_contains(d, "PE (2,1)", "color 6: tx W into PE (1,1), which has no route for color 6"));
  CHECK(any_contains(d, "l.json /rects/2/routes/1", "color 30 is not routable"));
  // A switch position's tx counts too; the neighbour's rx in any position satisfies it.
  d = layout_errors(R"({"fabric": {"width": 2, "height": 1}, "rects": [
      {"x": 0, "y": 0, "width": 1, "height": 1, "routes": [{"color": 2, "rx": ["W"], "tx": [], "switch": [{"tx": ["E"]}]}]},
      {"x": 1, "y": 0, "width": 1, "height": 1, "routes": [{"color": 2, "rx": ["S"], "tx": [], "switch": [{"rx": ["W"]}], "ring": true}]}]})", c);
  INFO(dump(d));
  CHECK(d.empty());
  // The program's colors need RAMP in the route.
  d = layout_errors(R"({"fabric": {"width": 8, "height": 1}, "rects": [
      {"x": 0, "y": 0, "width": 1, "height": 1, "program": "send.pe", "routes": [{"color": 1, "rx": ["W"], "tx": ["E"]}]},
      {"x": 1, "y": 0, "width": 1, "height": 1, "program": "recv.pe", "routes": [{"color": 1, "rx": ["W"], "tx": []}]}]})", c);
  INFO(dump(d));
  REQUIRE(d.size() == 2);
  CHECK(any_contains(d, "PE (0,0)", "the program sends color 1 but the route there has no RAMP in rx"));
  CHECK(any_contains(d, "PE (1,0)", "the program receives color 1 but the route there has no RAMP in tx"));
}
