#include "tests/fuzz/sandbox.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace tessera::fuzz {

namespace fs = std::filesystem;

namespace {

// Small valid inputs from the source tree, copied under the names a scenario or layout may use.
struct SandboxFile {
  const char* source;  // relative to the source tree
  const char* name;    // in the sandbox
};
constexpr SandboxFile kFiles[] = {
    {"tests/data/numpy_f32_2x3.npy", "x.npy"},
    {"tests/data/numpy_i64_vec.npy", "y.npy"},
    {"scenarios/models/train_mlp.onnx", "model.onnx"},
    {"scenarios/neuroncore/micro/dma_32k_4part.s", "program.s"},
    {"scenarios/wafer/micro/gemv.pe", "gemv.pe"},
    {"scenarios/wafer/micro/send.pe", "send.pe"},
    {"scenarios/wafer/micro/recv.pe", "recv.pe"},
    {"scenarios/wafer/micro/row_reduce.pe", "row_reduce.pe"},
    {"scenarios/wafer/micro/row_reduce_pipe.pe", "row_reduce_pipe.pe"},
    {"scenarios/wafer/stream/stream_layer.pe", "stream_layer.pe"},
};

std::string g_dir;

void remove_sandbox() {
  std::error_code ec;
  if (!g_dir.empty()) fs::remove_all(g_dir, ec);
}

std::string make_sandbox() {
  std::string templ = (fs::temp_directory_path() / "tessera-fuzz-XXXXXX").string();
  if (!::mkdtemp(templ.data())) throw std::runtime_error("fuzz sandbox: mkdtemp failed");
  const fs::path dir(templ);
  for (const auto& f : kFiles) fs::copy_file(fs::path(TESSERA_SOURCE_DIR) / f.source, dir / f.name);
  // Non-regular files under ordinary-looking names.
  if (::mkfifo((dir / "fifo.pe").c_str(), 0600) != 0) throw std::runtime_error("fuzz sandbox: mkfifo failed");
  fs::create_symlink("/dev/zero", dir / "zero.npy");
  fs::create_directory(dir / "data");
  g_dir = dir.string();
  std::atexit(remove_sandbox);
  return g_dir;
}

}  // namespace

const std::string& sandbox_dir() {
  static const std::string dir = make_sandbox();
  return dir;
}

const std::vector<std::string>& sandbox_pe_programs() {
  static const std::vector<std::string> names = {"gemv.pe", "send.pe", "recv.pe", "row_reduce.pe",
                                                 "row_reduce_pipe.pe", "stream_layer.pe", "fifo.pe"};
  return names;
}

}  // namespace tessera::fuzz
