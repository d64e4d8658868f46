// Reliability pieces: all-or-nothing output directories, .npy headers read alone, saturating counts,
// the reference executor's memory estimate (docs/reliability.md).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "isa/checked.hpp"
#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "isa/npy.hpp"
#include "mapper/graph/summary.hpp"
#include "mapper/passes/passes.hpp"
#include "mapper/reference/executor.hpp"
#include "sim/outdir.hpp"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("tessera-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) { return read_file(p.string()); }

}  // namespace

TEST_CASE("outdir: a committed run replaces the directory as a whole") {
  const fs::path root = fresh_dir("commit");
  const std::string out = (root / "run").string();
  {
    sim::OutputDir o(out);
    write_file_atomic((fs::path(o.dir()) / "report.json").string(), "first\n");
    write_file_atomic((fs::path(o.dir()) / "compile_report.txt").string(), "first\n");
    CHECK(!fs::exists(out));  // nothing under the final name before commit
    o.commit();
  }
  CHECK(slurp(fs::path(out) / "report.json") == "first\n");
  CHECK(fs::exists(fs::path(out) / ".tessera-run"));
  {
    sim::OutputDir o(out);
    write_file_atomic((fs::path(o.dir()) / "report.json").string(), "second\n");
    CHECK(sim::shown_path((fs::path(o.dir()) / "report.json").string()) == out + "/report.json");
    o.commit();
  }
  CHECK(slurp(fs::path(out) / "report.json") == "second\n");
  CHECK(!fs::exists(fs::path(out) / "compile_report.txt"));  // nothing of the first run is left
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(root)) leftovers += e.path().filename().string().rfind(".run.tessera-", 0) == 0;
  CHECK(leftovers == 0);
  fs::remove_all(root);
}

TEST_CASE("outdir: a run that is not committed leaves the directory as it was") {
  const fs::path root = fresh_dir("rollback");
  const std::string out = (root / "a" / "b" / "run").string();
  {
    sim::OutputDir o(out);
    write_file_atomic((fs::path(o.dir()) / "report.json").string(), "half\n");
  }  // an exception or an interruption: no commit
  CHECK(!fs::exists(root / "a"));  // the parents it created are gone too
  fs::create_directories(out);
  write_file_atomic((fs::path(out) / "report.json").string(), "earlier\n");
  {
    sim::OutputDir o(out);
    write_file_atomic((fs::path(o.dir()) / "report.json").string(), "half\n");
  }
  CHECK(slurp(fs::path(out) / "report.json") == "earlier\n");
  fs::remove_all(root);
}

TEST_CASE("outdir: --out that is a file, under a file, or holds other files is refused") {
  const fs::path root = fresh_dir("refuse");
  write_file_atomic((root / "file").string(), "x");
  CHECK_THROWS_WITH(sim::OutputDir((root / "file").string()), Catch::Contains("is a file, not a directory"));
  CHECK_THROWS_WITH(sim::OutputDir((root / "file" / "x").string()), Catch::Contains("is a file, not a directory"));
  fs::create_directories(root / "mine");
  write_file_atomic((root / "mine" / "notes.txt").string(), "x");
  CHECK_THROWS_WITH(sim::OutputDir((root / "mine").string()), Catch::Contains("holds files tessera did not write (e.g. 'notes.txt')"));
  CHECK(slurp(root / "mine" / "notes.txt") == "x");
  fs::remove_all(root);
}

TEST_CASE("npy: the header is read alone, and checked against the file's length") {
  const fs::path root = fresh_dir("npy");
  const std::string p = (root / "a.npy").string();
  write_npy(p, Tensor(DType::i32, {3, 5}));
  const NpyInfo info = read_npy_info(p);
  CHECK(info.dtype == DType::i32);
  CHECK(info.shape == Shape{3, 5});
  const std::string bytes = slurp(p);
  write_file_atomic(p, bytes.substr(0, bytes.size() - 4));
  CHECK_THROWS_WITH(read_npy_info(p), Catch::Contains("data holds 56 bytes but shape [3, 5] of <i4 needs 60"));
  CHECK_THROWS_WITH(read_file(root.string()), Catch::Contains("is a directory, not a file"));
  fs::remove_all(root);
}

TEST_CASE("counts saturate instead of wrapping") {
  CHECK(shape_numel({4000000000, 4000000000, 4}) == kCountMax);
  CHECK(shape_numel({4000000000, 0, 4000000000}) == 0);
  CHECK(sat_mul(3037000500, 3037000500) == kCountMax);
  CHECK(sat_add(kCountMax, 1) == kCountMax);
  CHECK_THROWS_AS(Tensor(DType::f32, {4000000000, 4000000000, 4}), std::bad_alloc);
}

TEST_CASE("reference: the peak host memory follows the executor's frees") {
  // x [1000, 1000] -> Relu -> a -> Relu -> b -> MatMul(b, b) -> y: at the MatMul, x is freed
  // (its last use was the first Relu) and a is freed after the second Relu.
  graph::Graph g;
  g.opset = 17;
  auto value = [&](const std::string& n) {
    graph::Value v;
    v.name = n;
    v.dtype = DType::f32;
    v.shape = {1000, 1000};
    v.shape_known = true;
    g.values[n] = v;
  };
  for (const char* n : {"x", "a", "b", "y"}) value(n);
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.nodes.push_back({"r1", "Relu", {}, {"x"}, {"a"}});
  g.nodes.push_back({"r2", "Relu", {}, {"a"}, {"b"}});
  g.nodes.push_back({"mm", "MatMul", {}, {"b", "b"}, {"y"}});
  const double mb = 4e6;  // one [1000, 1000] fp32 value
  // Peak at the MatMul: b and y live (2 values) plus fp64 copies of b, b and y (3 x 2 values).
  CHECK(reference::peak_bytes(g) == Approx(8 * mb));
}
