#include "mapper/graph/graph.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <boost/graph/topological_sort.hpp>
#include <iterator>
#include <set>

#include "isa/error.hpp"

namespace tessera::graph {

namespace {
using BGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

// Vertex i = node i; an edge producer -> consumer per consumed value.
BGraph to_bgl(const Graph& g, const std::map<std::string, size_t>& producers) {
  BGraph b(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs) {
      auto it = producers.find(in);
      if (!in.empty() && it != producers.end()) boost::add_edge(it->second, i, b);
    }
  return b;
}
}  // namespace

Value& Graph::value(const std::string& name) {
  auto it = values.find(name);
  if (it == values.end()) throw InputError(source, "no tensor named '" + name + "' in the graph");
  return it->second;
}

const Value& Graph::value(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) throw InputError(source, "no tensor named '" + name + "' in the graph");
  return it->second;
}

std::string Graph::where(const Node& n) const {
  return "node '" + n.name + "' (" + n.op + ", opset " + std::to_string(opset) + ")";
}

std::map<std::string, size_t> Graph::producers() const {
  std::map<std::string, size_t> p;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (!o.empty()) p[o] = i;
  return p;
}

std::map<std::string, std::vector<size_t>> Graph::consumers() const {
  std::map<std::string, std::vector<size_t>> c;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& v : nodes[i].inputs) c[v].push_back(i);
  return c;
}

std::vector<size_t> Graph::topo_order() const {
  const BGraph b = to_bgl(*this, producers());
  std::vector<BGraph::vertex_descriptor> rev;
  try {
    boost::topological_sort(b, std::back_inserter(rev));
  } catch (const boost::not_a_dag&) {
    std::vector<size_t> comp(nodes.size());
    const size_t ncomp = boost::strong_components(b, comp.data());
    std::vector<size_t> size(ncomp, 0);
    for (size_t c : comp) ++size[c];
    std::string cycle;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (size[comp[i]] > 1) cycle += (cycle.empty() ? "'" : ", '") + nodes[i].name + "'";
    throw InputError(source, "the graph has a cycle through nodes " + cycle,
                     "a dataflow graph must be acyclic; check the node inputs/outputs");
  }
  return std::vector<size_t>(rev.rbegin(), rev.rend());
}

void verify(const Graph& g) {
  DiagnosticList d;
  std::set<std::string> defined;
  for (const auto& in : g.inputs) {
    if (!g.has_value(in)) d.add(g.source, "graph input '" + in + "' has no type");
    if (!defined.insert(in).second) d.add(g.source, "graph input '" + in + "' is declared twice");
  }
  for (const auto& [name, v] : g.values)
    if (v.data) defined.insert(name);
  std::set<std::string> node_names;
  for (const auto& n : g.nodes) {
    if (!node_names.insert(n.name).second) d.add(g.where(n), "node name is used twice", "give every node a unique name");
    for (const auto& o : n.outputs) {
      if (o.empty()) continue;
      if (!defined.insert(o).second)
        d.add(g.where(n), "output '" + o + "' is already defined by another node, an input or an initializer");
    }
  }
  for (const auto& n : g.nodes)
    for (const auto& i : n.inputs)
      if (!i.empty() && !defined.count(i))
        d.add(g.where(n), "input '" + i + "' is not defined", "it must be a graph input, an initializer or another node's output");
  for (const auto& o : g.outputs)
    if (!defined.count(o)) d.add(g.source, "graph output '" + o + "' is not produced by any node");
  d.throw_if_any();
  (void)g.topo_order();  // throws on a cycle
}

std::string nearest_resize_form(const Node& n) {
  const std::string mode = n.attrs.get_string("mode", "nearest"), ct = n.attrs.get_string("coordinate_transformation_mode", "half_pixel"),
                    nm = n.attrs.get_string("nearest_mode", "round_prefer_floor");
  const bool floor_map = mode == "nearest" && (((ct == "half_pixel" || ct == "pytorch_half_pixel") && nm != "ceil" && nm != "floor") || (ct == "asymmetric" && nm == "floor"));
  return floor_map ? std::string() : mode + ", " + ct + ", " + nm;
}

}  // namespace tessera::graph
