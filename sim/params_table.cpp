#include "sim/params_table.hpp"

#include <algorithm>
#include <iomanip>

#include "isa/params.hpp"

namespace tessera::sim {

void print_targets(std::ostream& os) {
  os << "targets and presets (tessera params TARGET|PRESET for the parameters):\n";
  os << "  reference   the golden interpreter on the CPU (no hardware parameters)\n";
  for (const auto* t : all_targets()) {
    os << "  " << std::left << std::setw(12) << t->kind << t->description << "\n";
    for (const auto& p : t->presets) os << "    " << std::setw(10) << p.name << p.description << "\n";
  }
}

ParamSet params_of(const std::string& name) {
  const TargetDesc* t = find_target(name);
  const Preset* p = nullptr;
  if (t) {
    p = &t->presets.front();
  } else if ((t = target_of_preset(name))) {
    p = t->find_preset(name);
  } else {
    std::vector<std::string> names;
    for (const auto* tg : all_targets()) {
      names.push_back(tg->kind);
      for (const auto& pr : tg->presets) names.push_back(pr.name);
    }
    std::string hint = did_you_mean(name, names);
    if (name == "reference") throw InputError("params " + name, "the reference target has no hardware parameters");
    throw InputError("params " + name, "unknown target or preset '" + name + "'",
                     hint.empty() ? "targets: neuroncore, wafer; presets: trn1, trn2, wse2, wse3"
                                  : "did you mean '" + hint + "'?");
  }
  DiagnosticList diags;
  return ParamSet::resolve(*t, *p, {}, diags);
}

void print_params(std::ostream& os, const std::string& name) {
  const ParamSet set = params_of(name);
  const TargetDesc* t = &set.target();
  const Preset* p = &set.preset();
  os << t->kind << " preset " << p->name << ": " << p->description << "\n";
  if (find_target(name)) os << "(declared defaults are the " << p->name << " preset's values)\n";
  size_t wn = 4, wv = 5, wr = 5;
  for (const auto& r : set.all()) {
    wn = std::max(wn, r.decl->name.size());
    wv = std::max(wv, format_param_value(*r.decl, r.value).size());
    wr = std::max(wr, format_param_range(*r.decl).size());
  }
  os << "\n" << std::left << std::setw(static_cast<int>(wn + 2)) << "name" << std::setw(static_cast<int>(wv + 2))
     << "value" << std::setw(static_cast<int>(wr + 2)) << "range" << "description [source]\n";
  for (const auto& r : set.all()) {
    os << std::setw(static_cast<int>(wn + 2)) << r.decl->name << std::setw(static_cast<int>(wv + 2))
       << format_param_value(*r.decl, r.value) << std::setw(static_cast<int>(wr + 2)) << format_param_range(*r.decl)
       << r.decl->description << " [" << r.source << "]\n";
  }
}

}  // namespace tessera::sim
