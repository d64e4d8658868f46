#pragma once
// File helpers. Every output tessera writes goes through write_file_atomic so that an interrupted
// run never leaves a truncated file under the final name.
#include <cstddef>
#include <string>

namespace tessera {

// Reads a whole file; throws InputError naming the path when it cannot.
std::string read_file(const std::string& path);
// The first `max_bytes` of a file (all of it when shorter); same errors as read_file.
std::string read_file_prefix(const std::string& path, size_t max_bytes);
// Writes to "<path>.tmp.<pid>" then renames over `path`; creates parent directories.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace tessera
