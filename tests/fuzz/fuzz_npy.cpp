// libFuzzer target: the .npy reader (isa/npy.hpp) on the input as a file's bytes. A file that
// decodes must encode and decode back to the same tensor.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "isa/error.hpp"
#include "isa/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const tessera::Tensor t = tessera::npy_decode(bytes, "fuzz.npy");
    if (!(tessera::npy_decode(tessera::npy_encode(t), "re-encoded.npy") == t)) std::abort();
  } catch (const tessera::InputError&) {
    // Bad input, reported as such: fine. Any other exception escapes and is a crash.
  }
  return 0;
}
