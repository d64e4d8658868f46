// Branches (internal.hpp; docs/wafer-compiler.md "Convolutions"): a Concat of branches read by a
// Conv or a dense layer -- the reader split by its input's parts, their sum a residual Add -- and a
// feature-map graph input read by several Convs, through an identity Conv.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

std::string fresh(const graph::Graph& g, const std::string& base) {
  std::string v = base;
  for (int i = 2; g.has_value(v); ++i) v = base + "_" + std::to_string(i);
  return v;
}

const Tensor* constant_of(const graph::Graph& g, const std::string& v) {
  if (v.empty() || !g.has_value(v)) return nullptr;
  const graph::Value& val = g.value(v);
  return val.data ? &*val.data : nullptr;
}

namespace {

// The axis of constant t along which it varies when it varies along axis 1 (the channels, C of
// them) only of a value of rank r -- a BatchNorm's scale or shift, a PRelu's slopes: [C, 1, 1],
// [1, C, 1, 1] -- or -1.
int64_t channel_axis(const Tensor& t, size_t r, int64_t C) {
  const Shape& s = t.shape();
  if (C < 2 || t.numel() != C || s.size() > r || s.size() + 1 < r) return -1;
  const int64_t at = static_cast<int64_t>(s.size()) + 1 - static_cast<int64_t>(r);  // (aligned right)
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    if (s[static_cast<size_t>(d)] != (d == at ? C : 1)) return -1;
  return at;
}

// Node u, reading v (the Concat's value, concatenated along `axis` of rank r), acts on each part
// alone: an elementwise function of one value (its other inputs scalar constants, or along the
// channels constants per channel: DenseNet's BatchNorm of the concatenation) or, along the
// channels of a feature map, a pool.
bool per_part(const graph::Graph& g, const graph::Node& u, const std::string& v, int64_t axis, size_t r) {
  if (std::count(u.inputs.begin(), u.inputs.end(), v) != 1 || u.outputs.size() != 1) return false;
  if (u.op == "MaxPool" || u.op == "AveragePool" || u.op == "GlobalAveragePool") return u.inputs[0] == v && axis == 1 && r >= 3;
  if (!kUnary.count(u.op)) return false;
  for (const auto& in : u.inputs) {
    const Tensor* t = in != v && !in.empty() ? constant_of(g, in) : nullptr;
    if (in != v && !in.empty() && !(t && (t->numel() == 1 || (axis == 1 && channel_axis(*t, r, g.value(v).shape[1]) >= 0)))) return false;
  }
  return true;
}

// Node u reads v as its input and contracts the concatenated axis: a Conv of one group along the
// channels, a Gemm or a MatMul by a constant 2-D weight along the features.
bool splits(const graph::Graph& g, const graph::Node& u, const std::string& v, int64_t axis, size_t r) {
  if (u.inputs.size() < 2 || u.inputs[0] != v || std::count(u.inputs.begin(), u.inputs.end(), v) != 1) return false;
  const Tensor* w = constant_of(g, u.inputs[1]);
  if (!w) return false;
  if (u.op == "Conv") return axis == 1 && r >= 3 && w->rank() == static_cast<int64_t>(r) && u.attrs.get_int("group", 1) == 1;
  if (u.op == "Gemm") return axis == 1 && r == 2 && w->rank() == 2 && !u.attrs.get_int("transA", 0);
  if (u.op == "MatMul") return axis == static_cast<int64_t>(r) - 1 && w->rank() == 2;
  return false;
}

// Node u is a MaxPool or AveragePool of v along the channels (one of several readers: each part is
// pooled by an identity Conv kernel of its own, split_concat_readers).
bool pools(const graph::Node& u, const std::string& v, int64_t axis, size_t r) {
  return (u.op == "MaxPool" || u.op == "AveragePool") && !u.inputs.empty() && u.inputs[0] == v && u.outputs.size() == 1 && axis == 1 && r >= 3;
}

// A 1 x 1 identity Conv of C channels (rank r feature maps) reading x, its output y: nodes and
// values added to g (the node returned, for the caller to place).
graph::Node identity_conv(graph::Graph& g, const std::string& x, const std::string& name) {
  const Shape xs = g.value(x).shape;
  const int64_t C = xs[1];
  Shape ws{C, C, 1};
  if (xs.size() == 4) ws.push_back(1);
  std::vector<float> w(static_cast<size_t>(C * C), 0.0f);
  for (int64_t c = 0; c < C; ++c) w[static_cast<size_t>(c * C + c)] = 1.0f;
  const std::string wn = fresh(g, name + "/W"), y = fresh(g, name);
  g.values[wn] = graph::Value{wn, DType::f32, ws, true, Tensor::from_f32(ws, std::move(w)), false};
  g.values[y] = graph::Value{y, g.value(x).dtype, xs, true, std::nullopt, false};
  graph::Node id{name, "Conv", {}, {x, wn}, {y}};
  id.attrs.set("kernel_shape", std::vector<int64_t>(xs.size() - 2, 1));
  return id;
}

// The columns [lo, lo + n) of axis `ax` of w.
Tensor part_of(const Tensor& w, int64_t ax, int64_t lo, int64_t n) {
  Shape s = w.shape();
  const std::vector<float> v = w.to_f32();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ax; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(ax) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t full = s[static_cast<size_t>(ax)];
  std::vector<float> p;
  p.reserve(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o)
    p.insert(p.end(), v.begin() + (o * full + lo) * inner, v.begin() + (o * full + lo + n) * inner);
  s[static_cast<size_t>(ax)] = n;
  return Tensor::from_f32(s, std::move(p));
}

// Whether Concat c maps (returns "") or why not: its value, after the functions and pools that
// move to its parts (`moved`, ending at value `v`), read only by readers that split; `axis` the
// concatenated axis.
std::string concat_plan(const graph::Graph& g, const graph::Node& c, const std::map<std::string, std::vector<size_t>>& uses, const std::map<std::string, size_t>& producer,
                        std::vector<size_t>& moved, std::string& v, int64_t& axis) {
  auto is_output = [&](const std::string& x) { return std::find(g.outputs.begin(), g.outputs.end(), x) != g.outputs.end(); };
  const size_t r = g.value(c.outputs[0]).shape.size();
  axis = c.attrs.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(r);
  if (r < 2 || axis < 1) return "it joins along axis " + std::to_string(axis) + " of " + shape_str(g.value(c.outputs[0]).shape) + "; the wafer joins along the channels of feature maps or the features of rows";
  for (const auto& a : c.inputs)
    if (a.empty() || !producer.count(a) || constant_of(g, a) || g.value(a).shape.size() != r)
      return "its input '" + a + "' is the graph input or a constant; the wafer joins values its kernels compute";
  moved.clear();
  v = c.outputs[0];
  size_t rv = r;  // v's rank (a Flatten moved to the parts lowers it)
  for (;;) {
    const auto it = uses.find(v);
    if (it == uses.end() || it->second.size() != 1 || is_output(v) || !per_part(g, g.nodes[it->second[0]], v, axis, rv)) break;
    moved.push_back(it->second[0]);
    v = g.nodes[it->second[0]].outputs[0];
    rv = g.value(v).shape.size();
  }
  const auto rd = uses.find(v);
  if (is_output(v) || rd == uses.end()) return "its value ('" + v + "') is the graph's output; the wafer maps a Concat only into the Convs or dense layers that read it";
  for (const size_t u : rd->second)
    if (!splits(g, g.nodes[u], v, axis, rv) && !pools(g.nodes[u], v, axis, rv))
      return "its value ('" + v + "') is read by node '" + g.nodes[u].name + "' (" + g.nodes[u].op +
             "); the wafer maps a Concat only into Convs of one group, Gemms or MatMuls by a constant weight, and pools that read it (after functions of one value and pools)";
  return "";
}

}  // namespace

std::string concat_refusal(const graph::Graph& g, const graph::Node& c) {
  std::map<std::string, std::vector<size_t>> uses = g.consumers();
  std::vector<size_t> moved;
  std::string v;
  int64_t axis = 0;
  const std::string why = concat_plan(g, c, uses, g.producers(), moved, v, axis);
  return why.empty() ? "a Concat of branches is mapped when its parts' producers are kernels on the chain (this one is not)" : "a Concat of branches: " + why;
}

namespace {
std::vector<size_t> input_readers(const graph::Graph& g) {  // the readers that need the identity Conv, or none
  if (g.inputs.size() != 1) return {};
  const std::string x = g.inputs[0];
  const size_t r = g.value(x).shape.size();
  if (r != 3 && r != 4) return {};
  std::vector<size_t> readers;
  bool concat = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (std::find(n.inputs.begin(), n.inputs.end(), x) == n.inputs.end()) continue;
    const bool pool = n.op == "MaxPool" || n.op == "AveragePool";
    if ((n.op != "Conv" && n.op != "ConvTranspose" && n.op != "Concat" && !pool) || (n.op != "Concat" && n.inputs[0] != x)) return {};
    concat = concat || n.op == "Concat";
    readers.push_back(i);
  }
  return readers.size() >= 2 || concat ? readers : std::vector<size_t>{};
}
}  // namespace

bool input_needs_identity(const graph::Graph& g) { return !input_readers(g).empty(); }

// A feature-map graph input read by several Convs (or by a Concat: cat(x, f(x))) -- the host places
// the input for one reader -- is read through an identity 1 x 1 Conv first, a kernel whose output
// the wafer hands to any number of readers: one more kernel, C x C multiply-adds per position.
// Only when every reader is a Conv, ConvTranspose or Concat (a transformer's [batch, S, d] input,
// read by dense layers and a residual, is left alone). Returns whether it changed g.
bool identity_for_input(graph::Graph& g) {
  const std::vector<size_t> readers = input_readers(g);
  if (readers.empty()) return false;
  const std::string x = g.inputs[0];
  graph::Node id = identity_conv(g, x, x + "/identity");
  for (const size_t i : readers)
    for (auto& in : g.nodes[i].inputs)
      if (in == x) in = id.outputs[0];
  g.nodes.insert(g.nodes.begin(), std::move(id));
  return true;
}

namespace {
// The pools (MaxPool, AveragePool) of a feature map that other nodes read too, produced by a node
// other than a Concat (whose pool readers split_concat_readers pools per part).
std::vector<size_t> shared_pools(const graph::Graph& g, bool functions_only) {
  std::map<std::string, size_t> readers;
  std::set<std::string> concatenated;  // values a Concat reads
  for (const auto& n : g.nodes)
    for (const auto& v : n.inputs) ++readers[v], n.op == "Concat" ? (void)concatenated.insert(v) : (void)0;
  const std::map<std::string, size_t> producer = g.producers();
  // (Or a function of one value -- its other inputs constants, scalar or per channel -- of a value
  // a Concat reads too: DenseNet's first layer's BatchNorm and ReLU of the features that every
  // later concatenation also takes.)
  auto function_of_concatenated = [&](const graph::Node& n) {
    if (!kUnary.count(n.op) || !concatenated.count(n.inputs[0])) return false;
    const Shape& vs = g.value(n.inputs[0]).shape;
    for (size_t k = 1; k < n.inputs.size(); ++k) {
      const Tensor* t = n.inputs[k].empty() ? nullptr : constant_of(g, n.inputs[k]);
      if (!n.inputs[k].empty() && !(t && (t->numel() == 1 || channel_axis(*t, vs.size(), vs[1]) >= 0))) return false;
    }
    return true;
  };
  std::vector<size_t> found;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (n.inputs.empty() || n.outputs.size() != 1 || ((functions_only || (n.op != "MaxPool" && n.op != "AveragePool")) && !function_of_concatenated(n))) continue;
    const std::string& v = n.inputs[0];
    const auto pr = producer.find(v);
    const size_t r = g.value(v).shape.size();
    if (pr == producer.end() || g.nodes[pr->second].op == "Concat" || (r != 3 && r != 4) || readers[v] < 2) continue;
    found.push_back(i);
  }
  return found;
}
}  // namespace

bool pools_need_identity(const graph::Graph& g) { return !shared_pools(g, false).empty(); }

// A pool of a feature map that other nodes read too (GoogLeNet's pool branch: a MaxPool of the
// block's input beside three Convs) reads it through an identity 1 x 1 Conv: a kernel of its own,
// with the pool at its chain ends, where the producer's chain ends hand the unpooled value to the
// other readers. One more kernel, C x C multiply-adds per position. Returns whether it changed g.
bool identity_for_pools(graph::Graph& g, bool functions_only) {
  const std::vector<size_t> found = shared_pools(g, functions_only);
  if (found.empty()) return false;
  std::vector<graph::Node> nodes;
  size_t next = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (next < found.size() && found[next] == i) {
      ++next;
      graph::Node id = identity_conv(g, g.nodes[i].inputs[0], g.nodes[i].name + "/identity");
      g.nodes[i].inputs[0] = id.outputs[0];
      nodes.push_back(std::move(id));
    }
    nodes.push_back(g.nodes[i]);
  }
  g.nodes = std::move(nodes);
  return true;
}

// A Concat of computed values along the channels of feature maps (or the features of rows) whose
// value -- after functions of one value and pools, which act on each part alone and move to the
// parts -- is read only by Convs of one group (or Gemms, MatMuls by a constant weight): each reader
// becomes one reader per part, of its weight's slice along the contracted axis, and their outputs
// are summed by Adds (the bias with the last part), which the wafer maps as residuals of outputs no
// kernel reads. So SqueezeNet's Fire modules: expand1x1 and expand3x3 read the squeeze, each next
// reader reads both. The moved functions and pools go right after each part's producer (a pool
// attaches to the kernel before it); the readers' parts where the reader was. Returns whether it
// changed g.
namespace {
// A value taken from a recurrent layer's outputs by views (a Slice, Reshape or Transpose: h_n[-1]):
// a Concat of such is recurrent.cpp's (states side by side), not branches to split.
bool from_recurrent(const graph::Graph& g, const std::map<std::string, size_t>& producer, std::string v) {
  for (int guard = 0; guard < 16; ++guard) {
    const auto it = producer.find(v);
    if (it == producer.end()) return false;
    const graph::Node& n = g.nodes[it->second];
    if (n.op == "RNN" || n.op == "GRU" || n.op == "LSTM") return true;
    if ((n.op != "Slice" && n.op != "Reshape" && n.op != "Transpose" && n.op != "Concat") || n.inputs.empty()) return false;
    v = n.inputs[0];
  }
  return false;
}
}  // namespace

bool split_concat_readers(graph::Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::map<std::string, std::vector<size_t>> uses = g.consumers();
    const std::map<std::string, size_t> producer = g.producers();
    auto is_output = [&](const std::string& v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
    for (size_t ci = 0; ci < g.nodes.size() && !again; ++ci) {
      const graph::Node& c = g.nodes[ci];
      if (c.op != "Concat" || c.inputs.size() < 2 || c.outputs.size() != 1 || from_recurrent(g, producer, c.inputs[0])) continue;
      std::vector<size_t> moved;
      std::string v;
      int64_t axis = 0;
      if (!concat_plan(g, c, uses, producer, moved, v, axis).empty()) continue;
      const auto rd = uses.find(v);
      // Each part through the moved nodes: the part's value after them.
      std::map<size_t, std::vector<graph::Node>> after;  // node index -> nodes to insert after it
      // A part's identity copy and the nodes moved onto it: right before the first reader's node of
      // that part, not after the part's producer, so the copy and the per-part sums it feeds live
      // for a few kernels (DenseNet: each layer's BatchNorm and ReLU of every earlier feature map;
      // placed after their producers, 24 moved residuals were in flight at once).
      std::vector<std::vector<graph::Node>> prep(c.inputs.size());
      std::vector<std::string> parts;
      std::vector<int64_t> width;
      for (size_t p = 0, lo = 0; p < c.inputs.size(); ++p) {
        std::string pv = c.inputs[p];
        const int64_t n = g.value(pv).shape[static_cast<size_t>(axis)];
        lo += static_cast<size_t>(n);  // (the part's first channel: lo - n)
        // A part other nodes read too (DenseNet's earlier features, in every later concatenation)
        // keeps its value: the moved nodes act on an identity Conv kernel's copy of it.
        if (!moved.empty() && (uses.at(pv).size() > 1 || is_output(pv))) {
          graph::Node id = identity_conv(g, pv, pv + "/part" + std::to_string(p) + "/identity");
          pv = id.outputs[0];
          prep[p].push_back(std::move(id));
        }
        for (size_t q = 0; q < moved.size(); ++q) {
          graph::Node mn = g.nodes[moved[q]];
          const graph::Value& ov = g.value(mn.outputs[0]);
          Shape s = ov.shape;
          s[static_cast<size_t>(axis)] = n;
          const std::string out = fresh(g, mn.outputs[0] + "/part" + std::to_string(p));
          g.values[out] = graph::Value{out, ov.dtype, s, true, std::nullopt, false};
          const std::string& was = q == 0 ? c.outputs[0] : g.nodes[moved[q - 1]].outputs[0];  // (the value it read)
          for (auto& in : mn.inputs) {
            const Tensor* t = in != was && !in.empty() ? constant_of(g, in) : nullptr;
            const int64_t cax = t ? channel_axis(*t, g.value(was).shape.size(), g.value(was).shape[1]) : -1;
            if (in == was) in = pv;
            else if (cax >= 0) {  // a constant per channel: the part's channels of it
              const std::string cn = fresh(g, in + "/part" + std::to_string(p));
              g.values[cn] = graph::Value{cn, g.value(in).dtype, Shape{}, true, part_of(*t, cax, static_cast<int64_t>(lo) - n, n).cast(t->dtype()), false};
              g.values[cn].shape = g.values[cn].data->shape();
              in = cn;
            }
          }
          mn.name += "/part" + std::to_string(p);
          mn.outputs = {out};
          (prep[p].empty() ? after[producer.at(c.inputs[p])] : prep[p]).push_back(mn);
          pv = out;
        }
        parts.push_back(pv);
        width.push_back(n);
      }
      // Each reader: one node per part, their outputs summed.
      std::map<size_t, std::vector<graph::Node>> instead;
      std::vector<size_t> gone;  // bias Adds, moved before the sum
      for (const size_t u : rd->second) {
        const graph::Node& un = g.nodes[u];
        auto prepare = [&](size_t p) {  // (the first reader: the part's identity copy first)
          if (u == rd->second.front()) instead[u].insert(instead[u].end(), prep[p].begin(), prep[p].end());
        };
        if (pools(un, v, axis, g.value(v).shape.size())) {
          // A pool beside other readers: each part through an identity Conv kernel with a copy of
          // the pool at its chain ends; the pooled parts concatenated again (that Concat's readers
          // split on the next pass).
          std::vector<std::string> pooled;
          for (size_t p = 0; p < parts.size(); ++p) {
            prepare(p);
            const std::string tag = "/part" + std::to_string(p);
            graph::Node id = identity_conv(g, parts[p], (un.name.empty() ? un.outputs[0] : un.name) + tag + "/identity");
            graph::Node pn = un;
            pn.name = (un.name.empty() ? un.outputs[0] : un.name) + tag;
            pn.inputs[0] = id.outputs[0];
            Shape s = g.value(un.outputs[0]).shape;
            s[static_cast<size_t>(axis)] = width[p];
            const std::string out = fresh(g, un.outputs[0] + tag);
            g.values[out] = graph::Value{out, g.value(un.outputs[0]).dtype, s, true, std::nullopt, false};
            pn.outputs = {out};
            pooled.push_back(out);
            instead[u].push_back(std::move(id));
            instead[u].push_back(std::move(pn));
          }
          graph::Node cat{(un.name.empty() ? un.outputs[0] : un.name) + "/concat", "Concat", {}, pooled, {un.outputs[0]}};
          cat.attrs.set("axis", axis);
          instead[u].push_back(std::move(cat));
          continue;
        }
        const Tensor& w = *constant_of(g, un.inputs[1]);
        const int64_t wax = un.op == "Conv" ? 1 : un.op == "Gemm" && un.attrs.get_int("transB", 0) ? 1 : 0;
        const graph::Value& ov = g.value(un.outputs[0]);
        // A bias Add of the reader's output (the canonical graph's split of a Gemm's or MatMul's
        // bias): with the last part, before the sum (the wafer adds a bias before a residual).
        const int64_t N = un.op == "Conv" ? w.shape()[0] : w.shape()[1 - static_cast<size_t>(wax)];
        const graph::Node* bias = nullptr;
        if (const auto bu = uses.find(un.outputs[0]); bu != uses.end() && bu->second.size() == 1 && !is_output(un.outputs[0])) {
          const graph::Node& a = g.nodes[bu->second[0]];
          const std::string other = a.inputs.size() == 2 ? (a.inputs[0] == un.outputs[0] ? a.inputs[1] : a.inputs[0]) : "";
          if (a.op == "Add" && constant_of(g, other) && constant_of(g, other)->numel() == N) bias = &a, gone.push_back(bu->second[0]);
        }
        const std::string final_out = bias ? bias->outputs[0] : un.outputs[0];
        std::string sum;
        int64_t lo = 0;
        for (size_t p = 0; p < parts.size(); ++p) {
          prepare(p);
          const std::string tag = "/in" + std::to_string(lo) + "_" + std::to_string(lo + width[p]);
          const std::string wn = fresh(g, un.inputs[1] + tag);
          g.values[wn] = graph::Value{wn, DType::f32, Shape{}, true, part_of(w, wax, lo, width[p]), g.value(un.inputs[1]).is_initializer};
          g.values[wn].shape = g.values[wn].data->shape();
          lo += width[p];
          graph::Node pn = un;
          pn.name = (un.name.empty() ? un.outputs[0] : un.name) + tag;
          pn.inputs[0] = parts[p];
          pn.inputs[1] = wn;
          if (p + 1 < parts.size() && pn.inputs.size() > 2) pn.inputs.resize(2);  // the bias with the last part
          const std::string out = fresh(g, un.outputs[0] + tag);
          g.values[out] = graph::Value{out, ov.dtype, ov.shape, true, std::nullopt, false};
          pn.outputs = {out};
          instead[u].push_back(pn);
          if (p == 0) {
            sum = out;
            continue;
          }
          std::string term = out;
          if (bias && p + 1 == parts.size()) {
            term = fresh(g, out + "/bias");
            g.values[term] = graph::Value{term, ov.dtype, ov.shape, true, std::nullopt, false};
            graph::Node bn = *bias;
            for (auto& in : bn.inputs)
              if (in == un.outputs[0]) in = out;
            bn.outputs = {term};
            instead[u].push_back(bn);
          }
          const std::string s = p + 1 == parts.size() ? final_out : fresh(g, un.outputs[0] + "/sum" + std::to_string(p));
          if (s != final_out) g.values[s] = graph::Value{s, ov.dtype, ov.shape, true, std::nullopt, false};
          instead[u].push_back(graph::Node{pn.name + "/sum", "Add", {}, {sum, term}, {s}});
          sum = s;
        }
      }
      std::vector<graph::Node> nodes;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (const auto it = instead.find(i); it != instead.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
        else if (i != ci && std::find(moved.begin(), moved.end(), i) == moved.end() && std::find(gone.begin(), gone.end(), i) == gone.end()) nodes.push_back(g.nodes[i]);
        if (const auto it = after.find(i); it != after.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
      }
      g.nodes = std::move(nodes);
      again = changed = true;
    }
  }
  return changed;
}

// Nodes listed after a node that reads them -- the canonical passes append the nodes they make (a
// BatchNorm's Mul and Add that no Conv absorbs, DenseNet's per-layer norm1 of the block's input),
// and the identity kernels above go before them -- move to their earliest reader: a topological
// order (Kahn's) by the least index among a node and everything that depends on it, then its own.
// Kernels run in node order (match_ops.cpp chain_order keeps the file's order where it is
// topological), so DenseNet-121's first dense layer otherwise ran after the 1,100 kernels of
// every later layer's parts that did not need it, and 24 residual moves were in flight at once.
// A graph already in topological order keeps its order (every key is then the node's own index).
void order_by_first_reader(graph::Graph& g) {
  std::map<std::string, std::vector<size_t>> uses = g.consumers();
  std::vector<size_t> key(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) key[i] = i;
  const std::vector<size_t> topo = g.topo_order();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it)
    for (const auto& v : g.nodes[*it].outputs)
      if (const auto us = uses.find(v); us != uses.end())
        for (const size_t u : us->second) key[*it] = std::min(key[*it], key[u]);
  const std::map<std::string, size_t> producer = g.producers();
  std::vector<size_t> pending(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& v : g.nodes[i].inputs) pending[i] += producer.count(v);
  std::set<std::pair<size_t, size_t>> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!pending[i]) ready.insert({key[i], i});
  std::vector<graph::Node> nodes;
  while (!ready.empty()) {
    const size_t i = ready.begin()->second;
    ready.erase(ready.begin());
    nodes.push_back(g.nodes[i]);
    for (const auto& v : g.nodes[i].outputs)
      if (const auto us = uses.find(v); us != uses.end())
        for (const size_t u : us->second)
          if (--pending[u] == 0) ready.insert({key[u], u});
  }
  g.nodes = std::move(nodes);
}

// The graph match_layers maps: a copy with the rewrites above -- identity Convs for a graph input or
// a pool that several nodes read, dense heads as Convs, readers of Concats split per part -- and
// packed projections split per Slice (match_ops.cpp), or nothing when none applies (the graph as
// it is). The copy is made only for a graph with Slices, Concats or such inputs and pools.
std::optional<graph::Graph> rewrite_branches(const graph::Graph& g0) {
  if (!input_needs_identity(g0) && !pools_need_identity(g0) && !has_channels_last(g0) &&
      std::none_of(g0.nodes.begin(), g0.nodes.end(), [](const graph::Node& n) { return n.op == "Slice" || n.op == "Concat"; }))
    return std::nullopt;
  std::optional<graph::Graph> split = g0;
  bool changed = channels_last_blocks(*split);  // (channels_last.cpp)
  changed = identity_for_input(*split) || changed;
  changed = channel_views(*split) || changed;  // (channels.cpp)
  changed = dense_heads_as_convs(*split) || changed;
  bool branched = identity_for_pools(*split, true);  // (functions of concatenated values, before the Concats split)
  branched = split_concat_readers(*split) || branched;
  branched = identity_for_pools(*split, false) || branched;
  if (branched) order_by_first_reader(*split);
  changed = changed || branched;
  if (!split_sliced_projections(*split) && !changed) split.reset();
  return split;
}

}  // namespace tessera::wafer::detail
