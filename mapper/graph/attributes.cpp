#include "mapper/graph/attributes.hpp"

#include "isa/error.hpp"

namespace tessera::graph {

namespace {
[[noreturn]] void wrong(const std::string& name, const char* want) {
  throw InputError("attribute '" + name + "'", std::string("expected ") + want);
}
}  // namespace

int64_t Attributes::get_int(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  wrong(name, "an integer");
}

double Attributes::get_float(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  wrong(name, "a float");
}

std::string Attributes::get_string(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  wrong(name, "a string");
}

std::vector<int64_t> Attributes::get_ints(const std::string& name, const std::vector<int64_t>& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return {*v};
  wrong(name, "a list of integers");
}

std::vector<double> Attributes::get_floats(const std::string& name, const std::vector<double>& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  if (auto* v = std::get_if<double>(&it->second)) return {*v};
  wrong(name, "a list of floats");
}

std::vector<std::string> Attributes::get_strings(const std::string& name,
                                                const std::vector<std::string>& def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  if (auto* v = std::get_if<std::vector<std::string>>(&it->second)) return *v;
  if (auto* v = std::get_if<std::string>(&it->second)) return {*v};
  wrong(name, "a list of strings");
}

const Tensor& Attributes::get_tensor(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw InputError("attribute '" + name + "'", "required tensor attribute is missing");
  if (auto* v = std::get_if<Tensor>(&it->second)) return *v;
  wrong(name, "a tensor");
}

}  // namespace tessera::graph
