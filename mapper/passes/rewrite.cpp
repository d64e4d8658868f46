#include "mapper/passes/rewrite.hpp"

#include <algorithm>
#include <climits>

namespace tessera::passes {

using graph::Graph;
using graph::Node;

Rewriter::Rewriter(Graph& g) : g_(g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    node_names_.insert(g.nodes[i].name);
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer_[o] = i;
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && (consumers_[in].empty() || consumers_[in].back() != i)) consumers_[in].push_back(i);
  }
  for (const auto& [name, v] : g.values) names_.insert(name);
}

const Node* Rewriter::producer(const std::string& v) const {
  const size_t i = producer_index(v);
  return i == SIZE_MAX ? nullptr : &g_.nodes[i];
}

size_t Rewriter::producer_index(const std::string& v) const {
  auto it = producer_.find(v);
  return it == producer_.end() || removed_.count(it->second) ? SIZE_MAX : it->second;
}

const std::vector<size_t>& Rewriter::consumers(const std::string& v) const {
  static const std::vector<size_t> none;
  auto it = consumers_.find(v);
  return it == consumers_.end() ? none : it->second;
}

bool Rewriter::is_output(const std::string& v) const {
  return std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end();
}

bool Rewriter::is_input(const std::string& v) const {
  return std::find(g_.inputs.begin(), g_.inputs.end(), v) != g_.inputs.end();
}

const Node* Rewriter::only_consumer(const std::string& v, size_t* index) const {
  const auto& c = consumers(v);
  if (c.size() != 1 || is_output(v) || removed_.count(c[0])) return nullptr;
  // The same node reading v twice still counts as one consumer.
  if (index) *index = c[0];
  return &g_.nodes[c[0]];
}

const Tensor* Rewriter::constant(const std::string& v) const {
  if (v.empty() || !g_.has_value(v)) return nullptr;
  const auto& val = g_.value(v);
  return val.data ? &*val.data : nullptr;
}

std::optional<double> Rewriter::scalar(const std::string& v) const {
  const Tensor* t = constant(v);
  if (!t || t->numel() != 1 || !is_float(t->dtype())) return std::nullopt;
  return t->to_f64()[0];
}

std::string Rewriter::fresh(const std::string& base) {
  std::string name = base;
  for (int k = 1; names_.count(name); ++k) name = base + "_" + std::to_string(k);
  names_.insert(name);
  return name;
}

std::string Rewriter::add_constant(const std::string& base, Tensor t) {
  const std::string name = fresh(base);
  graph::Value v;
  v.name = name;
  v.dtype = t.dtype();
  v.shape = t.shape();
  v.shape_known = true;
  v.data = std::move(t);
  g_.values[name] = std::move(v);
  changed_ = true;
  return name;
}

std::string Rewriter::add_value(const std::string& base, DType dtype, Shape shape) {
  const std::string name = fresh(base);
  graph::Value v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.shape_known = true;
  g_.values[name] = std::move(v);
  return name;
}

void Rewriter::add_node(Node n) {
  const std::string base = n.name;
  for (int k = 1; node_names_.count(n.name); ++k) n.name = base + "_" + std::to_string(k);
  node_names_.insert(n.name);
  added_.push_back(std::move(n));
  changed_ = true;
}

void Rewriter::remove_node(size_t index) {
  if (removed_.insert(index).second) node_names_.erase(g_.nodes[index].name);
  changed_ = true;
}

bool Rewriter::replace_uses(const std::string& from, const std::string& to) {
  if (is_output(from)) return false;
  for (size_t i : consumers(from))
    for (auto& in : g_.nodes[i].inputs)
      if (in == from) in = to;
  for (auto& n : added_)
    for (auto& in : n.inputs)
      if (in == from) in = to;
  consumers_[to].insert(consumers_[to].end(), consumers(from).begin(), consumers(from).end());
  consumers_.erase(from);
  changed_ = true;
  return true;
}

bool Rewriter::commit() {
  if (!changed_) return false;
  std::vector<Node> kept;
  for (size_t i = 0; i < g_.nodes.size(); ++i)
    if (!removed_.count(i)) kept.push_back(std::move(g_.nodes[i]));
  for (auto& n : added_) kept.push_back(std::move(n));
  g_.nodes = std::move(kept);
  removed_.clear();
  added_.clear();
  changed_ = false;
  return true;
}

Tensor i64_tensor(const std::vector<int64_t>& v) { return Tensor::from_i64({static_cast<int64_t>(v.size())}, v); }

}  // namespace tessera::passes
