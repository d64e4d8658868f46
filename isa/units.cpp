#include "isa/units.hpp"

#include <array>
#include <cctype>
#include <cmath>
#include <utility>
#include <cstdio>
#include <cstdlib>

namespace tessera {

namespace {

struct UnitRow {
  std::string_view symbol;
  UnitKind kind;
  double scale;  // to the base unit
};

// Bytes use B, bits b (1 b = 1/8 B). K/M/G/T/P are decimal, Ki/Mi/Gi/Ti binary.
constexpr UnitRow kUnits[] = {
    {"Hz", UnitKind::frequency, 1},       {"kHz", UnitKind::frequency, 1e3},
    {"KHz", UnitKind::frequency, 1e3},    {"MHz", UnitKind::frequency, 1e6},
    {"GHz", UnitKind::frequency, 1e9},    {"THz", UnitKind::frequency, 1e12},
    {"s", UnitKind::time, 1},             {"ms", UnitKind::time, 1e-3},
    {"us", UnitKind::time, 1e-6},         {"\xC2\xB5s", UnitKind::time, 1e-6},
    {"ns", UnitKind::time, 1e-9},         {"ps", UnitKind::time, 1e-12},
    {"B", UnitKind::bytes, 1},            {"kB", UnitKind::bytes, 1e3},
    {"KB", UnitKind::bytes, 1e3},         {"MB", UnitKind::bytes, 1e6},
    {"GB", UnitKind::bytes, 1e9},         {"TB", UnitKind::bytes, 1e12},
    {"KiB", UnitKind::bytes, 1024.0},     {"MiB", UnitKind::bytes, 1048576.0},
    {"GiB", UnitKind::bytes, 1073741824.0}, {"TiB", UnitKind::bytes, 1099511627776.0},
    {"B/s", UnitKind::bandwidth, 1},      {"kB/s", UnitKind::bandwidth, 1e3},
    {"KB/s", UnitKind::bandwidth, 1e3},   {"MB/s", UnitKind::bandwidth, 1e6},
    {"GB/s", UnitKind::bandwidth, 1e9},   {"TB/s", UnitKind::bandwidth, 1e12},
    {"PB/s", UnitKind::bandwidth, 1e15},  {"KiB/s", UnitKind::bandwidth, 1024.0},
    {"MiB/s", UnitKind::bandwidth, 1048576.0}, {"GiB/s", UnitKind::bandwidth, 1073741824.0},
    {"b/s", UnitKind::bandwidth, 0.125},  {"kb/s", UnitKind::bandwidth, 1e3 / 8},
    {"Mb/s", UnitKind::bandwidth, 1e6 / 8}, {"Gb/s", UnitKind::bandwidth, 1e9 / 8},
    {"Tb/s", UnitKind::bandwidth, 1e12 / 8}, {"Pb/s", UnitKind::bandwidth, 1e15 / 8},
    {"B/ns", UnitKind::bandwidth, 1e9},   {"cycles", UnitKind::cycles, 1},
    {"cycle", UnitKind::cycles, 1},       {"%", UnitKind::ratio, 0.01},
    {"x", UnitKind::ratio, 1},
};

}  // namespace

std::string_view unit_kind_name(UnitKind k) {
  switch (k) {
    case UnitKind::count: return "count";
    case UnitKind::frequency: return "frequency";
    case UnitKind::time: return "time";
    case UnitKind::bytes: return "size";
    case UnitKind::bandwidth: return "bandwidth";
    case UnitKind::cycles: return "cycle count";
    case UnitKind::ratio: return "ratio";
  }
  return "?";
}

std::string_view unit_symbol(UnitKind k) {
  switch (k) {
    case UnitKind::frequency: return "Hz";
    case UnitKind::time: return "s";
    case UnitKind::bytes: return "B";
    case UnitKind::bandwidth: return "B/s";
    case UnitKind::cycles: return "cycles";
    default: return "";
  }
}

QuantityParse parse_quantity(std::string_view text, UnitKind kind) {
  QuantityParse r;
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  s = s.substr(b);
  const char* begin = s.c_str();
  char* end = nullptr;
  const double num = std::strtod(begin, &end);
  if (end == begin) {
    r.error = "'" + std::string(text) + "' is not a number with a unit";
    return r;
  }
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  if (!std::isfinite(num)) {
    r.error = "'" + std::string(text) + "' is not finite";
    return r;
  }
  if (unit.empty()) {
    r.value = num;
    return r;
  }
  for (const auto& u : kUnits) {
    if (u.symbol != unit) continue;
    if (u.kind != kind) {
      r.error = "'" + std::string(text) + "' is a " + std::string(unit_kind_name(u.kind)) + ", expected a " +
                std::string(unit_kind_name(kind));
      if (!unit_symbol(kind).empty()) r.error += " (e.g. in " + std::string(unit_symbol(kind)) + ")";
      return r;
    }
    r.value = num * u.scale;
    return r;
  }
  r.error = "unknown unit '" + unit + "' in '" + std::string(text) + "'";
  return r;
}

std::string format_quantity(double v, UnitKind kind) {
  char buf[64];
  auto fmt = [&](double x, const char* sym) {
    std::snprintf(buf, sizeof buf, "%.4g %s", x, sym);
    return std::string(buf);
  };
  const double a = std::fabs(v);
  switch (kind) {
    case UnitKind::frequency:
      if (a >= 1e9) return fmt(v / 1e9, "GHz");
      if (a >= 1e6) return fmt(v / 1e6, "MHz");
      return fmt(v, "Hz");
    case UnitKind::time:
      if (a >= 1 || a == 0) return fmt(v, "s");
      if (a >= 1e-3) return fmt(v * 1e3, "ms");
      if (a >= 1e-6) return fmt(v * 1e6, "us");
      return fmt(v * 1e9, "ns");
    case UnitKind::bytes: {
      // A binary unit when the value is a whole, short number of it (16 GiB, 48 KiB); else decimal.
      static const std::pair<double, const char*> binary[] = {
          {1099511627776.0, "TiB"}, {1073741824.0, "GiB"}, {1048576.0, "MiB"}, {1024.0, "KiB"}};
      for (const auto& [u, sym] : binary)
        if (a >= u && std::fmod(a, u) == 0 && a / u < 1e4) return fmt(v / u, sym);
      if (a >= 1e12) return fmt(v / 1e12, "TB");
      if (a >= 1e9) return fmt(v / 1e9, "GB");
      if (a >= 1e6) return fmt(v / 1e6, "MB");
      return fmt(v, "B");
    }
    case UnitKind::bandwidth:
      if (a >= 1e12) return fmt(v / 1e12, "TB/s");
      if (a >= 1e9) return fmt(v / 1e9, "GB/s");
      if (a >= 1e6) return fmt(v / 1e6, "MB/s");
      return fmt(v, "B/s");
    case UnitKind::cycles: return fmt(v, "cycles");
    default:
      std::snprintf(buf, sizeof buf, "%.6g", v);
      return buf;
  }
}

}  // namespace tessera
