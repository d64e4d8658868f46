// Recurrent layers on the wafer (mapper/wafer/recurrent.cpp, docs/wafer-compiler.md "Recurrent
// layers"): the kernels a stack becomes, the rows' slots and weights, and the forms it refuses,
// each naming the node. The numerics are the goldens' (tests/cli: the zoo's GRU and LSTM, a 3-layer
// RNN, a 2-layer LSTM read at its last step, against PyTorch and the reference executor).
#include <catch2/catch.hpp>

#include <string>

#include "isa/error.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/canonicalize.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/wafer/internal.hpp"

using namespace tessera;
using namespace tessera::wafer;

namespace {

const std::string kRoot = TESSERA_SOURCE_DIR;

graph::Graph zoo(const std::string& name) {
  graph::Graph g = frontend::load_onnx(kRoot + "/scenarios/zoo/" + name + "/model.onnx");
  passes::prepare(g);
  passes::canonicalize(g, false);  // (as tessera run compiles for the wafer)
  return g;
}

graph::Node& node_of(graph::Graph& g, const std::string& op) {
  for (auto& n : g.nodes)
    if (n.op == op) return n;
  throw std::logic_error("no " + op);
}

// The error compile() throws, or "" when it compiles.
std::string refusal(const graph::Graph& g, MappingOptions mo = {}) {
  if (mo.mode == MapMode::pipelined && !mo.training) mo.mode = MapMode::weight_streaming;
  try {
    compile(g, preset_config("wse2"), mo);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("wafer-recurrent: the zoo's 2-layer GRU is one kernel per layer and step, each row carrying both layers' h", "[wafer-compiler]") {
  const graph::Graph g = zoo("gru_classifier");
  MappingOptions mo;
  mo.mode = MapMode::weight_streaming;
  const Compiled c = compile(g, preset_config("wse2"), mo);
  REQUIRE(c.kernels.size() == 2 * 24 + 1);
  for (size_t l = 0; l + 1 < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    REQUIRE(k.rnn);
    CHECK(k.rnn->layer == static_cast<int64_t>(l % 2));
    CHECK(k.rnn->t == static_cast<int64_t>(l / 2));
    CHECK(k.rnn->x_time == (l % 2 == 1 && l + 2 < c.kernels.size() ? static_cast<int64_t>(l / 2 + 1) : -1));  // the next step's x: in the top layer's rows
    CHECK(k.src == static_cast<int64_t>(l) - 1);
    const detail::RnnLayout o = detail::rnn_layout(k);
    CHECK(o.S == 2);
    CHECK(k.nb == o.S * o.hb + o.xs + 4 * o.hb);
    if (l > 0) CHECK(k.kb == detail::rnn_layout(c.kernels[l - 1]).kw);  // it reads the state and x columns of the rows before
    // Every state passes through: state s, unit u -- the row of the kernel before, the column of this one.
    if (l > 0) {
      const detail::RnnLayout p = detail::rnn_layout(c.kernels[l - 1]);
      for (int64_t s = 0; s < o.S; ++s)
        for (int64_t u = 0; u < 32; u += 7) {
          const int64_t row = (u / p.hb) * p.kw + s * p.hb + u % p.hb, col = (u / o.hb) * o.nb + s * o.hb + u % o.hb;
          CHECK(k.W[static_cast<size_t>(row * k.N + col)] == 1.0f);
        }
    }
  }
  const DenseKernel& fc = c.kernels.back();
  CHECK_FALSE(fc.rnn);
  CHECK(fc.rnn_slot == 1);  // h_n[-1]: the top layer's h
  CHECK(fc.src == static_cast<int64_t>(c.kernels.size()) - 2);
  CHECK(fc.kb == detail::rnn_layout(c.kernels[fc.src]).hb);
  CHECK(detail::col_window(c, c.kernels.size() - 1) == detail::rnn_layout(c.kernels[fc.src]).hb);
}

TEST_CASE("wafer-recurrent: forms the wafer does not map are refused naming the node", "[wafer-compiler]") {
  {
    graph::Graph g = zoo("lstm_classifier");  // weights for one direction, the attribute for two
    node_of(g, "LSTM").attrs.set("direction", std::string("bidirectional"));
    const std::string e = refusal(g);
    CHECK(e.find("/rnn/LSTM") != std::string::npos);
    CHECK(e.find("its weights are for 1 direction(s)") != std::string::npos);
  }
  {
    graph::Graph g = zoo("gru_classifier");  // a reverse layer above another
    for (auto& n : g.nodes)
      if (n.op == "GRU" && n.name == "/rnn/GRU_1") n.attrs.set("direction", std::string("reverse"));
    const std::string e = refusal(g);
    CHECK(e.find("/rnn/GRU_1") != std::string::npos);
    CHECK(e.find("a reverse layer above another") != std::string::npos);
  }
  {
    graph::Graph g = zoo("gru_classifier");
    node_of(g, "GRU").attrs.set("linear_before_reset", int64_t{0});
    const std::string e = refusal(g);
    CHECK(e.find("/rnn/GRU") != std::string::npos);
    CHECK(e.find("linear_before_reset=0") != std::string::npos);
  }
  {
    graph::Graph g = zoo("lstm_classifier");
    graph::Node& n = node_of(g, "LSTM");
    REQUIRE(n.inputs.size() > 5);
    graph::Value& h0 = const_cast<graph::Value&>(g.value(n.inputs[5]));
    REQUIRE(h0.data);
    h0.data = Tensor::from_f32(h0.shape, std::vector<float>(static_cast<size_t>(shape_numel(h0.shape)), 0.5f));
    CHECK(refusal(g).find("initial states other than zeros") != std::string::npos);
  }
  {
    graph::Graph g = zoo("lstm_classifier");  // the output at every step as the graph's output
    const graph::Node& n = node_of(g, "LSTM");
    g.outputs = {n.outputs[0]};
    const std::string e = refusal(g);
    CHECK(e.find("/rnn/LSTM") != std::string::npos);
    CHECK(e.find("its output at every step is the graph's output") != std::string::npos);
  }
  {
    graph::Graph g = zoo("lstm_classifier");
    MappingOptions mo;
    mo.mode = MapMode::weight_streaming;
    mo.training = true;
    CHECK(refusal(g, mo).find("recurrent layers are not trained on the wafer") != std::string::npos);
  }
}
