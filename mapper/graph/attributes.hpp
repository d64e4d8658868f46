#pragma once
// Typed node attributes (the ONNX attribute kinds tessera uses).
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "isa/tensor.hpp"

namespace tessera::graph {

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                               std::vector<std::string>, Tensor>;

class Attributes {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  const std::map<std::string, AttrValue>& all() const { return values_; }

  // Typed getters with a default; a present attribute of the wrong kind throws InputError naming
  // the attribute. get_float accepts an int attribute; get_ints accepts a single int.
  int64_t get_int(const std::string& name, int64_t def) const;
  double get_float(const std::string& name, double def) const;
  std::string get_string(const std::string& name, const std::string& def) const;
  std::vector<int64_t> get_ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<double> get_floats(const std::string& name, const std::vector<double>& def = {}) const;
  std::vector<std::string> get_strings(const std::string& name, const std::vector<std::string>& def = {}) const;
  const Tensor& get_tensor(const std::string& name) const;  // throws if absent

 private:
  std::map<std::string, AttrValue> values_;
};

}  // namespace tessera::graph
