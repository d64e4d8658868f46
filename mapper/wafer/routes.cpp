// Routes and per-PE parameters of the layers (compile.hpp; docs/wafer-compiler.md "The kernel",
// "Modes", "Transformers"): x multicasts, reduce chains, hand-offs, weight streams, the chain-end
// edge groups of LayerNorm and split attention heads, and the input queue of a kernel's chain.
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

// The route region of one color: `rx` and `tx` direction sets, rect-relative region.
json route(int color, int64_t x, int64_t y, int64_t w, int64_t h, DirSet rx, DirSet tx) {
  auto list = [](DirSet s) {
    json a = json::array();
    for (int d = 0; d < kDirs; ++d)
      if (s & dir_bit(static_cast<Dir>(d))) a.push_back(dir_name(static_cast<Dir>(d)));
    return a;
  };
  return {{"color", color}, {"x", x}, {"y", y}, {"width", w}, {"height", h}, {"rx", list(rx)}, {"tx", list(tx)}};
}

// Routes of kernel k's x multicast within its rectangle: lines along the N axis, entering at the
// source end (from the neighbour outside, or from the source PE's own ramp).
void x_routes(const DenseKernel& k, bool from_ramp, json& routes) {
  const Dir f = k.x_flow;
  const DirSet fwd = dir_bit(f), back = dir_bit(opposite(f));
  const int64_t len = k.k_on_columns ? k.h : k.w;  // PEs along a line
  auto region = [&](int64_t from, int64_t n, DirSet rx, DirSet tx) {
    // `from`: index along the flow (0 = source end), n PEs.
    int64_t a = from, b = from + n - 1;  // flow positions
    int64_t p0, p1;
    if (f == Dir::S || f == Dir::E) {
      p0 = a, p1 = b;
    } else {
      p0 = len - 1 - b, p1 = len - 1 - a;
    }
    if (k.k_on_columns) routes.push_back(route(k.cx, 0, p0, k.w, p1 - p0 + 1, rx, tx));
    else routes.push_back(route(k.cx, p0, 0, p1 - p0 + 1, k.h, rx, tx));
  };
  const DirSet rx0 = from_ramp ? kRamp : back;
  if (len == 1) {
    region(0, 1, rx0, kRamp);
    return;
  }
  region(0, 1, rx0, fwd | kRamp);
  if (len > 2) region(1, len - 2, back, fwd | kRamp);
  region(len - 1, 1, back, kRamp);
}

// Reduce routes: along the K axis towards E (K on columns) or S; position p sends on color
// c(p) = p even ? cr0 : cr1 and the next PE takes it from its ramp.
void reduce_routes(const DenseKernel& k, json& routes) {
  const int64_t len = k.k_on_columns ? k.w : k.h;
  const DirSet fwd = dir_bit(k.k_on_columns ? Dir::E : Dir::S), back = dir_bit(k.k_on_columns ? Dir::W : Dir::N);
  for (int64_t p = 0; p < len; ++p) {
    // Color of position p's send and of its receive, per route region (one line across).
    std::vector<std::pair<int, std::pair<DirSet, DirSet>>> at;  // color -> rx, tx
    if (p + 1 < len) at.push_back({p % 2 == 0 ? k.cr0 : k.cr1, {kRamp, fwd}});
    if (p > 0) at.push_back({(p - 1) % 2 == 0 ? k.cr0 : k.cr1, {back, kRamp}});
    for (const auto& [col, rt] : at) {
      if (k.k_on_columns) routes.push_back(route(col, p, 0, 1, k.h, rt.first, rt.second));
      else routes.push_back(route(col, 0, p, k.w, 1, rt.first, rt.second));
    }
  }
}

// A residual move to kernel k's chain ends from the other edge of its square n x n rectangle
// (docs/wafer-compiler.md "Residuals across the edges"): block i leaves the producer's chain end
// i, runs along its line to the diagonal PE (i, i) and turns along line i of k's edge to k's chain
// end i. Every router has one role (source, line, turn, column, destination): one color serves all.
void move_routes(const DenseKernel& k, json& routes) {
  const int64_t n = k.w;
  const DirSet N = dir_bit(Dir::N), S = dir_bit(Dir::S), E = dir_bit(Dir::E), W = dir_bit(Dir::W);
  const bool to_south = !k.k_on_columns;  // from the east column to the south row, else back
  routes.push_back(route(k.cm, n - 1, n - 1, 1, 1, kRamp, kRamp));  // the corner keeps its block
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t mid = n - 2 - i;  // PEs between the turn and the edge, each way
    if (to_south) {
      routes.push_back(route(k.cm, n - 1, i, 1, 1, kRamp, W));
      if (mid > 0) routes.push_back(route(k.cm, i + 1, i, mid, 1, E, W));
      routes.push_back(route(k.cm, i, i, 1, 1, E, S));
      if (mid > 0) routes.push_back(route(k.cm, i, i + 1, 1, mid, N, S));
      routes.push_back(route(k.cm, i, n - 1, 1, 1, N, kRamp));
    } else {
      routes.push_back(route(k.cm, i, n - 1, 1, 1, kRamp, N));
      if (mid > 0) routes.push_back(route(k.cm, i, i + 1, 1, mid, S, N));
      routes.push_back(route(k.cm, i, i, 1, 1, S, E));
      if (mid > 0) routes.push_back(route(k.cm, i + 1, i, mid, 1, W, E));
      routes.push_back(route(k.cm, n - 1, i, 1, 1, W, kRamp));
    }
  }
}

// Routes at kernel p's chain ends that send the next kernel's x towards it (pipelined) -- in
// p's rectangle. In weight streaming the chain ends are the next kernel's x sources.
void handoff_routes(const DenseKernel& p, const DenseKernel& n, json& routes) {
  if (p.k_on_columns) routes.push_back(route(n.cx, p.w - 1, 0, 1, p.h, kRamp, dir_bit(Dir::E)));
  else routes.push_back(route(n.cx, 0, p.h - 1, p.w, 1, kRamp, dir_bit(Dir::S)));
}

// Weight stream routes (weight streaming): rows from the west edge (K on columns), columns from
// the north edge (K on rows); every PE of a line takes the line's stream and passes it on.
void weight_routes(const DenseKernel& k, json& routes) {
  if (k.k_on_columns) {
    if (k.w > 1) routes.push_back(route(k.cw, 0, 0, k.w - 1, k.h, dir_bit(Dir::W), dir_bit(Dir::E) | kRamp));
    routes.push_back(route(k.cw, k.w - 1, 0, 1, k.h, dir_bit(Dir::W), kRamp));
  } else {
    if (k.h > 1) routes.push_back(route(k.cw, 0, 0, k.w, k.h - 1, dir_bit(Dir::N), dir_bit(Dir::S) | kRamp));
    routes.push_back(route(k.cw, 0, k.h - 1, k.w, 1, dir_bit(Dir::N), kRamp));
  }
}

// Parameters of kernel l for one rectangle (expressions of px, py): source, chain position, colors.
// Weight streaming: whether a PE sets the lengths of the blocks before and after its own at run time
// (inference, and the longest run fits a DSD length, 16 bits) or takes them as parameters (one
// program instance per position along the chain).
bool runtime_block_lengths(bool training, const DenseKernel& k) {
  return !training && ((k.k_on_columns ? k.w : k.h) - 1) * k.kb * k.nb <= 65535;
}

void layer_params(const DenseKernel& k, size_t l, bool ws, bool training, json& params) {
  const std::string L = std::to_string(l);
  const std::string pk = k.k_on_columns ? "px" : "py";              // position along the chain (K axis)
  const std::string kl = k.k_on_columns ? "width" : "height";
  std::string src;
  switch (k.x_flow) {
    case Dir::S: src = "py == 0"; break;
    case Dir::N: src = "py == height - 1"; break;
    case Dir::E: src = "px == 0"; break;
    default: src = "px == width - 1"; break;
  }
  if (k.input_layer) params["src" + L] = src;  // only the input layer's sources hold x (other layers get it from the fabric)
  if (k.input_layer && k.spatial())  // the first kernel row of the source's line (its walk's start)
    params["xoff" + L] = "(" + std::string(k.k_on_columns ? "px" : "py") + " % " + std::to_string(k.kh_blocks()) + ") * " + std::to_string(k.khb * k.iw * k.cblk);
  params["first" + L] = pk + " == 0";
  params["last" + L] = pk + " == " + kl + " - 1";
  const std::string d = "(" + std::to_string(k.cr1) + " - " + std::to_string(k.cr0) + ")";
  params["cout" + L] = std::to_string(k.cr0) + " + (" + pk + " % 2) * " + d;
  params["cin" + L] = std::to_string(k.cr0) + " + ((" + pk + " + 1) % 2) * " + d;
  if (ws && !runtime_block_lengths(training, k)) {  // else computed at run time from px / py (no program instance per PE)
    const std::string bs = std::to_string(k.kb * k.nb);
    params["pre" + L] = pk;                                // blocks before this PE's in its line's stream
    params["post" + L] = kl + " - 1 - " + pk;              // blocks after it
    params["npre" + L] = pk + " * " + bs;                  // ... in wavelets
    params["npost" + L] = "(" + kl + " - 1 - " + pk + ") * " + bs;
  }
}

// The input queue of kernel l's chain colors (a color arrives in one queue of a PE; the kernels of
// an orientation share their chain colors). Training gives each orientation its own (1, 5): a fabin
// takes the head of its queue whatever its color, and in the backward pass a PE reads the input
// gradient on layer l-1's colors while layer l's gradient blocks may arrive from a neighbour on the
// other orientation's. (On one orientation's queue the order is the chain's: a PE relays all of
// layer l's blocks before its part of layer l-1's input gradient, which travels on layer l's
// orientation colors too.)
int chain_queue(const Compiled& c, size_t l) { return c.training && !c.kernels[l].k_on_columns ? 5 : 1; }

namespace {

// Chains along kernel k's chain ends (its N axis, towards S or E) in groups of g consecutive
// positions: each group's chain towards its last position on colors c0/c1 (alternating within the
// group), and the broadcast back from that last position to the group (its own copy through its
// ramp) on cb; adjacent groups use no link between them. LayerNorm: one group, the whole edge;
// attention with split heads: a group per head.
void edge_group_routes(const DenseKernel& k, int64_t g, int c0, int c1, int cb, json& routes) {
  const int64_t len = k.k_on_columns ? k.h : k.w;
  const DirSet fwd = dir_bit(k.k_on_columns ? Dir::S : Dir::E), back = dir_bit(k.k_on_columns ? Dir::N : Dir::W);
  auto at = [&](int col, int64_t q, DirSet rx, DirSet tx) {
    if (k.k_on_columns) routes.push_back(route(col, k.w - 1, q, 1, 1, rx, tx));
    else routes.push_back(route(col, q, k.h - 1, 1, 1, rx, tx));
  };
  for (int64_t q = 0; q < len; ++q) {
    const int64_t ql = q % g;
    const bool first = ql == 0, last = ql == g - 1 || q == len - 1;
    if (!last) at(ql % 2 == 0 ? c0 : c1, q, kRamp, fwd);
    if (!first) at((ql - 1) % 2 == 0 ? c0 : c1, q, back, kRamp);
    if (last) at(cb, q, kRamp, first ? kRamp : back | kRamp);
    else if (!first) at(cb, q, fwd, back | kRamp);
    else at(cb, q, fwd, kRamp);
  }
}

// The parameters of those groups, prefixed `pre` and suffixed with l: <pre>first, <pre>last (the
// group's), <pre>cout / <pre>cin (the colors a position sends and takes on).
void edge_group_params(const DenseKernel& k, size_t l, int64_t g, int c0, int c1, const std::string& pre, json& params) {
  const std::string L = std::to_string(l), pn = k.k_on_columns ? "py" : "px", nl = k.k_on_columns ? "height" : "width";
  const std::string G = std::to_string(g), q = "(" + pn + " % " + G + ")";
  params[pre + "first" + L] = q + " == 0";
  params[pre + "last" + L] = "(" + q + " == " + G + " - 1) + (" + pn + " == " + nl + " - 1)";
  const std::string d = "(" + std::to_string(c1) + " - " + std::to_string(c0) + ")";
  params[pre + "cout" + L] = std::to_string(c0) + " + (" + q + " % 2) * " + d;
  params[pre + "cin" + L] = std::to_string(c0) + " + ((" + q + " + 1) % 2) * " + d;
}

}  // namespace

void ln_routes(const DenseKernel& k, json& routes) { edge_group_routes(k, k.k_on_columns ? k.h : k.w, k.cn0, k.cn1, k.cnb, routes); }
void ln_params(const DenseKernel& k, size_t l, json& params) { edge_group_params(k, l, k.k_on_columns ? k.h : k.w, k.cn0, k.cn1, "ln", params); }

void attn_routes(const DenseKernel& k, json& routes) { edge_group_routes(k, k.attn_group(), k.ca0, k.ca1, k.cab, routes); }
void attn_params(const DenseKernel& k, size_t l, json& params) { edge_group_params(k, l, k.attn_group(), k.ca0, k.ca1, "ag", params); }

}  // namespace tessera::wafer::detail
