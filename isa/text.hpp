#pragma once
// Small text helpers shared by the assemblers (NeuronCore and wafer).
#include <cstdint>
#include <string_view>

namespace tessera::text {

std::string_view trim(std::string_view s);
// [A-Za-z_][A-Za-z0-9_]*
bool is_ident(std::string_view s);
// A decimal integer (or 0x hex with allow_hex, or negative with allow_neg) spanning all of s.
bool parse_int(std::string_view s, int64_t& out, bool allow_hex = false, bool allow_neg = false);
// A finite or infinite decimal number spanning all of s (no leading '+', no NaN).
bool parse_number(std::string_view s, double& out);

}  // namespace tessera::text
