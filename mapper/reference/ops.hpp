#pragma once
// Private helpers shared by the reference executor's operator files (not part of the interface):
// error reporting in the "node 'x' (Op, opset n)" form, input/attribute access, axis
// normalisation, numpy broadcasting, and float <-> compute-buffer conversions.
#include <cstdint>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/tensor.hpp"
#include "mapper/reference/kernels.hpp"

namespace tessera::reference {

using OpFn = std::vector<Tensor> (*)(const OpCall&);

// Registration tables, one per operator file; kernels.cpp merges them.
struct OpEntry {
  const char* name;
  OpFn fn;
};
std::vector<OpEntry> elementwise_ops();
std::vector<OpEntry> linalg_ops();
std::vector<OpEntry> nn_ops();
std::vector<OpEntry> shape_ops();
std::vector<OpEntry> create_ops();      // ops_create.cpp
std::vector<OpEntry> math_ops();        // ops_math.cpp
std::vector<OpEntry> activation_ops();  // ops_activation.cpp
std::vector<OpEntry> reduce_ops();      // ops_reduce.cpp
std::vector<OpEntry> norm_ops();        // ops_norm.cpp
std::vector<OpEntry> index_ops();       // ops_index.cpp
std::vector<OpEntry> layout_ops();      // ops_layout.cpp
std::vector<OpEntry> resize_ops();      // ops_resize.cpp
std::vector<OpEntry> algebra_ops();     // ops_algebra.cpp
std::vector<OpEntry> rnn_ops();         // ops_rnn.cpp
std::vector<OpEntry> loss_ops();        // ops_loss.cpp
std::vector<OpEntry> signal_ops();      // ops_signal.cpp
std::vector<OpEntry> quant_ops();       // ops_quant.cpp
std::vector<OpEntry> gridsample_ops();  // ops_gridsample.cpp
std::vector<OpEntry> detect_ops();      // ops_detect.cpp
std::vector<OpEntry> canonical_ops();  // ops_canonical.cpp

namespace detail {

// "node 'fc1' (Gemm, opset 17)"
std::string where(const OpCall& c);
[[noreturn]] void fail(const OpCall& c, const std::string& message, const std::string& hint = {});

const graph::Attributes& attrs(const OpCall& c);
// Input i, which must be present.
const Tensor& in(const OpCall& c, size_t i);
// Input i or nullptr when absent (index past the end, or an empty optional slot).
const Tensor* opt_in(const OpCall& c, size_t i);
// Integer values of a 1-D (or scalar) integer tensor such as axes, shape, starts.
std::vector<int64_t> int_values(const OpCall& c, const Tensor& t, const char* what);
// The value of a one-element integer tensor (k, axis, depth given as inputs).
int64_t int_scalar(const OpCall& c, const Tensor& t, const char* what);
// The value of a one-element tensor of any numeric dtype, as fp64.
double f64_scalar(const OpCall& c, const Tensor& t, const char* what);
// Indices must be int32 or int64; InputError naming `what` otherwise.
void require_index(const OpCall& c, const Tensor& t, const char* what = "indices");
// Index k in [-dim, dim) -> [0, dim); otherwise InputError naming `what`, k and the dimension.
int64_t norm_index(const OpCall& c, int64_t k, int64_t dim, const char* what = "index");

// Axis in [-rank, rank) -> [0, rank); otherwise InputError naming the attribute.
int64_t norm_axis(const OpCall& c, int64_t axis, int64_t rank, const char* what = "axis");
// Normalises and checks for duplicates.
std::vector<int64_t> norm_axes(const OpCall& c, const std::vector<int64_t>& axes, int64_t rank,
                               const char* what = "axes");

std::vector<int64_t> strides_of(const Shape& s);  // row-major element strides
// For every element of `out` (row-major), offset + sum(idx[d] * strides[d]) into the source.
std::vector<int64_t> strided_map(const Shape& out, const std::vector<int64_t>& strides, int64_t offset);
// out[i] = src[map[i]], element by element, any dtype.
Tensor take(const Tensor& src, const Shape& out, const std::vector<int64_t>& map);
// An output shape computed from input values (sizes, repeats, pads) must be non-negative and hold at
// most 2^31 elements; InputError naming `what` otherwise (instead of a failed huge allocation).
void require_sane_shape(const OpCall& c, const Shape& s, const char* what);
// Product of dims [from, to) of s.
int64_t dims_product(const Shape& s, int64_t from, int64_t to);

// Multidirectional (numpy) broadcast of shapes; InputError naming both shapes on mismatch.
Shape broadcast_shapes(const OpCall& c, const Shape& a, const Shape& b);
// Whether `from` broadcasts unidirectionally to `to` (numpy rules, `to` unchanged).
bool broadcastable_to(const Shape& from, const Shape& to);
// For every element of `out` (row-major), the flat index of the element of `in` it reads under
// broadcasting (in must be broadcastable to out).
std::vector<int64_t> broadcast_map(const Shape& in, const Shape& out);

// Float dtype checks: floats compute in fp64 and write back in their own dtype.
bool is_floating(DType t);
void require_float(const OpCall& c, const Tensor& t, const char* what = "input");
void require_same_dtype(const OpCall& c, const Tensor& a, const Tensor& b);
// fp64 values -> a tensor of dtype `to` (any float dtype; rounds once to fp32 then to narrow formats).
Tensor from_f64(DType to, Shape shape, const std::vector<double>& v);
// int64 values -> a tensor of integer/bool dtype `to` (wrapping like a C cast).
Tensor from_i64_as(DType to, Shape shape, const std::vector<int64_t>& v);
// fp64 values -> a tensor of any dtype: floats as from_f64, integers rounded to nearest.
Tensor to_dtype(DType to, const Shape& shape, const std::vector<double>& v);

}  // namespace detail
}  // namespace tessera::reference
