// Bugs the fuzz targets found in the input loaders (docs/fuzzing.md), one case each: bad input must
// be an InputError naming where, never another exception, a crash or a huge allocation. The
// inputs the fuzzer found are in tests/fuzz/corpus/*/regression-* (replayed by fuzz.replay_*).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "isa/npy.hpp"
#include "isa/wafer/asm.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/frontend/json_graph.hpp"
#include "mapper/frontend/onnx.hpp"
#include "sim/model.hpp"
#include "sim/scenario.hpp"

using namespace tessera;
using Catch::Matchers::Contains;
using json = nlohmann::json;

namespace {

// The text of the InputError `f` throws ("" if it throws none; other exceptions propagate).
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string npy_with_header(const std::string& dict) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header;
}

}  // namespace

TEST_CASE("fuzz: an empty .npy shape whose other dimensions overflow int64 is an InputError", "[fuzz][npy]") {
  // Before: the zero made the size check pass and Tensor's int64 element count overflowed (UB).
  const std::string e = input_error([] {
    (void)npy_decode(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0), }"),
                     "e.npy");
  });
  CHECK_THAT(e, Contains("e.npy (header field 'shape')") && Contains("64-bit"));
  // An empty shape whose product fits still reads.
  const Tensor t = npy_decode(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 0), }"), "ok.npy");
  CHECK(t.numel() == 0);
}

TEST_CASE("fuzz: a number beyond double's range in a wafer layout is an InputError", "[fuzz][wafer]") {
  // Before: nlohmann's out_of_range escaped load_layout_text (exit 3, internal error).
  const std::string e = input_error([] {
    (void)wafer::load_layout_text(R"({"rects": 1e400})", "l.json", "", wafer::preset_config("wse2"));
  });
  CHECK_THAT(e, Contains("l.json") && Contains("not valid JSON") && Contains("1e400"));
}

TEST_CASE("fuzz: a scenario with a number beyond double's range is an InputError naming the file", "[fuzz][scenario]") {
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/corpus/scenario/regression-number-overflow.json";
  const std::string e = input_error([&] { (void)sim::load_scenario(path); });
  CHECK_THAT(e, Contains(path + ":1:51") && Contains("the number 1e400 is out of range"));
}

TEST_CASE("fuzz: a scenario whose target kind or preset is not a string reports the type", "[fuzz][scenario]") {
  // Before: validation reported the type, then resolving the target threw nlohmann's type_error.
  for (const char* doc : {R"({"schema": "tessera.scenario/1", "target": {"kind": "wafer", "preset": {"fabric.width": 8}}, "model": {"program": "p.s"}})",
                          R"({"schema": "tessera.scenario/1", "target": {"kind": ["wafer"]}, "model": {"program": "p.s"}})"}) {
    INFO(doc);
    const std::string e = input_error([&] { (void)sim::load_scenario_json(json::parse(doc), ""); });
    CHECK_THAT(e, Contains("/target/"));
  }
}

TEST_CASE("fuzz: a MatMul or Add with one input is an InputError naming the node", "[fuzz][graph]") {
  // Before: shape inference's fast rules read the missing second input (heap-buffer-overflow).
  for (const char* op : {"MatMul", "Add", "Gemm"}) {
    INFO(op);
    const json doc = {{"schema", "tessera.scenario/1"},
                      {"name", "t"},
                      {"target", {{"kind", "reference"}}},
                      {"model",
                       {{"graph",
                         {{"inputs", {{"x", {{"shape", {2, 2}}}}}},
                          {"outputs", {"y"}},
                          {"nodes", {{{"name", "n"}, {"op", op}, {"inputs", {"x"}}, {"outputs", {"y"}}}}}}}}}};
    const std::string e = input_error([&] { (void)sim::load_model(sim::load_scenario_json(doc, "")); });
    CHECK_THAT(e, Contains("node 'n'"));
  }
}

TEST_CASE("fuzz: a layout whose PE program is a FIFO, /dev/zero or a directory is an InputError", "[fuzz][wafer]") {
  // Before: read_file blocked opening a FIFO, read /dev/zero until memory ran out, and read a
  // directory as an empty program.
  const auto dir = std::filesystem::temp_directory_path() / ("tessera_test_fifo_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  REQUIRE(::mkfifo((dir / "fifo.pe").c_str(), 0600) == 0);
  for (const std::string program : {"fifo.pe", "/dev/zero", "."}) {
    INFO(program);
    const std::string e = input_error([&] {
      (void)wafer::load_layout_text(R"({"rects": [{"x": 0, "y": 0, "width": 1, "height": 1, "program": ")" + program + R"("}]})",
                                    "l.json", dir.string(), wafer::preset_config("wse2"));
    });
    CHECK_THAT(e, Contains("l.json /rects/0/program") && Contains("not a regular file"));
  }
  // The same for .npy and ONNX files and anything else read_file reads.
  CHECK_THAT(input_error([&] { (void)read_npy((dir / "fifo.pe").string()); }), Contains("FIFO"));
  CHECK_THAT(input_error([] { (void)read_file("/dev/zero"); }), Contains("/dev/zero") && Contains("not a regular file"));
  CHECK_THAT(input_error([] { (void)frontend::load_onnx("/dev/null"); }), Contains("not a regular file"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("fuzz: a Reshape to dimensions whose product overflows int64 is an InputError", "[fuzz][graph]") {
  // Before: Reshape multiplied the known dimensions in int64 unchecked (UBSan: signed overflow).
  const json doc = json::parse(R"({"schema": "tessera.scenario/1", "name": "t", "target": {"kind": "reference"},
    "model": {"graph": {"inputs": {"x": {"shape": [2, 3]}}, "outputs": ["y"],
      "initializers": {"s": {"dtype": "int64", "values": [15, 9223372036854775807, -1]}},
      "nodes": [{"name": "r", "op": "Reshape", "inputs": ["x", "s"], "outputs": ["y"]}]}}})");
  const std::string e = input_error([&] { (void)sim::load_model(sim::load_scenario_json(doc, "")); });
  CHECK_THAT(e, Contains("node 'r'") && Contains("64-bit"));
}

TEST_CASE("fuzz: an ONNX initializer whose dims claim more than its data is refused before allocating", "[fuzz][onnx]") {
  // Before: tensor_from_proto allocated the declared shape ([4, 1073741823] fp32: 16 GiB) and only
  // then compared it with the 144 bytes of raw data.
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/corpus/onnx/regression-initializer-huge-dims.onnx";
  const std::string e = input_error([&] { (void)frontend::load_onnx(path); });
  CHECK_THAT(e, Contains("initializer 'conv.weight'") && Contains("144 bytes of raw data") && Contains("[4, 1073741823]"));
}

TEST_CASE("fuzz: shape inference refuses an input too large to stand in for with zeros", "[fuzz][graph]") {
  // Before: an ONNX graph input declared [4611686018427387904, ...] reached run_node, whose zero
  // tensor threw std::length_error; a MaxPool input of 2^28 elements was allocated (and widened
  // to fp64: 1.6 GB in one malloc).
  const json doc = json::parse(R"({"schema": "tessera.scenario/1", "name": "t", "target": {"kind": "reference"},
    "model": {"graph": {"inputs": {"x": {"shape": [100000, 100000]}}, "outputs": ["y"],
      "nodes": [{"name": "t", "op": "Transpose", "inputs": ["x"], "outputs": ["y"]}]}}})");
  // tessera run: the scenario's host-memory budget (run.host_memory, 16 GiB) decides.
  const std::string e = input_error([&] { (void)sim::load_model(sim::load_scenario_json(doc, "")); });
  CHECK_THAT(e, Contains("node 't'") && Contains("[100000, 100000]") && Contains("run.host_memory"));
  // Without a budget (prepare alone, as the fuzz targets call it): 2^26 elements.
  graph::Graph g = frontend::load_json_graph(doc["model"]["graph"], "/model/graph", "");
  const std::string e2 = input_error([&] { passes::prepare(g); });
  CHECK_THAT(e2, Contains("node 't'") && Contains("[100000, 100000]") && Contains("2^26 elements"));
}

TEST_CASE("fuzz: a scenario whose schema or report scenario_file is not a string is an InputError", "[fuzz][scenario]") {
  // Before: load_scenario's report.json check called json::value("schema", "") on an object and
  // nlohmann's type_error escaped (exit 3).
  // The same for a name that is an object: s.name read it with json::value("name", "scenario").
  for (const char* name : {"regression-schema-object.json", "regression-report-scenario-file-object.json",
                           "regression-name-object.json"}) {
    INFO(name);
    const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/corpus/scenario/" + name;
    const std::string e = input_error([&] { (void)sim::load_scenario(path); });
    CHECK_THAT(e, Contains("/schema") || Contains("/model") || Contains("/name"));
  }
}
