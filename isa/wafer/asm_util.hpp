#pragma once
// Helpers shared by the wafer assembler, the program builder and the program template (internal to
// isa/wafer): number parsing and printing as the assembly text writes them, name rules, operand
// type rules and suggestions.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "isa/wafer/isa.hpp"

namespace tessera::wafer::asmutil {

// Decimal or 0x hex, optionally negative; magnitudes up to 2^62 (room for products).
bool parse_int(std::string_view s, int64_t& out);
// A number as the assembler reads it ("inf", "-inf" too); false on NaN or junk.
bool parse_float(std::string_view s, float& out);
bool looks_float(std::string_view s);
// The shortest text that reads back as v (always with a '.' or an exponent: "0.5", "2.0", "inf").
std::string fmt_float(float v);
// A parameter value as `$name` substitutes it: integers without a fraction.
std::string fmt_value(double v);
// A scalar operand as the text writes it: r3, 16, 0.5, px, py, wv.
std::string fmt_scalar(const Operand& o);

// "did you mean 'x'?" or "WHAT: a b c".
std::string suggest(std::string_view word, const std::vector<std::string>& names, std::string_view what);
// px, py, wv, async and register names rN: not names of arrays, DSDs, tasks or labels.
bool reserved_word(std::string_view s);
// Whether a DSD of element type e may be an operand wanting w; w's name in messages.
bool fits(Want w, Elem e);
std::string_view want_name(Want w);
// "syntax: fmacs DST, SRC, SRC, SCALAR [async] [activate=TASK] [unblock=TASK]"
std::string instr_usage(const OpInfo& info);

template <typename E>
std::optional<E> lookup(std::string_view w, int n, std::string_view (*name)(E)) {
  for (int i = 0; i < n; ++i)
    if (name(static_cast<E>(i)) == w) return static_cast<E>(i);
  return std::nullopt;
}
template <typename E>
std::vector<std::string> names_of(int n, std::string_view (*name)(E)) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.emplace_back(name(static_cast<E>(i)));
  return v;
}

}  // namespace tessera::wafer::asmutil
