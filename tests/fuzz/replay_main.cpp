// Replays inputs through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so the normal
// (g++) build checks the committed corpus: `fuzz_replay_X FILE|DIR...` runs every file (a
// directory's regular files in name order). An exception other than InputError escapes the target
// and ends the run here with the file named; a crash ends it as a crash. Exit 0: every input passed.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::directory_iterator(arg))
        if (e.is_regular_file()) in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s FILE|DIR... (no inputs found)\n", argc > 0 ? argv[0] : "replay");
    return 2;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "replay: %s: uncaught exception (not an InputError): %s\n", f.c_str(), e.what());
      return 1;
    } catch (...) {
      std::fprintf(stderr, "replay: %s: uncaught exception of unknown type\n", f.c_str());
      return 1;
    }
  }
  std::printf("replay: %zu inputs, none crashed\n", files.size());
  return 0;
}
