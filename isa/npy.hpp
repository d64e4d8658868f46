#pragma once
// NumPy .npy files, format versions 1.0, 2.0 and 3.0, little-endian, C order.
// Supported dtypes: <f4 <f8 <f2 <i8 <i4 <i2 |i1 |u1 |b1. bf16/cbf16/fp8 tensors are written widened
// to <f4 (exactly), since NumPy has no such dtypes.
#include <string>

#include "isa/tensor.hpp"

namespace tessera {

// Throws InputError naming the file and the header field at fault.
Tensor read_npy(const std::string& path);

// What a .npy holds, from its header alone (the data's length checked against the shape): for
// checking inputs before anything big is read or allocated.
struct NpyInfo {
  DType dtype;
  Shape shape;
  size_t data_offset = 0;
};
NpyInfo read_npy_info(const std::string& path);
// Writes atomically (temporary file + rename).
void write_npy(const std::string& path, const Tensor& t);

std::string npy_encode(const Tensor& t);  // whole file contents, version 1.0 (2.0 if the header needs it)
Tensor npy_decode(const std::string& bytes, const std::string& name_for_errors);

}  // namespace tessera
