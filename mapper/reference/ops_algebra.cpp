// Einsum and Det. Einsum is numpy's einsum over any number of operands -- explicit ("ij,jk->ik")
// or implicit output (the labels used once, in alphabetical order), repeated labels (diagonals),
// and "..." for broadcast dimensions; products are summed in fp64 (int64 for integers) over every
// label not in the output, directly from the operands' strides. Det factorises each matrix by LU
// with partial pivoting in fp64.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

// Labels are the letters; the broadcast dimensions of "..." get labels 0, 1, ... (non-letters).
using Labels = std::vector<int>;

std::vector<std::string> split_terms(const std::string& s) {
  std::vector<std::string> terms(1);
  for (char ch : s) {
    if (ch == ',')
      terms.emplace_back();
    else if (ch != ' ')
      terms.back() += ch;
  }
  return terms;
}

// Parses one term against an operand of rank `rank`; `ell` is the number of broadcast dims.
Labels parse_term(const OpCall& c, const std::string& term, int64_t rank, int64_t& ell, bool is_output) {
  const auto dots = term.find("...");
  const std::string letters = dots == std::string::npos ? term : term.substr(0, dots) + term.substr(dots + 3);
  for (char ch : letters)
    if (!std::isalpha(static_cast<unsigned char>(ch)))
      fail(c, "equation term '" + term + "' has the character '" + std::string(1, ch) + "'",
           "labels are letters, and '...'");
  if (!is_output) {
    const int64_t n = rank - static_cast<int64_t>(letters.size());
    if (n < 0 || (n > 0 && dots == std::string::npos))
      fail(c, "equation term '" + term + "' does not match an operand of rank " + std::to_string(rank));
    ell = dots == std::string::npos ? 0 : n;
  }
  Labels r;
  auto add_letters = [&](const std::string& part) {
    for (char ch : part) r.push_back(static_cast<unsigned char>(ch));
  };
  if (dots == std::string::npos) {
    add_letters(term);
    return r;
  }
  add_letters(term.substr(0, dots));
  for (int64_t i = 0; i < ell; ++i) r.push_back(static_cast<int>(i));
  add_letters(term.substr(dots + 3));
  return r;
}

std::vector<Tensor> op_einsum(const OpCall& c) {
  if (!attrs(c).has("equation")) fail(c, "required attribute 'equation' is missing");
  const std::string eq = attrs(c).get_string("equation", "");
  const auto arrow = eq.find("->");
  const auto terms = split_terms(arrow == std::string::npos ? eq : eq.substr(0, arrow));
  if (terms.size() != c.inputs.size())
    fail(c, "equation '" + eq + "' has " + std::to_string(terms.size()) + " operands but the node has " +
                std::to_string(c.inputs.size()) + " inputs");
  const Tensor& first = in(c, 0);
  // Labels and sizes per operand; the broadcast dims align from the right across operands.
  int64_t ell_max = 0;
  std::vector<Labels> labels;
  std::vector<int64_t> ells;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Tensor& t = in(c, i);
    require_same_dtype(c, first, t);
    int64_t ell = 0;
    labels.push_back(parse_term(c, terms[i], t.rank(), ell, false));
    ells.push_back(ell);
    ell_max = std::max(ell_max, ell);
  }
  std::map<int, int64_t> size;
  std::map<int, int> count;
  for (size_t i = 0; i < labels.size(); ++i) {
    const Shape& s = in(c, i).shape();
    for (size_t d = 0; d < labels[i].size(); ++d) {
      int lab = labels[i][d];
      if (lab < 'A') lab += static_cast<int>(ell_max - ells[i]);  // right-align broadcast dims
      labels[i][d] = lab;
      auto [it, fresh] = size.emplace(lab, s[d]);
      if (!fresh && it->second != s[d]) {
        if (lab < 'A' && (it->second == 1 || s[d] == 1))
          it->second = std::max(it->second, s[d]);
        else
          fail(c, "label '" + (lab < 'A' ? std::string("...") : std::string(1, static_cast<char>(lab))) +
                      "' has sizes " + std::to_string(it->second) + " and " + std::to_string(s[d]) + " in equation '" +
                      eq + "'");
      }
      ++count[lab];
    }
  }
  Labels out;
  if (arrow != std::string::npos) {
    std::string rhs;
    for (char ch : eq.substr(arrow + 2))
      if (ch != ' ') rhs += ch;
    out = parse_term(c, rhs, 0, ell_max, true);
    for (size_t i = 0; i < out.size(); ++i)
      if (std::find(out.begin() + static_cast<std::ptrdiff_t>(i) + 1, out.end(), out[i]) != out.end())
        fail(c, "output term '" + rhs + "' of equation '" + eq + "' repeats a label");
    for (int lab : out)
      if (!size.count(lab))
        fail(c, "output label '" + std::string(1, static_cast<char>(lab)) + "' of equation '" + eq +
                    "' is not in any operand");
  } else {
    for (int64_t i = 0; i < ell_max; ++i) out.push_back(static_cast<int>(i));
    for (const auto& [lab, n] : count)
      if (lab >= 'A' && n == 1) out.push_back(lab);
  }
  // Every label: output ones first, then the summed ones.
  Labels all = out;
  for (const auto& [lab, n] : size)
    if (std::find(out.begin(), out.end(), lab) == out.end()) all.push_back(lab);
  const size_t L = all.size();
  Shape dims(L), out_shape;
  for (size_t k = 0; k < L; ++k) dims[k] = size[all[k]];
  for (size_t k = 0; k < out.size(); ++k) out_shape.push_back(dims[k]);
  // Per operand, its stride along each label (a broadcast size-1 dim has stride 0; repeated labels add).
  std::vector<std::vector<int64_t>> st(c.inputs.size(), std::vector<int64_t>(L, 0));
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto s = strides_of(in(c, i).shape());
    for (size_t d = 0; d < labels[i].size(); ++d) {
      const size_t k = static_cast<size_t>(std::find(all.begin(), all.end(), labels[i][d]) - all.begin());
      if (in(c, i).shape()[d] != 1 || dims[k] == 1) st[i][k] += s[d];
    }
  }
  const auto ost = strides_of(out_shape);
  const bool fl = is_float(first.dtype());
  std::vector<std::vector<double>> vf;
  std::vector<std::vector<int64_t>> vi;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (fl)
      vf.push_back(in(c, i).to_f64());
    else
      vi.push_back(in(c, i).to_i64());
  }
  std::vector<double> rf(fl ? static_cast<size_t>(shape_numel(out_shape)) : 0, 0.0);
  std::vector<int64_t> ri(fl ? 0 : static_cast<size_t>(shape_numel(out_shape)), 0);
  const int64_t total = shape_numel(dims);
  std::vector<int64_t> idx(L, 0), off(c.inputs.size(), 0);
  int64_t o = 0;
  for (int64_t n = 0; n < total; ++n) {
    if (fl) {
      double p = 1;
      for (size_t i = 0; i < vf.size(); ++i) p *= vf[i][static_cast<size_t>(off[i])];
      rf[static_cast<size_t>(o)] += p;
    } else {
      uint64_t p = 1;
      for (size_t i = 0; i < vi.size(); ++i) p *= static_cast<uint64_t>(vi[i][static_cast<size_t>(off[i])]);
      ri[static_cast<size_t>(o)] = static_cast<int64_t>(static_cast<uint64_t>(ri[static_cast<size_t>(o)]) + p);
    }
    for (size_t k = L; k-- > 0;) {  // odometer over all labels
      const bool is_out = k < out.size();
      ++idx[k];
      for (size_t i = 0; i < off.size(); ++i) off[i] += st[i][k];
      if (is_out) o += ost[k];
      if (idx[k] < dims[k]) break;
      for (size_t i = 0; i < off.size(); ++i) off[i] -= st[i][k] * idx[k];
      if (is_out) o -= ost[k] * idx[k];
      idx[k] = 0;
    }
  }
  if (fl) return {from_f64(first.dtype(), out_shape, rf)};
  return {from_i64_as(first.dtype(), out_shape, ri)};
}

std::vector<Tensor> op_det(const OpCall& c) {
  const Tensor& x = in(c, 0);
  require_float(c, x, "input X");
  const int64_t r = x.rank();
  if (r < 2 || x.shape()[static_cast<size_t>(r - 1)] != x.shape()[static_cast<size_t>(r - 2)])
    fail(c, "input X of shape " + shape_str(x.shape()) + " must be [..., M, M]");
  const int64_t M = x.shape().back();
  const Shape out(x.shape().begin(), x.shape().end() - 2);
  const int64_t mats = shape_numel(out);
  auto v = x.to_f64();
  std::vector<double> det(static_cast<size_t>(mats));
  for (int64_t m = 0; m < mats; ++m) {
    double* a = v.data() + m * M * M;
    double d = 1;
    for (int64_t k = 0; k < M && d != 0; ++k) {
      int64_t p = k;
      for (int64_t i = k + 1; i < M; ++i)
        if (std::fabs(a[i * M + k]) > std::fabs(a[p * M + k])) p = i;
      if (a[p * M + k] == 0) {
        d = 0;
        break;
      }
      if (p != k) {
        for (int64_t j = 0; j < M; ++j) std::swap(a[k * M + j], a[p * M + j]);
        d = -d;
      }
      d *= a[k * M + k];
      for (int64_t i = k + 1; i < M; ++i) {
        const double f = a[i * M + k] / a[k * M + k];
        for (int64_t j = k; j < M; ++j) a[i * M + j] -= f * a[k * M + j];
      }
    }
    det[static_cast<size_t>(m)] = d;
  }
  return {from_f64(x.dtype(), out, det)};
}

}  // namespace

std::vector<OpEntry> algebra_ops() { return {{"Einsum", op_einsum}, {"Det", op_det}}; }

}  // namespace tessera::reference
