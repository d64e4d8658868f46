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

std::string read_file(const std::string& path) {
  // A FIFO would block the open and /dev/zero never ends: only regular files are inputs.
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw InputError(path, std::string("not a regular file (") +
                               (std::filesystem::is_directory(st) ? "a directory" : "a FIFO, socket or device") + ")",
                     "give the path of a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, std::string("cannot open file: ") + std::strerror(errno),
                           "check the path (relative paths in a scenario are relative to the scenario file)");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
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
