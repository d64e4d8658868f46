#pragma once
// The NeuronCore text assembler and disassembler (syntax: docs/neuroncore-asm.md).
//
// assemble() reports every syntax error of a file at once (one InputError, one diagnostic per
// mistake, each naming "FILE:LINE"). disassemble() prints the canonical text form, and
// assemble(disassemble(p)) gives back p: the same instructions, bundles, labels and HBM
// declarations (source line numbers aside -- the canonical text has its own lines).
#include <string>
#include <string_view>

#include "isa/neuroncore/isa.hpp"

namespace tessera::neuroncore {

// Parses assembly text; `file_name` goes into Program::source and every diagnostic.
Program assemble(std::string_view text, const std::string& file_name);
// Reads and assembles a file (InputError if it cannot be read).
Program assemble_file(const std::string& path);

// Canonical text: .hbm declarations first, then one bundle per line with slots in lane order,
// labels on their own lines, immediates in their shortest exact form, dims with an explicit
// stride only where it differs from the dense one. Fields an op does not use are not printed (they
// come back as their defaults). A branch target that no label names gets a label `_bN`.
std::string disassemble(const Program& p);
// One slot, "vector: tensor_copy sb.fp32[0:128]@0{512}, ps.fp32[0:128]@0{512}" (traces, errors).
// Without a lane, the op's own lane (dma0 for dma).
std::string disassemble(const Instr& in);
std::string disassemble(const Instr& in, Lane lane);
// "sb.bf16[0:128]@256+r1*1024{4:256,128}".
std::string format_ap(const AccessPattern& ap);

// Equality of what a program does: instructions, bundles, labels and HBM declarations; source
// name and line numbers are ignored.
bool same_program(const Program& a, const Program& b);

}  // namespace tessera::neuroncore
