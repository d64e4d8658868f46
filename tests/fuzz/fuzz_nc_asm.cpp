// libFuzzer target: the NeuronCore assembler (isa/neuroncore/asm.hpp) on the input as program
// text, then the validator (isa/neuroncore/validate.hpp) with trn1's default configuration. A
// program that assembles must disassemble to text that assembles back to the same program.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "isa/error.hpp"
#include "isa/neuroncore/asm.hpp"
#include "isa/neuroncore/validate.hpp"
#include "isa/params.hpp"

namespace {

const tessera::neuroncore::CoreConfig& trn1() {
  static const tessera::neuroncore::CoreConfig c = [] {
    tessera::DiagnosticList d;
    const tessera::TargetDesc* t = tessera::target_of_preset("trn1");
    return tessera::neuroncore::CoreConfig::from(tessera::ParamSet::resolve(*t, *t->find_preset("trn1"), {}, d));
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::neuroncore;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const Program p = assemble(text, "fuzz.s");
    const Program back = assemble(disassemble(p), "disassembled.s");
    if (!same_program(p, back)) std::abort();
    validate(p, trn1());
  } catch (const tessera::InputError&) {
    // Bad input, reported as such: fine. Any other exception escapes and is a crash.
  }
  return 0;
}
