// libFuzzer target: the ONNX importer (mapper/frontend/onnx.hpp) on the input as a model file's
// bytes, then shape inference and constant folding (passes::prepare) as sim/model.cpp runs them.
#include <cstdint>
#include <string>

#include "isa/error.hpp"
#include "mapper/frontend/onnx.hpp"
#include "mapper/passes/passes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    tessera::graph::Graph g = tessera::frontend::load_onnx_bytes(bytes, "fuzz.onnx");
    tessera::passes::prepare(g);
  } catch (const tessera::InputError&) {
    // Bad input, reported as such: fine. Any other exception escapes and is a crash.
  }
  return 0;
}
