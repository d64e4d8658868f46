#pragma once
// `tessera onnx-conformance DIR`: runs the reference executor over ONNX backend test directories
// (model.onnx + test_data_set_*/input_*.pb, output_*.pb), such as Debian's libonnx-testdata.
#include <string>

namespace tessera::sim {

struct ConformanceOptions {
  std::string dir;
  std::string exclusions_file;  // "test_name: reason" lines; listed failures are expected
  std::string pass_list_file;   // every test listed here must pass (the list may only grow)
  std::string write_pass_list;  // write the names of passing tests here
  std::string format = "table"; // table | summary
  double rtol = 1e-3, atol = 1e-7;  // onnx/backend/test/runner defaults
};

// Prints the table; returns 0 when every test whose ops are all supported passes or is excluded
// and every test on the pass list passes, 1 otherwise.
int run_conformance(const ConformanceOptions& opt);

}  // namespace tessera::sim
