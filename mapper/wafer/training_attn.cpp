// Self-attention's backward pass at the chain ends of the kernel that computes V and the attention
// (training.cpp; docs/wafer-compiler.md "Training"). Q, K and V are three dense kernels of the graph
// input, one after another, their chain ends the same PEs; each chain end holds whole heads. The
// forward pass kept P per (sample, head) (aP<l>); the output projection's input gradient dO arrives
// reduced along its x lines into dat<l> (the attention output's place). Per (sample, head), with
// S keys and dh features (2-D walks that broadcast one operand, as the forward pass's):
//   dV[t, :] = sum_s P[s, t] dO[s, :]                       (S products of [S, dh])
//   dP[s, t] = sum_j dO[s, j] V[t, j]                        (dh products of [S, S])
//   dS       = P (dP - rowsum(dP P)) scale                   (the softmax's and the scale's)
//   dQ[s, :] = sum_t dS[s, t] K[t, :],  dK[t, :] = sum_s dS[s, t] Q[s, :]
// into the dy arrays of V (this kernel), Q and K; then each of the three runs its bias gradient,
// multicast and weight gradient as a dense layer (none needs an input gradient: they read the graph
// input), V first, K when V's gradient blocks have left, then Q.
#include <string>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

bool has_input_grad(const Compiled& c, size_t l) { return c.kernels[l].src >= 0; }

bool attn_input_kernel(const Compiled& c, size_t l) {
  for (const auto& k : c.kernels)
    if (k.attn && (k.attn_q == static_cast<int64_t>(l) || k.attn_k == static_cast<int64_t>(l))) return true;
  return false;
}

void check_attention_training(const Compiled& c, size_t l, const char* hint) {
  const DenseKernel& k = c.kernels[l];
  const std::string where = "kernel '" + k.name + "'";
  if (k.qkv || k.attn_qrows || k.reads_input2)
    throw InputError(where, "fused Q, K and V, or cross-attention, are not trained on the wafer in this build (self-attention is)", hint);
  if (!k.attn_q_cos.empty() || !k.attn_k_cos.empty()) throw InputError(where, "rotary embeddings are not trained on the wafer in this build", hint);
  const int64_t q = k.attn_q, kk = k.attn_k;
  if (q != static_cast<int64_t>(l) - 2 || kk != static_cast<int64_t>(l) - 1 || k.src >= 0 || c.kernels[static_cast<size_t>(q)].src >= 0 || c.kernels[static_cast<size_t>(kk)].src >= 0)
    throw InputError(where, "attention is trained on the wafer when its Q, K and V are the three kernels before the output projection, all of the graph input, in this build", hint);
  for (const int64_t m : {q, kk, static_cast<int64_t>(l)})
    if (c.kernels[static_cast<size_t>(m)].activated())
      throw InputError("kernel '" + c.kernels[static_cast<size_t>(m)].name + "'", "a function on Q, K or V is not trained on the wafer in this build", hint);
}

// After placement: whole heads on each chain-end PE, every query in one block of scores.
void check_attention_placed(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  if (!k.attn) return;
  const std::string where = "kernel '" + k.name + "'";
  if (k.feat_nb() % k.dh != 0 && k.dh % k.feat_nb() != 0)
    throw InputError("/mapping/wafer_rect", where + ": the chain-end PEs hold " + std::to_string(k.feat_nb()) + " features each, heads have " + std::to_string(k.dh) + " (neither whole heads nor whole parts of one)",
                     "give a rectangle whose side along the features makes the features per PE a multiple or a divisor of the head's");
  if (k.attn_queries() / k.attn_rows() > 1)
    throw InputError(where, "scores in query blocks (more keys per sample than one block of scores holds: " + std::to_string(k.attn_keys()) + ") are not trained on the wafer in this build",
                     "train it on target.kind neuroncore or reference");
}

namespace {
// (a head split over a group of g chain-end PEs: each holds fb of its features, "one head" of dh = fb)
struct Geo {
  int64_t S, Sq, dh, hp, rs, nb, fb, pairs, g;
};
Geo geo(const DenseKernel& k) {
  const int64_t fb = k.feat_nb(), g = k.attn_group(), dh = g > 1 ? fb : k.dh, hp = g > 1 ? 1 : fb / k.dh;
  return {k.attn_keys(), k.attn_rows(), dh, hp, k.attn_rstep(), k.nb, fb, k.attn_samples * hp, g};
}
}  // namespace

// The forward pass's P per (sample, head) (layer_program, training).
void attention_keep_arrays(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  const Geo g = geo(k);
  const std::string L = std::to_string(l);
  t.data("aP" + L, Elem::f32, g.pairs * g.Sq * g.S, {}, -1, -1, "P of every (sample, head): the backward pass");
  for (int64_t hb = 0; hb < g.pairs; ++hb) t.mem1d("aPh" + L + "_" + std::to_string(hb), "aP" + L, hb * g.Sq * g.S, g.Sq * g.S);
}

void attention_backward_arrays(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  if (!k.attn) return;
  const Geo g = geo(k);
  const std::string L = std::to_string(l), Qd = "dy" + std::to_string(k.attn_q), Kd = "dy" + std::to_string(k.attn_k);
  const ArrayAt qy = y_array(c, static_cast<size_t>(k.attn_q)), ky = y_array(c, static_cast<size_t>(k.attn_k)), ya = y_array(c, l);
  t.data("dat" + L, Elem::f32, k.rows_out() * g.fb, {}, -1, -1, "dO: the attention output's gradient (the output projection's input gradient)");
  t.mem1d("datm" + L, "dat" + L);
  t.mem4d("asb" + L, "as" + L, 0, {{g.Sq, 1}, {g.S, 0}});
  for (int64_t s = 0; s < g.S; ++s) {
    t.mem1d("btc" + L + "_" + std::to_string(s), "atm" + L, s, g.Sq, g.S);                // column s of dP P
    t.mem4d("bks" + L + "_" + std::to_string(s), (g.g > 1 ? "atm" : "asc") + L, s * g.S, {{g.S, 1}, {g.dh, 0}});  // row s of dS (a split head: as broadcast), over the features
  }
  for (int64_t hb = 0; hb < g.pairs; ++hb) {
    const int64_t hh = hb % g.hp, r0 = k.attn_row0(hb / g.hp), q0 = k.attn_qrow0(hb / g.hp);
    const std::string H = L + "_" + std::to_string(hb);
    for (int64_t s = 0; s < g.S; ++s) {
      const std::string S_ = H + "_" + std::to_string(s);
      t.mem4d("bvp" + S_, "aP" + L, hb * g.Sq * g.S + s * g.S, {{g.S, 1}, {g.dh, 0}});             // P[s, :] over the features
      t.mem4d("bvo" + S_, "dat" + L, (q0 + s * g.rs) * g.fb + hh * g.dh, {{g.S, 0}, {g.dh, 1}});  // dO[s, :] over the keys
      t.mem4d("bqk" + S_, ky.array, ky.off + (r0 + s * g.rs) * g.nb + hh * g.dh, {{g.Sq, 0}, {g.dh, 1}});  // K[s, :] over the queries
      t.mem4d("bkq" + S_, qy.array, qy.off + (q0 + s * g.rs) * g.nb + hh * g.dh, {{g.S, 0}, {g.dh, 1}});   // Q[s, :] over the keys
    }
    for (int64_t j = 0; j < g.dh; ++j) {
      const std::string J = H + "_" + std::to_string(j);
      t.mem4d("bpo" + J, "dat" + L, q0 * g.fb + hh * g.dh + j, {{g.Sq, g.rs * g.fb}, {g.S, 0}});            // dO[:, j] over the keys
      t.mem4d("bpv" + J, ya.array, ya.off + r0 * g.nb + hh * g.dh + j, {{g.Sq, 0}, {g.S, g.rs * g.nb}});  // V[:, j] over the queries
    }
    t.mem4d("bvd" + H, "dy" + L, r0 * g.nb + hh * g.dh, {{g.S, g.rs * g.nb}, {g.dh, 1}});
    t.mem4d("bqd" + H, Qd, q0 * g.nb + hh * g.dh, {{g.Sq, g.rs * g.nb}, {g.dh, 1}});
    t.mem4d("bkd" + H, Kd, r0 * g.nb + hh * g.dh, {{g.S, g.rs * g.nb}, {g.dh, 1}});
  }
}

void attention_backward_ops(const Compiled& c, size_t l, ProgramTemplate& t) {
  const DenseKernel& k = c.kernels[l];
  if (!k.attn) return;
  const Geo g = geo(k);
  const std::string L = std::to_string(l), sc = "ascm" + L, tm = "atmm" + L, to = "atom" + L;
  auto sum_of = [&](const std::string& dst, int64_t n, auto a, auto b) {  // dst = sum_i a(i) b(i)
    t.op(Op::fmuls, {dst, a(0), b(0)});
    for (int64_t i = 1; i < n; ++i) {
      t.op(Op::fmuls, {dst == sc ? tm : to, a(i), b(i)});
      t.op(Op::fadds, {dst, dst, dst == sc ? tm : to});
    }
  };
  for (int64_t hb = 0; hb < g.pairs; ++hb) {
    const std::string H = L + "_" + std::to_string(hb), P = "aPh" + H;
    auto at = [&](const std::string& n) { return [n](int64_t i) { return n + "_" + std::to_string(i); }; };
    t.comment("attention backward, (sample, head) " + std::to_string(hb));
    sum_of("bvd" + H, g.S, at("bvp" + H), at("bvo" + H));  // dV
    sum_of(sc, g.dh, at("bpo" + H), at("bpv" + H));        // dP (a split head: this PE's part, summed along the group to its last PE)
    if (g.g > 1) {
      chain_step(t, "agfirst" + L, "aglast" + L, sc, "aton" + L, "afr" + L, sc);
      t.if_("aglast" + L);
    }
    t.op(Op::fmuls, {tm, sc, P});
    t.op(Op::fmovs, {"asm" + L, "btc" + L + "_0"});
    for (int64_t s = 1; s < g.S; ++s) t.op(Op::fadds, {"asm" + L, "asm" + L, "btc" + L + "_" + std::to_string(s)});
    t.op(Op::fsubs, {sc, sc, "asb" + L});
    t.op(Op::fmuls, {sc, sc, P});
    t.op(Op::fmuls, {sc, sc, fnum(k.attn_scale)}, "dS");
    if (g.g > 1) {  // dS back to the group (the last PE's own copy through its ramp), into atm
      t.op_async(Op::fmovs, {"abo" + L, sc});
      t.endif();
      t.op(Op::fmovs, {tm, "abi" + L});
    }
    sum_of("bqd" + H, g.S, at("ap" + L), at("bqk" + H));  // dQ
    sum_of("bkd" + H, g.Sq, at("bks" + L), at("bkq" + H));  // dK
  }
}

int64_t attention_backward_cycles(const Compiled& c, size_t l, const WaferConfig& cfg) {
  const DenseKernel& k = c.kernels[l];
  if (!k.attn) return 0;
  const Geo g = geo(k);
  auto d = [&](Op op, int64_t len, int64_t stride = 1) { return dsd_cycles(op, len, stride, cfg); };
  const int64_t SS = g.Sq * g.S, Sd = g.S * g.dh;
  auto sum_of = [&](int64_t n, int64_t len) { return n * d(Op::fmuls, len) + (n - 1) * d(Op::fadds, len); };
  int64_t per = sum_of(g.S, Sd) + sum_of(g.dh, SS) + d(Op::fmuls, SS) + d(Op::fmovs, g.Sq, g.S) + (g.S - 1) * d(Op::fadds, g.Sq, g.S) + 3 * d(Op::fmuls, SS) +
                sum_of(g.S, g.Sq * g.dh) + sum_of(g.Sq, Sd);
  if (g.g > 1)  // a split head: dP's partial sums along the group (setup, a hop a position, SS values), dS broadcast back
    per += 2 * (cfg.setup_cycles + (g.g - 1) * (2 + cfg.hop_latency) + SS) + 2;
  return g.pairs * per;
}

int64_t attention_training_bytes(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  if (!k.attn) return 0;
  const Geo g = geo(k);
  return (g.pairs * g.Sq * g.S + k.rows_out() * g.fb) * 4;
}

}  // namespace tessera::wafer::detail
