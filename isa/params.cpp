#include "isa/params.hpp"

#include <cmath>
#include <stdexcept>

namespace tessera {

const ParamDecl* TargetDesc::find(std::string_view name) const {
  for (const auto& d : decls)
    if (d.name == name) return &d;
  return nullptr;
}

const Preset* TargetDesc::find_preset(std::string_view name) const {
  for (const auto& p : presets)
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> TargetDesc::names() const {
  std::vector<std::string> r;
  for (const auto& d : decls) r.push_back(d.name);
  return r;
}

const TargetDesc* find_target(std::string_view kind) {
  for (const auto* t : all_targets())
    if (t->kind == kind) return t;
  return nullptr;
}

const TargetDesc* target_of_preset(std::string_view preset) {
  for (const auto* t : all_targets())
    if (t->find_preset(preset)) return t;
  return nullptr;
}

static std::string range_error(const ParamDecl& d, double v) {
  return "value " + format_quantity(v, d.unit) + " is outside the valid range " + format_param_range(d);
}

std::string parse_param_value(const ParamDecl& d, std::string_view text, ParamValue& out) {
  switch (d.type) {
    case ParamType::boolean:
      if (text == "true" || text == "1") out.number = 1;
      else if (text == "false" || text == "0") out.number = 0;
      else return "expected true or false, got '" + std::string(text) + "'";
      return {};
    case ParamType::int_list: {
      out.list.clear();
      std::string t(text);
      if (!t.empty() && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
      size_t pos = 0;
      while (pos <= t.size()) {
        size_t comma = t.find(',', pos);
        std::string item = t.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        auto q = parse_quantity(item, d.unit);
        if (!q.value) return "list element: " + q.error;
        if (*q.value != std::floor(*q.value)) return "list element '" + item + "' is not an integer";
        if (*q.value < d.min || *q.value > d.max) return "list element " + range_error(d, *q.value);
        out.list.push_back(static_cast<int64_t>(*q.value));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      return {};
    }
    case ParamType::number:
    case ParamType::integer: {
      auto q = parse_quantity(text, d.unit);
      if (!q.value) return q.error;
      if (d.type == ParamType::integer && *q.value != std::floor(*q.value))
        return "expected an integer, got '" + std::string(text) + "'";
      if (*q.value < d.min || *q.value > d.max) return range_error(d, *q.value);
      out.number = *q.value;
      return {};
    }
  }
  return "unknown parameter type";
}

std::string format_param_value(const ParamDecl& d, const ParamValue& v) {
  switch (d.type) {
    case ParamType::boolean: return v.number != 0 ? "true" : "false";
    case ParamType::int_list: {
      std::string s;
      for (size_t i = 0; i < v.list.size(); ++i) s += (i ? "," : "") + std::to_string(v.list[i]);
      return s;
    }
    case ParamType::integer:
      if (d.unit == UnitKind::count) return std::to_string(static_cast<int64_t>(v.number));
      return format_quantity(v.number, d.unit);
    case ParamType::number: return format_quantity(v.number, d.unit);
  }
  return "?";
}

std::string format_param_range(const ParamDecl& d) {
  if (d.type == ParamType::boolean) return "true|false";
  auto f = [&](double x) {
    return d.unit == UnitKind::count || d.unit == UnitKind::ratio ? format_quantity(x, UnitKind::count)
                                                                  : format_quantity(x, d.unit);
  };
  return f(d.min) + " .. " + f(d.max);
}

ParamSet ParamSet::resolve(const TargetDesc& target, const Preset& preset,
                           const std::vector<ParamOverride>& overrides, DiagnosticList& diags) {
  ParamSet s;
  s.target_ = &target;
  s.preset_ = &preset;
  for (const auto& d : target.decls) s.values_.push_back({&d, d.default_value, d.source, ParamOrigin::declared_default});
  for (const auto& pv : preset.values) {
    const ParamDecl* d = target.find(pv.name);
    if (!d) throw std::logic_error("preset " + preset.name + " sets undeclared parameter " + pv.name);
    auto& r = s.values_[static_cast<size_t>(d - target.decls.data())];
    r.value = pv.value;
    r.source = pv.source;
    r.origin = ParamOrigin::preset;
  }
  for (const auto& o : overrides) {
    const ParamDecl* d = target.find(o.name);
    if (!d) {
      std::string hint = did_you_mean(o.name, target.names());
      diags.add(o.where, "unknown " + target.kind + " parameter '" + o.name + "'",
                hint.empty() ? "run 'tessera params " + target.kind + "' for the list"
                             : "did you mean '" + hint + "'?");
      continue;
    }
    ParamValue v;
    std::string err = parse_param_value(*d, o.text, v);
    if (!err.empty()) {
      diags.add(o.where, err, std::string("'") + d->name + "' is a " + std::string(unit_kind_name(d->unit)) +
                                  " in " + format_param_range(*d));
      continue;
    }
    auto& r = s.values_[static_cast<size_t>(d - target.decls.data())];
    r.value = v;
    r.source = "scenario override";
    r.origin = ParamOrigin::scenario;
  }
  return s;
}

const ResolvedParam& ParamSet::get(std::string_view name) const {
  for (const auto& r : values_)
    if (r.decl->name == name) return r;
  throw std::logic_error("ParamSet: no parameter '" + std::string(name) + "' in target " +
                         (target_ ? target_->kind : std::string("(none)")));
}

double ParamSet::num(std::string_view name) const { return get(name).value.number; }
int64_t ParamSet::integer(std::string_view name) const { return static_cast<int64_t>(get(name).value.number); }
bool ParamSet::flag(std::string_view name) const { return get(name).value.number != 0; }
const std::vector<int64_t>& ParamSet::list(std::string_view name) const { return get(name).value.list; }

}  // namespace tessera
