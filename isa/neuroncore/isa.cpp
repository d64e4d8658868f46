#include "isa/neuroncore/isa.hpp"

#include <stdexcept>

namespace tessera::neuroncore {

std::string_view lane_name(Lane l) {
  static constexpr std::string_view names[] = {"tensor", "vector", "scalar", "gpsimd", "dma0", "dma1", "sync", "control"};
  return names[static_cast<size_t>(l)];
}

std::string_view space_name(Space s) {
  static constexpr std::string_view names[] = {"sb", "ps", "hbm"};
  return names[static_cast<size_t>(s)];
}

std::string_view alu_name(Alu a) {
  static constexpr std::string_view names[] = {"add", "subtract", "multiply", "divide", "max", "min", "pow",
                                               "bypass", "is_equal", "is_gt", "is_ge", "is_lt", "is_le"};
  return names[static_cast<size_t>(a)];
}

std::string_view func_name(Func f) {
  static constexpr std::string_view names[] = {"identity", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "exp",
                                               "log", "sqrt", "rsqrt", "reciprocal", "square", "silu", "erf", "softplus", "mish", "abs"};
  return names[static_cast<size_t>(f)];
}

namespace {
struct OpRow {
  Op op;
  std::string_view name;
  Lane lane;
};
constexpr OpRow kOps[] = {
    {Op::nop, "nop", Lane::control},
    {Op::load_stationary, "load_stationary", Lane::tensor},
    {Op::multiply_moving, "multiply_moving", Lane::tensor},
    {Op::transpose, "transpose", Lane::tensor},
    {Op::tensor_tensor, "tensor_tensor", Lane::vector},
    {Op::tensor_scalar, "tensor_scalar", Lane::vector},
    {Op::tensor_reduce, "tensor_reduce", Lane::vector},
    {Op::tensor_copy, "tensor_copy", Lane::vector},
    {Op::transpose32, "transpose32", Lane::vector},
    {Op::bn_stats, "bn_stats", Lane::vector},
    {Op::bn_aggr, "bn_aggr", Lane::vector},
    {Op::memset, "memset", Lane::vector},
    {Op::select, "select", Lane::vector},
    {Op::activation, "activation", Lane::scalar},
    {Op::iota, "iota", Lane::gpsimd},
    {Op::affine_select, "affine_select", Lane::gpsimd},
    {Op::gather, "gather", Lane::gpsimd},
    {Op::partition_all_reduce, "partition_all_reduce", Lane::gpsimd},
    {Op::dma, "dma", Lane::dma0},
    {Op::sem_wait, "sem_wait", Lane::sync},
    {Op::sem_signal, "sem_signal", Lane::sync},
    {Op::step_marker, "step_marker", Lane::sync},
    {Op::set_reg, "set_reg", Lane::control},
    {Op::add_reg, "add_reg", Lane::control},
    {Op::dec_branch_nz, "dec_branch_nz", Lane::control},
    {Op::branch_nz, "branch_nz", Lane::control},
    {Op::jump, "jump", Lane::control},
    {Op::halt, "halt", Lane::control},
};
}  // namespace

std::string_view op_name(Op op) { return kOps[static_cast<size_t>(op)].name; }
Lane op_lane(Op op) { return kOps[static_cast<size_t>(op)].lane; }

int64_t AccessPattern::free_elems() const {
  int64_t n = 1;
  for (int i = 0; i < ndims; ++i) n *= dims[static_cast<size_t>(i)].num;
  return n;
}

std::pair<int64_t, int64_t> AccessPattern::free_byte_range() const {
  // Strides may be negative in principle; tessera's assembler only accepts non-negative ones.
  int64_t hi = 0;
  for (int i = 0; i < ndims; ++i) {
    const auto& d = dims[static_cast<size_t>(i)];
    if (d.num > 0) hi += static_cast<int64_t>(d.num - 1) * d.stride;
  }
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  return {offset, offset + (hi + 1) * es};
}

Footprint footprint(const AccessPattern& ap, int64_t base) {
  const auto [lo, hi] = ap.free_byte_range();
  const int64_t extent = hi - lo;
  if (ap.space == Space::hbm) {
    const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
    Footprint f{ap.space, 0, 1, base, base + static_cast<int64_t>(ap.parts - 1) * ap.part_stride * es + extent};
    if (ap.parts > 1 && ap.part_stride > 0) {
      f.stride = ap.part_stride * es;
      f.extent = extent;
      f.rows = ap.parts;
    }
    return f;
  }
  return {ap.space, ap.part_start, ap.part_start + ap.parts, base, base + extent};
}

bool AccessPattern::contiguous() const {
  int64_t expect = 1;
  for (int i = ndims - 1; i >= 0; --i) {
    const auto& d = dims[static_cast<size_t>(i)];
    if (d.num != 1 && d.stride != expect) return false;
    expect *= d.num;
  }
  return true;
}

const HbmTensor* Program::find_hbm(std::string_view name) const {
  for (const auto& t : hbm)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace tessera::neuroncore
