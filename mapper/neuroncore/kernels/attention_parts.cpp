// The fused attention kernels' shared pieces (attention_parts.hpp).
#include "mapper/neuroncore/kernels/attention_parts.hpp"

#include <algorithm>
#include <cmath>

namespace tessera::neuroncore::attn {

using graph::Strided;

Operands operands(Ctx& x, const AttentionPlan& a) {
  Operands o;
  const std::string& qin = a.score_ep.operand[0].empty() ? a.scores->inputs[0] : a.score_ep.operand[0];
  const std::string& kin = a.score_ep.operand[1].empty() ? a.scores->inputs[1] : a.score_ep.operand[1];
  const std::string& vin = a.context_ep.operand[1].empty() ? a.context->inputs[1] : a.context_ep.operand[1];
  o.q = x.st.ref(qin);
  o.kt = x.st.ref(kin);
  o.v = x.st.ref(vin);
  o.o = x.st.ref(a.context_ep.out);
  const Shape& os = o.o.shape();
  o.batch.assign(os.begin(), os.end() - 2);
  o.Sq = os[os.size() - 2];
  o.dv = os.back();
  o.dh = o.q.shape().back();
  o.Sk = o.kt.shape().back();
  auto with_batch = [&](const Strided& v, int64_t r, int64_t c) {
    Shape s = o.batch;
    s.push_back(r);
    s.push_back(c);
    return graph::broadcast_to(v, s);
  };
  o.qv = with_batch(o.q.view, o.Sq, o.dh);
  o.ktv = with_batch(o.kt.view, o.dh, o.Sk);
  o.vv = with_batch(o.v.view, o.Sk, o.dv);
  o.ov = o.o.view;
  if (a.score_ep.bias) o.mask = with_batch(a.score_ep.bias->view, o.Sq, o.Sk);
  if (a.cond) o.cond = with_batch(a.cond->view, o.Sq, o.Sk);
  o.nb = shape_numel(o.batch);
  return o;
}

double q_scale(const Operands& o, const AttentionPlan& a) {
  const double sc = a.score_ep.scale;
  const size_t r = o.qv.strides.size();  // Q^T's (k, f) = Q(f, k): sk Q's column stride, sf its row stride
  const bool transposed = loads_transposed(o.qv.strides[r - 1], o.qv.strides[r - 2], o.Sq);
  int e = 0;
  const bool pow2 = std::frexp(sc, &e) == 0.5;
  return transposed && (pow2 || o.q.dtype == DType::f32) ? sc : 1.0;
}

void store_out(Ctx& x, const Operands& o, int64_t b, int64_t q0, int32_t sq, const AccessPattern& out) {
  const Strided ov = batch_slice(o.ov, b);
  const int32_t dv = static_cast<int32_t>(o.dv);
  x.em.dma(hbm_ap(o.o, ov.offset + q0 * ov.strides[0], sq, ov.strides[0], {{dv, static_cast<int32_t>(ov.strides[1])}}), out, Emitter::DmaClass::spread_store);
}

AccessPattern Loader::psum_at(int64_t b, int64_t off, int32_t parts, int32_t free) const {
  return on_chip(Space::psum, DType::f32, 0, parts, (b % x.banks()) * bank + off, {{free, 1}});
}

void Loader::load_kf(const TensorRef& r, int64_t elem, int64_t K, int64_t sk, int64_t F, int64_t sf, int64_t dst, int64_t stage, double scale) {
  const DType dt = r.dtype;
  if (!loads_transposed(sk, sf, F)) {
    const AccessPattern to = on_chip(Space::sbuf, dt, 0, static_cast<int32_t>(K), dst, {{static_cast<int32_t>(F), 1}});
    x.em.dma(to, hbm_ap(r, elem, static_cast<int32_t>(K), sk, {{static_cast<int32_t>(F), static_cast<int32_t>(sf)}}), Emitter::DmaClass::spread);
    // (a last query tile of one row loads directly although Q is transposed elsewhere)
    if (scale != 1.0) x.tensor_scalar(to, to, Alu::multiply, scale);
    return;
  }
  for (int64_t j = 0; j < F; j += 128, ++stages) {
    const int32_t fs = static_cast<int32_t>(std::min<int64_t>(128, F - j));
    const AccessPattern staged = on_chip(Space::sbuf, dt, 0, fs, stage + (stages % 4) * 128 * r.es(), {{static_cast<int32_t>(K), 1}});
    x.em.dma(staged, hbm_ap(r, elem + j * sf, fs, sf, {{static_cast<int32_t>(K), static_cast<int32_t>(sk)}}), Emitter::DmaClass::spread);
    const AccessPattern pt = psum_at(8 - banks + (stages / 4) % banks, (stages % 4) * 512, static_cast<int32_t>(K), fs);
    x.transpose(pt, staged);
    const AccessPattern to = on_chip(Space::sbuf, dt, 0, static_cast<int32_t>(K), dst + j * r.es(), {{fs, 1}});
    if (scale != 1.0) x.tensor_scalar(to, pt, Alu::multiply, scale);
    else x.copy(to, pt);
  }
}

}  // namespace tessera::neuroncore::attn
