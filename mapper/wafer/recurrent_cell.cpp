// Recurrent layers on the wafer, the chain ends' part (recurrent.cpp has the matching, the rows'
// slots and the weights; docs/wafer-compiler.md "Recurrent layers"): the DSDs over a step's rows,
// the cell's PE operations and their cycles, its arrays' bytes, and the host's placement of each
// step's x.
#include <algorithm>
#include <string>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {
std::string L_(size_t l) { return std::to_string(l); }
}  // namespace

// DSDs over y's rows (B rows of nb): a gate region (gates g .. g + n - 1), a state slot, the x slot;
// temporaries of B n hb values.
std::string rnn_gate(size_t l, int64_t g, int64_t n) { return "rg" + L_(l) + "_" + std::to_string(g) + "_" + std::to_string(n); }
std::string rnn_state(size_t l, int64_t s) { return "rs" + L_(l) + "_" + std::to_string(s); }
std::string rnn_tmp(size_t l, int i, int64_t n) { return "rt" + L_(l) + "_" + std::to_string(i) + "_" + std::to_string(n); }

int64_t rnn_wide(RnnStep::Cell cell) { return cell == RnnStep::Cell::rnn ? 1 : cell == RnnStep::Cell::gru ? 2 : 3; }

namespace {
// The gate regions (first gate, gates) and temporary widths each cell's operations use.
std::vector<std::pair<int64_t, int64_t>> gate_regions(RnnStep::Cell cell) {
  switch (cell) {
    case RnnStep::Cell::rnn: return {{0, 1}};
    case RnnStep::Cell::gru: return {{0, 2}, {0, 1}, {1, 1}, {2, 1}, {3, 1}};
    default: return {{0, 3}, {0, 1}, {1, 1}, {2, 1}, {3, 1}};
  }
}
}  // namespace

void rnn_dsds(const Compiled& c, size_t l, ProgramTemplate& t, const std::string& tmp_array) {
  const DenseKernel& k = c.kernels[l];
  const RnnLayout o = rnn_layout(k);
  const ArrayAt ya = y_array(c, l);
  const int64_t B = k.B;
  for (const auto& [g, n] : gate_regions(k.rnn->cell)) t.mem4d(rnn_gate(l, g, n), ya.array, ya.off + o.kw + g * o.hb, {{B, o.nb}, {n * o.hb, 1}});
  for (int64_t s = 0; s < o.S; ++s) t.mem4d(rnn_state(l, s), ya.array, ya.off + s * o.hb, {{B, o.nb}, {o.hb, 1}});
  const int64_t wide = rnn_wide(k.rnn->cell);
  for (int i = 0; i < 3; ++i) {  // (each op's temporaries: the width of its region)
    t.mem1d(rnn_tmp(l, i, 1), tmp_array + std::to_string(i), 0, B * o.hb);
    if (wide > 1) t.mem1d(rnn_tmp(l, i, wide), tmp_array + std::to_string(i), 0, B * wide * o.hb);
  }
  if (o.xs) {
    t.mem4d("rx" + L_(l), ya.array, ya.off + o.S * o.hb, {{B, o.nb}, {o.xs, 1}});
    t.mem1d("rxt" + L_(l), "xt" + L_(l), 0, B * o.xs);
  }
}

void rnn_cell_ops(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const RnnStep& r = *k.rnn;
  const int64_t G2 = rnn_wide(r.cell);
  auto g1 = [&](int64_t g) { return rnn_gate(l, g, 1); };
  auto tmp = [&](int i, int64_t n) { return rnn_tmp(l, i, n); };
  const std::string h = rnn_state(l, r.h_slot(r.v()));
  switch (r.cell) {
    case RnnStep::Cell::rnn:  // h = tanh(x W^T + h R^T + b)
      tanh_ops(t, g1(0), tmp(0, 1), tmp(1, 1), tmp(2, 1));
      t.op(Op::fmovs, {h, g1(0)}, "h");
      break;
    case RnnStep::Cell::gru:  // z, r = sigmoid; n = tanh(x W_h^T + Wb_h + r (h R_h^T + Rb_h)); h = n + z (h - n)
      sigmoid_ops(t, rnn_gate(l, 0, G2), tmp(0, G2), tmp(1, G2), tmp(2, G2));
      t.op(Op::fmuls, {g1(3), g1(1), g1(3)}, "r (h R_h^T + Rb_h)");
      t.op(Op::fadds, {g1(2), g1(2), g1(3)});
      tanh_ops(t, g1(2), tmp(0, 1), tmp(1, 1), tmp(2, 1));
      t.op(Op::fsubs, {g1(3), h, g1(2)}, "h - n");
      t.op(Op::fmuls, {g1(3), g1(0), g1(3)});
      t.op(Op::fadds, {h, g1(2), g1(3)}, "h = n + z (h - n)");
      break;
    case RnnStep::Cell::lstm: {  // i, o, f = sigmoid, g = tanh (ONNX's iofc); c = f c + i g; h = o tanh(c)
      const std::string cs = rnn_state(l, r.c_slot(r.v()));
      sigmoid_ops(t, rnn_gate(l, 0, G2), tmp(0, G2), tmp(1, G2), tmp(2, G2));
      tanh_ops(t, g1(3), tmp(0, 1), tmp(1, 1), tmp(2, 1));
      t.op(Op::fmuls, {cs, g1(2), cs}, "f c");
      t.op(Op::fmuls, {g1(3), g1(0), g1(3)}, "i g");
      t.op(Op::fadds, {cs, cs, g1(3)}, "c = f c + i g");
      t.op(Op::fmovs, {g1(3), cs});
      tanh_ops(t, g1(3), tmp(0, 1), tmp(1, 1), tmp(2, 1));
      t.op(Op::fmuls, {h, g1(1), g1(3)}, "h = o tanh(c)");
      break;
    }
  }
  if (r.x_time >= 0) t.op(Op::fmovs, {"rx" + L_(l), "rxt" + L_(l)}, "the next kernel's x (placed by the host)");
}

int64_t rnn_cell_cycles(const DenseKernel& k, const WaferConfig& cfg) {
  const RnnStep& r = *k.rnn;
  const RnnLayout o = rnn_layout(k);
  const int64_t u = k.B * o.hb;
  auto d = [&](Op op, int64_t len) { return dsd_cycles(op, len, 1, cfg); };
  const Unary sig{Unary::Kind::sigmoid, 0, 0, "Sigmoid", {}}, th{Unary::Kind::tanh, 0, 0, "Tanh", {}};
  int64_t c = r.x_time >= 0 ? d(Op::fmovs, k.B * o.xs) : 0;
  switch (r.cell) {
    case RnnStep::Cell::rnn: return c + unary_cycles(th, u, cfg) + d(Op::fmovs, u);
    case RnnStep::Cell::gru: return c + unary_cycles(sig, 2 * u, cfg) + unary_cycles(th, u, cfg) + 2 * d(Op::fmuls, u) + 2 * d(Op::fadds, u) + d(Op::fsubs, u);
    default: return c + unary_cycles(sig, 3 * u, cfg) + 2 * unary_cycles(th, u, cfg) + 3 * d(Op::fmuls, u) + d(Op::fadds, u) + d(Op::fmovs, u);
  }
}

int64_t rnn_pe_bytes(const DenseKernel& k) {
  const RnnLayout o = rnn_layout(k);
  return (3 * k.B * rnn_wide(k.rnn->cell) * o.hb + k.B * o.xs) * 4;
}

void rnn_place_input(const Compiled& c, const std::vector<float>& v, std::vector<HostArray>& out) {
  const DenseKernel& k0 = c.kernels.front();
  const RnnStep& r0 = *k0.rnn;
  const int64_t B = r0.B, T = r0.T, X = r0.X;
  auto x = [&](int64_t b, int64_t t, int64_t f) { return v[static_cast<size_t>((r0.batch_major ? b * T + t : t * B + b) * X + f)]; };
  // The first kernel's step's x at its sources (K block i: features i kb ..; zeros past X).
  const int64_t lines = k0.k_on_columns ? k0.w : k0.h;
  for (int64_t i = 0; i < lines; ++i) {
    const int64_t px = k0.k_on_columns ? i : k0.x_flow == Dir::E ? 0 : k0.w - 1, py = k0.k_on_columns ? (k0.x_flow == Dir::S ? 0 : k0.h - 1) : i;
    HostArray a{k0.x0 + px, k0.y0 + py, "xs0", std::vector<float>(static_cast<size_t>(B * k0.kb), 0.0f)};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < k0.kb && i * k0.kb + j < X; ++j) a.values[static_cast<size_t>(b * k0.kb + j)] = x(b, r0.t, i * k0.kb + j);
    out.push_back(std::move(a));
  }
  // Each later step's x at the chain ends of the kernel before it (xt<l>: [B, xs] per block).
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    if (!k.rnn || k.rnn->x_time < 0) continue;
    const RnnLayout o = rnn_layout(k);
    for (int64_t i = 0; i < (k.k_on_columns ? k.h : k.w); ++i) {
      const int64_t px = k.k_on_columns ? k.w - 1 : i, py = k.k_on_columns ? i : k.h - 1;
      HostArray a{k.x0 + px, k.y0 + py, "xt" + std::to_string(l), std::vector<float>(static_cast<size_t>(B * o.xs), 0.0f)};
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < o.xs && i * o.xs + j < X; ++j) a.values[static_cast<size_t>(b * o.xs + j)] = x(b, k.rnn->x_time, i * o.xs + j);
      out.push_back(std::move(a));
    }
  }
}

}  // namespace tessera::wafer::detail
