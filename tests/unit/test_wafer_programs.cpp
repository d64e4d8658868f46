// PE programs built in code (isa/wafer/builder.hpp ProgramTemplate) and the wafer compiler's
// programs: instantiate() and the text form agree, so what --emit-program writes is what ran.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "isa/wafer/asm.hpp"
#include "isa/wafer/builder.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/wafer/compile.hpp"

using namespace tessera;
using namespace tessera::wafer;
using Catch::Matchers::Contains;
using Num = ProgramTemplate::Num;

namespace {

const std::string kRoot = TESSERA_SOURCE_DIR;

// Every program instance of `json` loaded both ways: templates instantiated, and their text()
// assembled. Same instances, same programs (line numbers included), same PE assignment.
void check_both_ways(const std::string& json, const std::map<std::string, ProgramTemplate>& programs, const WaferConfig& c) {
  std::map<std::string, std::string> texts;
  for (const auto& [file, t] : programs) texts[file] = t.text();
  const LoadedLayout a = load_layout_text(json, "layout.json", "", c, nullptr, &programs);
  const LoadedLayout b = load_layout_text(json, "layout.json", "", c, &texts, nullptr);
  REQUIRE(a.programs.size() == b.programs.size());
  CHECK(a.pe_program == b.pe_program);
  for (size_t i = 0; i < a.programs.size(); ++i) {
    INFO(a.programs[i].source << " instance " << i);
    CHECK(same_program(a.programs[i], b.programs[i]));
    REQUIRE(a.programs[i].instrs.size() == b.programs[i].instrs.size());
    for (size_t j = 0; j < a.programs[i].instrs.size(); ++j) CHECK(a.programs[i].instrs[j].line == b.programs[i].instrs[j].line);
    CHECK(a.programs[i].params == b.programs[i].params);
  }
}

}  // namespace

TEST_CASE("wafer-programs: a template instantiates per binding, and its text assembles to the same program", "[wafer-asm]") {
  ProgramTemplate t("t.pe");
  t.param("last");
  t.param("cin");
  t.comment("a chain step");
  t.data("y", Elem::f32, 8, {}, -1, -1, "the row");
  t.data("w", Elem::f16, 4 * 8, 0.5f);
  t.mem1d("ym", "y");
  t.mem4d("wm", "w", 8, {{3, 8}, {Num::of("cin"), 1}});
  t.if_("last", false);
  t.fabric("to", DsdKind::fabout, Elem::f32, Num::of("cin"), 2, 8);
  t.endif();
  t.task("go", TaskKind::local, 3, -1, -1, true);
  t.op(Op::mov, {reg(1), imm(0)});
  t.label("top");
  t.if_("last");
  t.op(Op::fmuls, {"ym", "ym", fimm(0.1)});
  t.else_();
  t.op_async(Op::fmovs, {"to", "ym"}, "go");
  t.endif();
  t.op(Op::add, {reg(1), reg(1), imm(1)});
  t.op(Op::bnz, {reg(1), "top"});
  t.op(Op::halt, {});
  for (double last : {0.0, 1.0}) {
    const Bindings b{{"last", last}, {"cin", 8}};
    const Program p = t.instantiate(b);
    const Program q = assemble(t.text(), "t.pe", b);
    CHECK(same_program(p, q));
    CHECK(p.dsds.size() == (last != 0 ? 2u : 3u));
    CHECK(p.dsds[1].dims[1].len == 8);  // $cin in a dim
    CHECK(op_name(p.instrs[1].op) == (last != 0 ? "fmuls" : "fmovs"));
    CHECK(p.instrs[1].line == q.instrs[1].line);
    CHECK(disassemble(p) == disassemble(q));
  }
  CHECK_THAT(t.text(), Contains(".if !$last\n.dsd to fabout f32 color=$cin queue=2 len=8\n.endif"));
  CHECK_THAT(t.text(), Contains(".data y f32 8   # the row"));
  // What the builder checks, it reports with where = FILE:LINE of the text.
  DiagnosticList d;
  (void)t.instantiate({{"last", 1}}, "PE (2,0)", d);
  REQUIRE(d.size() == 1);
  CHECK_THAT(d.items()[0].message, Contains("'$cin' has no value"));
  CHECK(d.items()[0].where == "t.pe:7 PE (2,0)");  // 2 .param lines, the comment, 3 lines, then the mem4d
  ProgramTemplate bad("b.pe");
  bad.data("y", Elem::f32, 4);
  bad.mem1d("ym", "y", 2, 4);
  bad.task("go", TaskKind::local, 1);
  bad.op(Op::fadds, {"ym", "ym", "nope"});
  DiagnosticList e;
  (void)bad.instantiate({}, "", e);
  REQUIRE(e.size() == 4);  // the DSD, then each operand naming a DSD that does not exist
  CHECK_THAT(e.items()[0].message, Contains("reaches outside array 'y'"));
  CHECK_THAT(e.items()[1].message, Contains("unknown DSD 'ym'"));
  CHECK_THAT(e.items()[3].message, Contains("unknown DSD 'nope'"));
}

// The compiler's programs for models across its kernel families and modes: each PE's instance the
// same whether instantiated or assembled from the text --emit-program writes.
TEST_CASE("wafer-programs: the compiler's programs and their emitted text are the same programs on every PE", "[wafer-asm]") {
  const WaferConfig c = preset_config("wse2");
  struct Case {
    const char* model;
    MapMode mode;
    Elem compute;
    bool training;
  };
  for (const Case& k : {Case{"mlp.onnx", MapMode::pipelined, Elem::f32, false}, Case{"mlp.onnx", MapMode::weight_streaming, Elem::bf16, false},
                        Case{"lenet.onnx", MapMode::pipelined, Elem::f16, false}, Case{"lenet.onnx", MapMode::weight_streaming, Elem::f32, false},
                        Case{"transformer_layer.onnx", MapMode::pipelined, Elem::f32, false},
                        Case{"train_mlp.onnx", MapMode::weight_streaming, Elem::f32, true},
                        Case{"train_classifier.onnx", MapMode::weight_streaming, Elem::f32, true},
                        Case{"train_mlp.onnx", MapMode::weight_streaming, Elem::cbf16, true}}) {
    INFO(k.model << " mode " << static_cast<int>(k.mode) << " " << elem_name(k.compute));
    graph::Graph g = frontend::load_onnx(kRoot + "/scenarios/models/" + k.model);
    passes::prepare(g);
    if (!k.training) passes::canonicalize(g, false);  // as tessera run compiles inference (recurrent layers kept whole) (training: the graph as exported)
    MappingOptions mo;
    mo.mode = k.mode;
    mo.compute = k.compute;
    if (k.mode == MapMode::weight_streaming) mo.rect_width = mo.rect_height = 8;
    if (std::string(k.model) == "train_classifier.onnx") mo.rect_width = 1;  // every class on one chain-end PE
    mo.training = k.training;
    mo.learning_rate = 0.1;
    mo.momentum = k.training && std::string(k.model) == "train_mlp.onnx" ? 0.9 : 0.0;
    if (std::string(k.model) == "train_classifier.onnx") mo.loss = "softmax_cross_entropy";
    const Compiled cp = compile(g, c, mo);
    REQUIRE_FALSE(cp.programs.empty());
    check_both_ways(cp.layout_json, cp.programs, c);
  }
}

namespace {
// The MLP of scenarios/models/train_mlp.onnx as wafer training compiles it (weight streaming on
// 4 x 4 PEs); `mo` gives the rest (precision, optimizer, loss scaling).
struct TrainMlp {
  graph::Graph g = frontend::load_onnx(kRoot + "/scenarios/models/train_mlp.onnx");
  MappingOptions mo;
  TrainMlp() {
    passes::prepare(g);
    mo.mode = MapMode::weight_streaming;
    mo.rect_width = mo.rect_height = 4;
    mo.training = true;
    mo.learning_rate = 0.05;
  }
};
}  // namespace

// Mixed-precision training (docs/wafer-compiler.md "Training"): the x values each PE keeps, the dy
// the chain ends send and the weights are in the compute type; every backward product is a 16-bit
// one summed in fp32 (fmachs), none an fp32 fmacs/fmuls; the gradients stay fp32.
TEST_CASE("wafer-programs: mixed-precision training keeps x, dy and W in 16 bits and sums in fp32", "[wafer-asm]") {
  const WaferConfig c = preset_config("wse2");
  for (const Elem e : {Elem::f16, Elem::bf16, Elem::cbf16}) {
    INFO(elem_name(e));
    TrainMlp m;
    m.mo.compute = e;
    const Compiled cp = compile(m.g, c, m.mo);
    REQUIRE(cp.programs.size() == 1);
    const std::string text = cp.programs.begin()->second.text();
    const std::string E(elem_name(e));
    CHECK_THAT(text, Contains(".data Xsv " + E));
    CHECK_THAT(text, Contains(".data gW0 f32"));
    for (const char* l : {"0", "1"}) {
      CHECK_THAT(text, Contains(std::string(".dsd dyout") + l + " fabout " + E));
      CHECK_THAT(text, Contains(std::string("fmachs gcol") + l + ", gcol" + l + ", xrow" + l + ", wv"));
      CHECK_THAT(text, Contains(std::string("fs2h dyhm") + l + ", dym" + l));
      CHECK_THAT(text, !Contains(std::string("fmacs gcol") + l) && !Contains(std::string("fmuls gcol") + l));
    }
    CHECK_THAT(text, Contains("fmachs dxrow1, dxrow1, wcolT1, wv"));
  }
}

// Dynamic loss scaling (docs/wafer-compiler.md "Training"): dy scaled by the placed loss scale, the
// bias update only in the verdict task (after db / S), db's finiteness folded into the gradient
// block, and a verdict port; the programs assemble from their text to the same instances.
TEST_CASE("wafer-programs: loss scaling scales dy, folds db's finiteness into the gradient and updates the biases on MemoryX's verdict", "[wafer-asm]") {
  const WaferConfig c = preset_config("wse2");
  TrainMlp m;
  m.mo.compute = Elem::f16;
  m.mo.momentum = 0.9;
  m.mo.loss_scaling = true;
  const Compiled cp = compile(m.g, c, m.mo);
  check_both_ways(cp.layout_json, cp.programs, c);
  const std::string text = cp.programs.begin()->second.text();
  CHECK_THAT(text, Contains("fmuls dym1, dym1, lscb"));
  CHECK_THAT(text, Contains("fmulh dbhm0, dbhm0, 0.0"));
  CHECK_THAT(text, Contains("faddh gWr00, gWr00, dbhm0"));
  CHECK_THAT(text, Contains("fmuls dbm1, dbm1, wv"));
  // the bias update (b -= lr v) appears once per kernel: in the verdict task, not in bstart
  for (const char* l : {"0", "1"}) {
    const std::string upd = std::string("fmacs biasm") + l + ", biasm" + l + ", vbm" + l;
    const size_t first = text.find(upd), vdt = text.find(".task vdt ");
    REQUIRE(first != std::string::npos);
    REQUIRE(vdt != std::string::npos);
    CHECK(first > vdt);
    CHECK(text.find(upd, first + 1) == std::string::npos);
  }
  CHECK_THAT(cp.layout_json, Contains("\"verdict\""));
}

// Adam with weight decay (docs/wafer-compiler.md "Training"): the chain ends' bias update (moments,
// the placed bias corrections, the wide-range rsqrt, Newton's reciprocal) after the dy multicast
// has started; the programs assemble from their text to the same instances.
TEST_CASE("wafer-programs: Adam updates the biases at the chain ends after the dy multicast has started", "[wafer-asm]") {
  const WaferConfig c = preset_config("wse2");
  TrainMlp m;
  m.mo.learning_rate = 0.01;
  m.mo.adam = true;
  m.mo.weight_decay = 0.01;
  const Compiled cp = compile(m.g, c, m.mo);
  check_both_ways(cp.layout_json, cp.programs, c);
  const std::string text = cp.programs.begin()->second.text();
  for (const char* l : {"0", "1"}) {
    const std::string L(l);
    const size_t send = text.find("fmovs dyout" + L + ", dym" + L), upd = text.find("fsubs biasm" + L + ", biasm" + L + ", ad" + L + "_1");
    REQUIRE(send != std::string::npos);
    REQUIRE(upd != std::string::npos);
    CHECK(upd > send);
    CHECK_THAT(text, Contains("fmuls ad" + L + "_1, amm" + L + ", abc1b" + L));
    CHECK_THAT(text, Contains("fmacs dbm" + L + ", dbm" + L + ", biasm" + L));  // weight decay
  }
  // With a learning-rate schedule the step's rate is the placed lrs<l> (Adam's product; SGD's Mul and Sub).
  m.mo.lr_scheduled = true;
  const std::string sched = compile(m.g, c, m.mo).programs.begin()->second.text();
  CHECK_THAT(sched, Contains("fmuls ad0_1, ad0_1, lrb0"));
  m.mo.adam = false;
  const std::string sgd = compile(m.g, c, m.mo).programs.begin()->second.text();
  CHECK_THAT(sgd, Contains("fmuls lrtm1, dbm1, lrb1") && Contains("fsubs biasm1, biasm1, lrtm1"));
}

// Rotary embeddings over a head split into parts of fb features: the reordering is a permutation of
// the head's features, and every part holds whole rotation pairs (j, j + dh / 2) at local positions
// (i, i + fb / 2), so a PE rotates its part as one unit (docs/wafer-compiler.md "Rotary embeddings").
TEST_CASE("wafer-programs: a split head's rotary order is a permutation that keeps each pair on one PE", "[wafer-asm]") {
  using tessera::wafer::DenseKernel;
  for (const int64_t dh : {4, 16, 64})
    for (int64_t fb = 2; fb <= dh; fb *= 2) {
      INFO("dh " << dh << ", fb " << fb);
      std::vector<int> seen(static_cast<size_t>(dh), 0);
      for (int64_t p = 0; p < dh; ++p) ++seen[static_cast<size_t>(DenseKernel::rotary_pair_feature(p, fb, dh))];
      CHECK(std::count(seen.begin(), seen.end(), 1) == dh);
      for (int64_t r = 0; r < dh / fb; ++r)
        for (int64_t i = 0; i < fb / 2; ++i) {
          const int64_t a = DenseKernel::rotary_pair_feature(r * fb + i, fb, dh), b = DenseKernel::rotary_pair_feature(r * fb + i + fb / 2, fb, dh);
          CHECK(a < dh / 2);
          CHECK(b == a + dh / 2);
        }
    }
  CHECK(DenseKernel::rotary_pair_feature(5, 16, 16) == 5);  // a whole head: the identity
}

// Cross-attention (docs/wafer-compiler.md "Cross-attention"): the zoo's decoder layer compiles the
// same whichever order its two graph inputs come in -- the chain starts from the target, the memory
// is read only by the cross-attention's K and V (followers of Q, its src), the scores are 16 queries
// over 24 keys; and its programs' text is the same programs.
TEST_CASE("wafer-programs: cross-attention maps whichever order the decoder's two inputs come in", "[wafer-asm]") {
  const WaferConfig c = preset_config("wse2");
  graph::Graph g = frontend::load_onnx(kRoot + "/scenarios/zoo/decoder_causal/model.onnx");
  passes::prepare(g);
  passes::canonicalize(g, false);
  MappingOptions mo;
  mo.mode = MapMode::weight_streaming;
  const Compiled a = compile(g, c, mo);
  REQUIRE(g.inputs.size() == 2);
  std::swap(g.inputs[0], g.inputs[1]);
  const Compiled b = compile(g, c, mo);
  for (const Compiled* cp : {&a, &b}) {
    CHECK(cp->input == "tgt");
    CHECK(cp->input2 == "memory");
    REQUIRE(cp->kernels.size() == 10);
    std::vector<size_t> reads2, cross;
    for (size_t l = 0; l < cp->kernels.size(); ++l) {
      if (cp->kernels[l].reads_input2) reads2.push_back(l);
      if (cp->kernels[l].attn && cp->kernels[l].attn_qrows) cross.push_back(l);
    }
    REQUIRE(reads2 == std::vector<size_t>{5, 6});  // K and V right after Q (kernel 4)
    REQUIRE(cross == std::vector<size_t>{6});
    const DenseKernel& v = cp->kernels[6];
    CHECK(v.attn_q == 4);
    CHECK(v.attn_k == 5);
    CHECK(v.attn_queries() == 16);
    CHECK(v.attn_keys() == 24);
    CHECK(v.rows_out() == 16);
    CHECK(cp->kernels[5].src == cp->kernels[4].src);
    CHECK(v.src == cp->kernels[4].src);
  }
  CHECK(a.layout_json == b.layout_json);
  check_both_ways(a.layout_json, a.programs, c);
}
