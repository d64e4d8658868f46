#pragma once
// The reference executor's outputs cached on disk, so that running a scenario again on a machine
// target skips the reference check's computation when nothing it depends on changed (a re-run of
// the NKI matmul's blocked step at full size spends half its time there).
//
// Key: a 128-bit hash of the graph as the executor sees it (opset; every node's op, name, inputs,
// outputs and attributes; every value's name, dtype, shape and data), the input tensors (name,
// dtype, shape, bytes) and tessera's version and commit (a new build never reuses an old result).
// Where: $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else $HOME/.cache/tessera; an entry is
// reference/<key>/ with one .npy per output and manifest.json written last (an entry without it is
// ignored). Only results that took at least 1 s to compute are stored (TESSERA_REFERENCE_CACHE_MIN_S
// overrides); the cache keeps at most 4 GiB (TESSERA_REFERENCE_CACHE_MAX_BYTES), dropping the
// least recently used entries; TESSERA_REFERENCE_CACHE=0 turns it off. Any problem with the cache
// (unreadable, full disk) falls back to computing: the cache never changes a result or fails a run.
// The outputs are the executor's own, bit for bit: reports are the same with and without it.
#include <functional>
#include <map>
#include <string>

#include "isa/tensor.hpp"

namespace tessera::graph {
class Graph;
}

namespace tessera::sim {

struct ReferenceResult {
  std::map<std::string, Tensor> outputs;
  std::string cache;  // "hit", "stored", "miss" (computed, not stored), "off"
};

// reference::execute(g, inputs, on_node) through the cache.
ReferenceResult cached_reference(const graph::Graph& g, const std::map<std::string, Tensor>& inputs,
                                 const std::function<void(size_t, size_t)>& on_node = {});

// The key (32 hex digits) and the cache's directory (tests, messages).
std::string reference_cache_key(const graph::Graph& g, const std::map<std::string, Tensor>& inputs);
std::string reference_cache_dir();

}  // namespace tessera::sim
