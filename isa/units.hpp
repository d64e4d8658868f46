#pragma once
// Quantities with units: "850MHz", "1.4GHz", "820GB/s", "1.2Tb/s", "48KiB", "1.3us".
// Values are normalised to SI base units: Hz, seconds, bytes, bytes per second.
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

enum class UnitKind { count, frequency, time, bytes, bandwidth, cycles, ratio };

std::string_view unit_kind_name(UnitKind k);  // "frequency", ...
std::string_view unit_symbol(UnitKind k);     // "Hz", "s", "B", "B/s", "", "cycles", ""

struct QuantityParse {
  std::optional<double> value;  // set on success
  std::string error;            // why it failed, e.g. "'48KiB' is a size, expected a frequency"
};

// Parses a number followed by an optional unit. A plain number is taken in the base unit. A unit of
// another kind is an error that names both kinds.
QuantityParse parse_quantity(std::string_view text, UnitKind kind);

// Human form with a fitting prefix: 2.8e9 Hz -> "2.8 GHz", 196608 B -> "192 KiB".
std::string format_quantity(double value, UnitKind kind);

}  // namespace tessera
