#pragma once
// Hardware parameters. Each one is declared once -- name, unit, default, valid range, description,
// source -- and everything else (presets, scenario overrides, `tessera params`, the models' and the
// estimator's configuration) is built from those declarations.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "isa/error.hpp"
#include "isa/units.hpp"

namespace tessera {

enum class ParamType { number, integer, boolean, int_list };

struct ParamValue {
  double number = 0;            // number, integer, boolean (0/1)
  std::vector<int64_t> list;    // int_list
  bool operator==(const ParamValue&) const = default;
};

struct ParamDecl {
  std::string name;         // dotted: "hbm.bandwidth"
  ParamType type;
  UnitKind unit;
  ParamValue default_value;
  double min, max;          // valid range (each element, for lists)
  std::string description;
  std::string source;       // where the default comes from (shared/reference/...), or "assumption: why"
};

struct PresetValue {
  std::string name;
  ParamValue value;
  std::string source;
};

struct Preset {
  std::string name;         // "trn1"
  std::string description;
  std::vector<PresetValue> values;  // overrides of the declarations' defaults
};

// A machine kind ("neuroncore", "wafer") with its declarations and presets.
struct TargetDesc {
  std::string kind;
  std::string description;
  std::vector<ParamDecl> decls;
  std::vector<Preset> presets;  // the first is the default
  const ParamDecl* find(std::string_view name) const;
  const Preset* find_preset(std::string_view name) const;
  std::vector<std::string> names() const;
};

// The registry of targets (explicit list in isa/targets.cpp).
const std::vector<const TargetDesc*>& all_targets();
const TargetDesc* find_target(std::string_view kind);
// The target that owns a preset name ("trn1" -> neuroncore), or nullptr.
const TargetDesc* target_of_preset(std::string_view preset);

enum class ParamOrigin { declared_default, preset, scenario };

struct ResolvedParam {
  const ParamDecl* decl;
  ParamValue value;
  std::string source;
  ParamOrigin origin;
};

// An override from a scenario or the command line, as text ("410GB/s", "6,6,4,4", "true", "128").
struct ParamOverride {
  std::string name;
  std::string text;
  std::string where;  // JSON pointer for errors
};

// Values of every declared parameter of one target under one preset, with overrides applied.
class ParamSet {
 public:
  ParamSet() = default;
  // Unknown names and out-of-range or ill-typed values are collected into `diags` (with
  // did-you-mean suggestions); the resulting set keeps the preset value for those.
  static ParamSet resolve(const TargetDesc& target, const Preset& preset,
                          const std::vector<ParamOverride>& overrides, DiagnosticList& diags);

  const TargetDesc& target() const { return *target_; }
  const Preset& preset() const { return *preset_; }
  double num(std::string_view name) const;
  int64_t integer(std::string_view name) const;
  bool flag(std::string_view name) const;
  const std::vector<int64_t>& list(std::string_view name) const;
  const std::vector<ResolvedParam>& all() const { return values_; }

 private:
  const ResolvedParam& get(std::string_view name) const;
  const TargetDesc* target_ = nullptr;
  const Preset* preset_ = nullptr;
  std::vector<ResolvedParam> values_;  // declaration order
};

// Parses and range-checks one value for a declaration; returns an error message or "".
std::string parse_param_value(const ParamDecl& d, std::string_view text, ParamValue& out);
// Human form of a value ("2.8 GHz", "6,6,4,4", "true").
std::string format_param_value(const ParamDecl& d, const ParamValue& v);
// Range as text ("1 Hz .. 10 GHz").
std::string format_param_range(const ParamDecl& d);

}  // namespace tessera

namespace tessera::decl {
// Builders that keep a declaration table readable: one row per parameter.
inline ParamDecl number(std::string name, UnitKind unit, double def, double min, double max,
                        std::string description, std::string source) {
  return {std::move(name), ParamType::number, unit, {def, {}}, min, max, std::move(description), std::move(source)};
}
inline ParamDecl integer(std::string name, UnitKind unit, int64_t def, int64_t min, int64_t max,
                         std::string description, std::string source) {
  return {std::move(name), ParamType::integer, unit, {static_cast<double>(def), {}}, static_cast<double>(min),
          static_cast<double>(max), std::move(description), std::move(source)};
}
inline ParamDecl flag(std::string name, bool def, std::string description, std::string source) {
  return {std::move(name), ParamType::boolean, UnitKind::count, {def ? 1.0 : 0.0, {}}, 0, 1, std::move(description),
          std::move(source)};
}
inline ParamDecl int_list(std::string name, UnitKind unit, std::vector<int64_t> def, int64_t min, int64_t max,
                          std::string description, std::string source) {
  return {std::move(name), ParamType::int_list, unit, {0, std::move(def)}, static_cast<double>(min),
          static_cast<double>(max), std::move(description), std::move(source)};
}
inline PresetValue set(std::string name, double v, std::string source) { return {std::move(name), {v, {}}, std::move(source)}; }
inline PresetValue set_list(std::string name, std::vector<int64_t> v, std::string source) {
  return {std::move(name), {0, std::move(v)}, std::move(source)};
}
}  // namespace tessera::decl
