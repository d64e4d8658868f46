#include "sim/reference_cache.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <variant>

#include "isa/fileio.hpp"
#include "isa/npy.hpp"
#include "mapper/graph/graph.hpp"
#include "mapper/reference/executor.hpp"
#include "sim/version.hpp"

namespace tessera::sim {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Two independent 64-bit lanes over the bytes, eight at a time (a multiply-rotate mix per word, a
// final avalanche): fast on hundreds of MB of weights and inputs; not cryptographic (a cache key).
class Hasher {
 public:
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, c + i, 8);
      word(w);
    }
    uint64_t tail = 0;
    for (size_t k = 0; i + k < n; ++k) tail |= uint64_t{c[i + k]} << (8 * k);
    word(tail ^ (uint64_t{n} << 56));
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  void num(int64_t v) { word(static_cast<uint64_t>(v)); }
  void f64(double v) {
    uint64_t w;
    std::memcpy(&w, &v, 8);
    word(w);
  }
  void tensor(const Tensor& t) {
    num(static_cast<int64_t>(t.dtype()));
    num(t.rank());
    for (int64_t d : t.shape()) num(d);
    bytes(t.data(), t.nbytes());
  }
  std::string hex() const {
    char b[40];
    std::snprintf(b, sizeof b, "%016llx%016llx", static_cast<unsigned long long>(fin(a_)), static_cast<unsigned long long>(fin(b_)));
    return b;
  }

 private:
  uint64_t a_ = 0x9e3779b97f4a7c15ull, b_ = 0xc2b2ae3d27d4eb4full;
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  void word(uint64_t w) {
    a_ = rotl(a_ ^ (w * 0x87c37b91114253d5ull), 31) * 0x4cf5ad432745937full;
    b_ = rotl(b_ + (w ^ 0x52dce729da3ed7b9ull) * 0x9e3779b97f4a7c15ull, 27) * 0xff51afd7ed558ccdull + 0x38495ab5ull;
  }
  static uint64_t fin(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  }
};

double env_num(const char* name, double dflt) {
  const char* e = std::getenv(name);
  return e && *e ? std::atof(e) : dflt;
}
bool enabled() {
  const char* e = std::getenv("TESSERA_REFERENCE_CACHE");
  return !(e && (std::strcmp(e, "0") == 0 || std::strcmp(e, "off") == 0));
}

std::optional<std::map<std::string, Tensor>> load_entry(const fs::path& dir) {
  try {
    std::ifstream f(dir / "manifest.json");
    if (!f) return std::nullopt;
    const json m = json::parse(f);
    std::map<std::string, Tensor> out;
    for (const auto& o : m.at("outputs")) out[o.at("name").get<std::string>()] = read_npy((dir / o.at("file").get<std::string>()).string());
    std::error_code ec;
    fs::last_write_time(dir / "manifest.json", fs::file_time_type::clock::now(), ec);  // recently used
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable: computed again (and stored over it)
  }
}

// Drops the least recently used entries until the cache holds at most `max_bytes`.
void prune(const fs::path& root, double max_bytes) {
  std::error_code ec;
  struct Entry {
    fs::path dir;
    fs::file_time_type used;
    uintmax_t bytes;
  };
  std::vector<Entry> entries;
  uintmax_t total = 0;
  for (const auto& d : fs::directory_iterator(root, ec)) {
    if (!d.is_directory(ec)) continue;
    Entry e{d.path(), fs::last_write_time(d.path() / "manifest.json", ec), 0};
    if (ec) e.used = fs::file_time_type::min();
    for (const auto& f : fs::directory_iterator(d.path(), ec)) e.bytes += f.file_size(ec);
    total += e.bytes;
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const auto& e : entries) {
    if (static_cast<double>(total) <= max_bytes) break;
    fs::remove_all(e.dir, ec);
    total -= e.bytes;
  }
}

void store_entry(const fs::path& root, const std::string& key, const std::map<std::string, Tensor>& outputs) {
  std::error_code ec;
  const fs::path dir = root / key;
  const fs::path tmp = root / (key + ".tmp" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) || ec) return;
  try {
    json m = {{"schema", "tessera.reference-cache/1"}, {"tessera", version_string()}, {"commit", version_commit()}, {"outputs", json::array()}};
    size_t i = 0;
    for (const auto& [name, t] : outputs) {
      const std::string file = "out_" + std::to_string(i++) + ".npy";
      write_npy((tmp / file).string(), t);
      m["outputs"].push_back({{"name", name}, {"file", file}});
    }
    write_file_atomic((tmp / "manifest.json").string(), m.dump(2) + "\n");
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir, ec);
  } catch (const std::exception&) {
  }
  fs::remove_all(tmp, ec);  // left only when something failed
  prune(root, env_num("TESSERA_REFERENCE_CACHE_MAX_BYTES", 4.0 * 1024 * 1024 * 1024));
}

}  // namespace

std::string reference_cache_dir() {
  if (const char* d = std::getenv("TESSERA_CACHE_DIR"); d && *d) return (fs::path(d) / "reference").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (fs::path(d) / "tessera" / "reference").string();
  if (const char* d = std::getenv("HOME"); d && *d) return (fs::path(d) / ".cache" / "tessera" / "reference").string();
  return {};
}

std::string reference_cache_key(const graph::Graph& g, const std::map<std::string, Tensor>& inputs) {
  Hasher h;
  h.str("tessera.reference-cache/1 " + version_string() + " " + version_commit());
  h.num(g.opset);
  h.num(static_cast<int64_t>(g.nodes.size()));
  for (const auto& n : g.nodes) {
    h.str(n.op);
    h.str(n.name);
    h.num(static_cast<int64_t>(n.inputs.size()));
    for (const auto& s : n.inputs) h.str(s);
    h.num(static_cast<int64_t>(n.outputs.size()));
    for (const auto& s : n.outputs) h.str(s);
    for (const auto& [name, v] : n.attrs.all()) {
      h.str(name);
      h.num(static_cast<int64_t>(v.index()));
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, int64_t>) h.num(x);
            else if constexpr (std::is_same_v<T, double>) h.f64(x);
            else if constexpr (std::is_same_v<T, std::string>) h.str(x);
            else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
              h.num(static_cast<int64_t>(x.size()));
              for (int64_t e : x) h.num(e);
            } else if constexpr (std::is_same_v<T, std::vector<double>>) {
              h.num(static_cast<int64_t>(x.size()));
              for (double e : x) h.f64(e);
            } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
              h.num(static_cast<int64_t>(x.size()));
              for (const auto& e : x) h.str(e);
            } else {
              h.tensor(x);
            }
          },
          v);
    }
  }
  for (const auto& [name, v] : g.values) {
    h.str(name);
    h.num(static_cast<int64_t>(v.dtype));
    h.num(v.shape_known);
    for (int64_t d : v.shape) h.num(d);
    h.num(v.data.has_value());
    if (v.data) h.tensor(*v.data);
  }
  for (const auto& s : g.inputs) h.str(s);
  h.str("->");
  for (const auto& s : g.outputs) h.str(s);
  for (const auto& [name, t] : inputs) {
    h.str(name);
    h.tensor(t);
  }
  return h.hex();
}

ReferenceResult cached_reference(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                                 const std::function<void(size_t, size_t)>& on_node) {
  const std::string root = enabled() ? reference_cache_dir() : std::string();
  if (root.empty()) return {reference::execute(g, inputs, on_node), "off"};
  const std::string key = reference_cache_key(g, inputs);
  if (auto hit = load_entry(fs::path(root) / key)) return {std::move(*hit), "hit"};
  const auto t0 = std::chrono::steady_clock::now();
  ReferenceResult r{reference::execute(g, inputs, on_node), "miss"};
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (took >= env_num("TESSERA_REFERENCE_CACHE_MIN_S", 1.0)) {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (!ec) {
      store_entry(root, key, r.outputs);
      if (fs::exists(fs::path(root) / key / "manifest.json", ec)) r.cache = "stored";
    }
  }
  return r;
}

}  // namespace tessera::sim
