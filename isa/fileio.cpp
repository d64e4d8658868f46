#include "isa/fileio.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "isa/error.hpp"

namespace tessera {

namespace {

// Opens `path` for reading. Only regular files are inputs: a FIFO would block the open, /dev/zero
// never ends and a directory reads as empty, so each is refused with a message saying which.
std::ifstream open_for_reading(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!ec && fs::is_directory(st))
    throw InputError(path, "is a directory, not a file (not a regular file)", "give the path of a file in it");
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    throw InputError(path, "not a regular file (a FIFO, socket or device)", "give the path of a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, std::string("cannot open file: ") + std::strerror(errno),
                           "check the path (relative paths in a scenario are relative to the scenario file)");
  return f;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream f = open_for_reading(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw InputError(path, std::string("cannot read file: ") + std::strerror(errno));
  return ss.str();
}

std::string read_file_prefix(const std::string& path, size_t max_bytes) {
  std::ifstream f = open_for_reading(path);
  std::string s(max_bytes, '\0');
  f.read(s.data(), static_cast<std::streamsize>(max_bytes));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
    f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      throw std::runtime_error("write failed for " + tmp + ": " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
}

}  // namespace tessera
