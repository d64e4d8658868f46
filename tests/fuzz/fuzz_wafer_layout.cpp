// libFuzzer target: the wafer layout loader (isa/wafer/asm.hpp, load_layout_text) with the WSE-2
// preset on a 64 x 16 fabric (the shipped micro layouts but p2p_128 fit; a rectangle over the full
// 750 x 994 costs per PE what thousands of small inputs do, and finds nothing a small one does
// not). The input is the layout JSON, optionally followed by a NUL byte and PE program text: then
// every program the layout names in the sandbox gets that text instead of the file's (so the PE
// assembler and validator are fuzzed per PE with the layout's parameters). Without a NUL the
// programs are the sandbox's files (tests/fuzz/sandbox.hpp), including a FIFO.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "isa/error.hpp"
#include "isa/wafer/asm.hpp"
#include "tests/fuzz/sandbox.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::wafer;
  static const WaferConfig wse2 = [] {
    WaferConfig c = preset_config("wse2");
    c.fabric_width = 64;
    c.fabric_height = 16;
    return c;
  }();
  const std::string& dir = tessera::fuzz::sandbox_dir();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  std::map<std::string, std::string> sources;
  if (nul != std::string_view::npos)
    for (const auto& name : tessera::fuzz::sandbox_pe_programs()) sources[dir + "/" + name] = std::string(input.substr(nul + 1));
  try {
    load_layout_text(input.substr(0, nul), "fuzz.json", dir, wse2, nul == std::string_view::npos ? nullptr : &sources);
  } catch (const tessera::InputError&) {
    // Bad input, reported as such: fine. Any other exception escapes and is a crash.
  }
  return 0;
}
