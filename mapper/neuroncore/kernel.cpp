#include "mapper/neuroncore/kernel.hpp"

#include "isa/error.hpp"

namespace tessera::neuroncore {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t Sbuf::take(int64_t bytes) {
  const int64_t off = next;
  next += (bytes + 63) / 64 * 64;
  if (next > limit)
    throw InputError("kernel '" + kernel + "'", "needs " + std::to_string(next - base) + " bytes of SBUF per partition; it has " +
                                                 std::to_string(limit - base),
                     hint);
  return off;
}

int64_t Ctx::tile_free(const std::string& kernel, int64_t fixed) const {
  const int64_t bank = cfg.psum_bank_bytes(), cap = std::min<int64_t>(cfg.max_moving_free, bank / 4);
  const int64_t want = opt.tile_n > 0 ? opt.tile_n : fixed;
  if (want <= 0) return std::max<int64_t>(1, std::min<int64_t>(512, cap));
  if (want * 4 > bank)
    throw InputError("kernel '" + kernel + "'",
                     "a " + std::to_string(want) + "-wide output tile (" + (opt.tile_n > 0 ? "mapping.tile_n" : "the schedule's tile") + ") needs " +
                         std::to_string(want * 4) + " bytes of a PSUM bank for its fp32 sums; a bank has " + std::to_string(bank) +
                         " (psum.partition_bytes " + std::to_string(cfg.psum_partition_bytes) + " / psum.banks " + std::to_string(cfg.psum_banks) + ")",
                     "use a tile of at most " + std::to_string(std::max<int64_t>(1, cap)) + " (mapping.tile_n), or raise psum.partition_bytes");
  if (want > cfg.max_moving_free)
    throw InputError("kernel '" + kernel + "'",
                     "a " + std::to_string(want) + "-wide output tile exceeds tensor.max_moving_free " + std::to_string(cfg.max_moving_free),
                     "use a tile of at most " + std::to_string(cap) + " (mapping.tile_n)");
  return want;
}

void Ctx::begin(const std::string& name) { em.begin_kernel(name); }

Sbuf Ctx::sbuf(const std::string& kernel, int64_t lo, int64_t hi) const {
  Sbuf s;
  s.next = s.base = lo;
  s.limit = hi < 0 ? cfg.sbuf_partition_bytes - sbuf_reserved : hi;
  s.kernel = kernel;
  return s;
}

AccessPattern Ctx::psum(int64_t i, int32_t parts, int32_t free) const {
  return on_chip(Space::psum, DType::f32, 0, parts, (i % banks()) * cfg.psum_bank_bytes(), {{free, 1}});
}

void Ctx::tensor_tensor(Alu alu, const AccessPattern& dst, const AccessPattern& a, const AccessPattern& b) {
  Instr in;
  in.op = Op::tensor_tensor;
  in.alu = alu;
  in.dst = dst;
  in.src0 = a;
  in.src1 = b;
  em.emit(in, Lane::vector);
}

void Ctx::tensor_scalar(const AccessPattern& dst, const AccessPattern& src, Alu alu0, double imm0, Alu alu1, double imm1) {
  tensor_scalar_with(dst, src, alu0, {}, imm0, alu1, {}, imm1);
}

void Ctx::tensor_scalar(const AccessPattern& dst, const AccessPattern& src, Alu alu0, const AccessPattern& op0, Alu alu1, const AccessPattern& op1) {
  tensor_scalar_with(dst, src, alu0, op0, 0.0, alu1, op1, 0.0);
}

void Ctx::tensor_scalar_with(const AccessPattern& dst, const AccessPattern& src, Alu alu0, const AccessPattern& op0, double imm0, Alu alu1,
                             const AccessPattern& op1, double imm1) {
  Instr in;
  in.op = Op::tensor_scalar;
  in.alu = alu0;
  in.imm[0] = imm0;
  in.alu1 = alu1;
  in.imm[1] = imm1;
  in.dst = dst;
  in.src0 = src;
  in.src1 = op0;  // per-partition operands (absent: the immediates)
  in.aux = op1;
  em.emit(in, Lane::vector);
}

void Ctx::row_stats(const AccessPattern& row, int64_t small, double eps) {
  chunk_stats(row, small);
  aggregate_stats(row.parts, small, 1, small, eps);
}

void Ctx::chunk_stats(const AccessPattern& chunk, int64_t record) {
  Instr st;
  st.op = Op::bn_stats;
  st.dst = on_chip(Space::sbuf, DType::f32, 0, chunk.parts, record, {{6, 1}});
  st.src0 = chunk;
  em.emit(st, Lane::vector);
}

void Ctx::aggregate_stats(int32_t parts, int64_t records, int64_t chunks, int64_t small, double eps) {
  Instr ag;
  ag.op = Op::bn_aggr;
  ag.dst = on_chip(Space::sbuf, DType::f32, 0, parts, small + 32, {{2, 1}});  // mean, variance
  ag.src0 = on_chip(Space::sbuf, DType::f32, 0, parts, records, {{static_cast<int32_t>(6 * chunks), 1}});
  em.emit(ag, Lane::vector);
  activation(on_chip(Space::sbuf, DType::f32, 0, parts, small + 40, {{1, 1}}), on_chip(Space::sbuf, DType::f32, 0, parts, small + 36, {{1, 1}}),
             Func::rsqrt, 1.0, {}, eps);
}

void Ctx::activation(const AccessPattern& dst, const AccessPattern& src, Func func, double scale, const AccessPattern& bias, double imm_bias,
                     const AccessPattern& aux) {
  Instr in;
  in.op = Op::activation;
  in.func = func;
  in.imm[0] = scale;
  in.imm[1] = imm_bias;
  in.dst = dst;
  in.src0 = src;
  if (bias.present()) in.src1 = bias;
  if (aux.present()) in.aux = aux;
  em.emit(in, Lane::scalar);
}

void Ctx::copy(const AccessPattern& dst, const AccessPattern& src) {
  Instr in;
  in.op = Op::tensor_copy;
  in.dst = dst;
  in.src0 = src;
  em.emit(in, Lane::vector);
}

void Ctx::memset(const AccessPattern& dst, double value) {
  Instr in;
  in.op = Op::memset;
  in.imm[0] = value;
  in.dst = dst;
  em.emit(in, Lane::vector);
}

void Ctx::reduce(const AccessPattern& dst, const AccessPattern& src, Alu alu, bool negate) {
  Instr in;
  in.op = Op::tensor_reduce;
  in.alu = alu;
  in.negate = negate;
  in.dst = dst;
  in.src0 = src;
  em.emit(in, Lane::vector);
}

void Ctx::matmul_step(const AccessPattern& ps, const AccessPattern& stat, const AccessPattern& mov, bool start, bool stop) {
  Instr ls;
  ls.op = Op::load_stationary;
  ls.src0 = stat;
  em.emit(ls, Lane::tensor);
  Instr mm;
  mm.op = Op::multiply_moving;
  mm.dst = ps;
  mm.src0 = mov;
  mm.start = start;
  mm.stop = stop;
  em.emit(mm, Lane::tensor);
}

void Ctx::transpose(const AccessPattern& psum_dst, const AccessPattern& src) {
  Instr tr;
  tr.op = Op::transpose;
  tr.dst = psum_dst;
  tr.src0 = src;
  em.emit(tr, Lane::tensor);
}

void Ctx::replicate_row(DType dt, int64_t off, int64_t count, int64_t ones) {
  const int32_t P = static_cast<int32_t>(cfg.partitions);
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  const AccessPattern one_row = on_chip(Space::sbuf, dt, 0, 1, ones, {{P, 1}});
  memset(one_row, 1.0);
  const int64_t chunk = cfg.psum_bank_bytes() / 4;  // fp32 accumulators per bank
  for (int64_t n0 = 0, i = 0; n0 < count; n0 += chunk, ++i) {
    const int32_t nn = static_cast<int32_t>(std::min(chunk, count - n0));
    const AccessPattern ps = psum(i % 2, P, nn);
    matmul_step(ps, one_row, on_chip(Space::sbuf, dt, 0, 1, off + n0 * es, {{nn, 1}}), true, true);
    // Evacuated by the scalar engine (an exact identity activation), which kernels starting with a
    // replication have idle; the vector engine is left to the kernel's first steps.
    activation(on_chip(Space::sbuf, dt, 0, P, off + n0 * es, {{nn, 1}}), ps, Func::identity);
  }
  used_psum();
}

bool unary_func(const std::string& op, const graph::Node& n, Func& f) {
  static const std::pair<const char*, Func> table[] = {
      {"Relu", Func::relu}, {"Sigmoid", Func::sigmoid}, {"Tanh", Func::tanh}, {"Exp", Func::exp},         {"Log", Func::log},
      {"Sqrt", Func::sqrt}, {"Reciprocal", Func::reciprocal}, {"Swish", Func::silu}, {"Softplus", Func::softplus},
      {"Mish", Func::mish}, {"Erf", Func::erf}};
  if (op == "Gelu") {
    f = n.attrs.get_string("approximate", "none") == "tanh" ? Func::gelu_tanh : Func::gelu;
    return true;
  }
  if (op == "Swish" && n.attrs.get_float("alpha", 1.0) != 1.0) return false;
  for (const auto& [name, fn] : table)
    if (op == name) {
      f = fn;
      return true;
    }
  return false;
}

}  // namespace tessera::neuroncore
