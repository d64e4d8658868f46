#pragma once
// Editing a graph inside a pass: who produces and consumes a value, fresh names, constants, and
// replacing one value by another. Passes collect their changes in a Rewriter and commit them at
// once, so indices stay valid while a pass walks the graph.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/graph.hpp"

namespace tessera::passes {

class Rewriter {
 public:
  explicit Rewriter(graph::Graph& g);

  graph::Graph& graph() { return g_; }
  const graph::Graph& graph() const { return g_; }
  const graph::Node* producer(const std::string& v) const;
  size_t producer_index(const std::string& v) const;  // SIZE_MAX when none
  const std::vector<size_t>& consumers(const std::string& v) const;
  bool is_output(const std::string& v) const;
  bool is_input(const std::string& v) const;
  // The value's only consumer, or nullptr (none, several, or it is a graph output).
  const graph::Node* only_consumer(const std::string& v, size_t* index = nullptr) const;

  const graph::Value& value(const std::string& v) const { return g_.value(v); }
  // The constant's data, or nullptr.
  const Tensor* constant(const std::string& v) const;
  // A one-element float constant's value.
  std::optional<double> scalar(const std::string& v) const;

  // A new value name not used yet, derived from `base`.
  std::string fresh(const std::string& base);
  // Adds a constant value and returns its name.
  std::string add_constant(const std::string& base, Tensor t);
  // Adds a computed value of known dtype and shape (the output of a node added below).
  std::string add_value(const std::string& base, DType dtype, Shape shape);
  // Queues a node; its outputs must have been added with add_value (or be existing outputs of
  // removed nodes). Node names are made unique.
  void add_node(graph::Node n);
  void remove_node(size_t index);
  bool removed(size_t index) const { return removed_.count(index) != 0; }
  // Makes every consumer of `from` read `to` instead. A graph output `from` cannot be renamed away:
  // returns false and changes nothing (the caller keeps a node that produces it).
  bool replace_uses(const std::string& from, const std::string& to);

  // Applies the queued removals and additions (new nodes at the end; order is recomputed from the
  // data dependencies by whoever walks the graph). Returns whether anything changed.
  bool commit();

 private:
  graph::Graph& g_;
  std::map<std::string, size_t> producer_;
  std::map<std::string, std::vector<size_t>> consumers_;
  std::set<std::string> names_;       // value names
  std::set<std::string> node_names_;  // node names (a removed node's name is free again)
  std::set<size_t> removed_;
  std::vector<graph::Node> added_;
  bool changed_ = false;
};

// An int64 constant tensor (axes, shapes, starts...).
Tensor i64_tensor(const std::vector<int64_t>& v);

}  // namespace tessera::passes
