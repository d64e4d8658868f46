#include "isa/error.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace tessera {

std::string Diagnostic::str() const {
  std::string s;
  if (!where.empty()) s.append(where).append(": ");
  s.append(message);
  if (!hint.empty()) s.append(" (").append(hint).append(")");
  return s;
}

static std::string join_diags(const std::vector<Diagnostic>& diags) {
  std::string s;
  for (size_t i = 0; i < diags.size(); ++i) {
    if (i) s += "\n";
    s += diags[i].str();
  }
  return s;
}

InputError::InputError(std::vector<Diagnostic> diags)
    : std::runtime_error(join_diags(diags)), diags_(std::move(diags)) {}

InputError::InputError(std::string where, std::string message, std::string hint)
    : InputError(std::vector<Diagnostic>{{std::move(where), std::move(message), std::move(hint)}}) {}

void DiagnosticList::throw_if_any() const {
  if (!diags_.empty()) throw InputError(diags_);
}

// Optimal string alignment distance: insertions, deletions, substitutions and transpositions of
// neighbours ("stpes" -> "steps" is one edit), case-insensitive. Stops early with a value above
// `bound` once every alignment of a row costs more than that.
static size_t edit_distance(const std::string& a, const std::string& b, size_t bound) {
  const size_t n = a.size(), m = b.size();
  std::vector<size_t> d((n + 1) * (m + 1));  // row-major, (n + 1) rows of m + 1
  auto at = [&](size_t i, size_t j) -> size_t& { return d[i * (m + 1) + j]; };
  auto eq = [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); };
  for (size_t i = 0; i <= n; ++i) at(i, 0) = i;
  for (size_t j = 0; j <= m; ++j) at(0, j) = j;
  for (size_t i = 1; i <= n; ++i) {
    size_t row_min = at(i, 0);
    for (size_t j = 1; j <= m; ++j) {
      at(i, j) = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (eq(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && eq(a[i - 1], b[j - 2]) && eq(a[i - 2], b[j - 1]))
        at(i, j) = std::min(at(i, j), at(i - 2, j - 2) + 1);
      row_min = std::min(row_min, at(i, j));
    }
    // A transposition reaches back two rows, so both must be over the bound to stop.
    if (row_min > bound && i > 1) {
      size_t prev_min = SIZE_MAX;
      for (size_t j = 0; j <= m; ++j) prev_min = std::min(prev_min, at(i - 1, j));
      if (prev_min > bound) return bound + 1;
    }
  }
  return at(n, m);
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  // Accept up to a third of the word's length in edits (at least 1, at most 3); a candidate that
  // starts with or contains the word also counts ("bandwidth" -> "hbm.bandwidth").
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    // The distance is at least the length difference: skip what cannot be within the limit (a
    // long mistyped word against every opcode was most of the time of a bad program).
    if ((c.size() > word.size() ? c.size() - word.size() : word.size() - c.size()) > limit) continue;
    size_t d = edit_distance(word, c, limit);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (best_d <= limit) return best;
  for (const auto& c : candidates)
    if (word.size() >= 3 && c.find(word) != std::string::npos) return c;
  return {};
}

}  // namespace tessera
