#include "sim/outdir.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "sim/console.hpp"

namespace tessera::sim {

namespace fs = std::filesystem;

namespace {

const char* const kMarker = ".tessera-run";
std::string g_tmp, g_out;  // the active run's temporary and final directories (shown_path)

// `out` made absolute, without a trailing separator, symlinks to directories resolved.
fs::path normal_out(const std::string& out) {
  if (out.empty()) throw InputError("--out", "the output directory is empty", "give a directory, e.g. --out out/run1");
  fs::path p = fs::absolute(out).lexically_normal();
  if (p.filename().empty() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(p, ec)) && fs::is_directory(fs::status(p, ec))) p = fs::canonical(p, ec);
  return p;
}

std::string errno_text(int e) { return std::strerror(e); }

bool pid_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

// Temporary and previous-output directories of runs that were killed (SIGKILL, a second Ctrl-C):
// ".NAME.tessera-tmp.PID" / ".NAME.tessera-old.PID" whose process is gone.
void remove_stale(const fs::path& parent, const std::string& name) {
  std::error_code ec;
  for (const char* kind : {".tessera-tmp.", ".tessera-old."}) {
    const std::string prefix = "." + name + kind;
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string n = it->path().filename().string();
      if (n.rfind(prefix, 0) != 0) continue;
      char* e = nullptr;
      const long pid = std::strtol(n.c_str() + prefix.size(), &e, 10);
      if (e && *e == 0 && !pid_alive(pid)) {
        std::error_code rm;
        fs::remove_all(it->path(), rm);
      }
    }
  }
}

}  // namespace

void check_out_dir(const std::string& out) {
  const fs::path p = normal_out(out);
  const std::string shown = out;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st))
      throw InputError("--out", "'" + shown + "' is a file, not a directory",
                       "give a directory (it is created when missing), or move the file away");
    if (p == p.root_path()) throw InputError("--out", "'" + shown + "' is the root directory", "give a directory of its own, e.g. --out out/run1");
    // Ours: the marker, or (written before the marker existed) a report or a compile report.
    bool ours = false;
    for (const char* f : {kMarker, "report.json", "compile_report.txt", "host.json"}) ours = ours || fs::exists(p / f, ec);
    std::string stranger;
    if (!ours)  // the first name in order (the directory's own order differs between file systems)
      for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string n = it->path().filename().string();
        if (stranger.empty() || n < stranger) stranger = n;
      }
    if (ec) throw InputError("--out", "cannot read '" + shown + "': " + ec.message(), "choose a directory you can read and write");
    if (!ours && !stranger.empty())
      throw InputError("--out", "'" + shown + "' holds files tessera did not write (e.g. '" + stranger +
                                    "'), and a run replaces its output directory as a whole",
                       "give a new or empty directory, or the output directory of an earlier run");
    const fs::path parent = p.parent_path();
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
      throw InputError("--out", "cannot replace '" + shown + "': its directory " + parent.string() + " is not writable (" + errno_text(errno) + ")",
                       "choose a writable place with --out");
    return;
  }
  // Not there yet: the nearest existing ancestor must be a directory we may write. Another run
  // failing beside this one may remove an empty parent it created between the look and the probe:
  // look again then (ENOENT).
  for (int attempt = 0;; ++attempt) {
    fs::path a = p.parent_path();
    while (!a.empty() && !fs::exists(fs::symlink_status(a, ec)) && a != a.root_path()) a = a.parent_path();
    const fs::file_status as = fs::status(a, ec);
    if (!fs::exists(as) && attempt < 8) continue;
    if (!fs::is_directory(as))
      throw InputError("--out", "cannot create '" + shown + "': " + a.string() + " is a file, not a directory", "choose another --out");
    if (::access(a.c_str(), W_OK | X_OK) != 0) {
      if (errno == ENOENT && attempt < 8) continue;
      throw InputError("--out", "cannot create '" + shown + "': " + a.string() + " is not writable (" + errno_text(errno) + ")",
                       "choose a writable place with --out");
    }
    // access() says yes to root everywhere and knows nothing of /proc or a full disk: try it (a
    // directory made and removed at once).
    const fs::path probe = a / (".tessera-probe." + std::to_string(::getpid()));
    if (fs::create_directory(probe, ec) && !ec) {
      fs::remove(probe, ec);
      return;
    }
    if (ec == std::errc::no_such_file_or_directory && attempt < 8) continue;
    throw InputError("--out", "cannot create the output directory '" + shown + "': " + (ec ? ec.message() : std::string("it exists")),
                     "choose a writable place with --out");
  }
}

OutputDir::OutputDir(std::string out) {
  check_out_dir(out);
  const fs::path p = normal_out(out);
  out_ = out;
  const fs::path parent = p.parent_path();
  const std::string name = p.filename().string();
  const fs::path tmp = parent / ("." + name + ".tessera-tmp." + std::to_string(::getpid()));
  std::error_code ec;
  // Another run failing beside this one removes the parents it created when they are empty, and
  // they may be the ones this run just found: create what is missing and the temporary directory
  // again when it vanished in between (ENOENT; or EEXIST, when it was made by another run and
  // removed again between this run's mkdir and its check that the directory is there).
  auto raced = [&](int attempt) { return (ec == std::errc::no_such_file_or_directory || ec == std::errc::file_exists) && attempt < 8; };
  for (int attempt = 0;; ++attempt) {
    std::vector<fs::path> missing;
    for (fs::path a = parent; !a.empty() && !fs::exists(a, ec); a = a.parent_path()) {
      missing.push_back(a);
      if (a == a.root_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (!fs::create_directory(*it, ec) && ec) {
        if (raced(attempt)) break;
        throw InputError("--out", "cannot create " + it->string() + ": " + ec.message(), "choose a writable place with --out");
      }
      created_parents_.push_back(it->string());
    }
    if (raced(attempt)) continue;
    remove_stale(parent, name);
    fs::remove_all(tmp, ec);
    if (fs::create_directory(tmp, ec) && !ec) break;
    if (ec == std::errc::no_such_file_or_directory && attempt < 8) continue;
    const std::string why = ec ? ec.message() : std::string("it exists");
    for (auto it = created_parents_.rbegin(); it != created_parents_.rend(); ++it) fs::remove(*it, ec);
    throw InputError("--out", "cannot create the output directory '" + out + "': " + why, "choose a writable place with --out");
  }
  tmp_ = tmp.string();
  write_file_atomic((tmp / kMarker).string(),
                    "The output directory of a tessera run. The next run writing here replaces it as a whole.\n");
  g_tmp = tmp_;
  g_out = out_;
}

OutputDir::~OutputDir() {
  g_tmp.clear();
  g_out.clear();
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
  for (auto it = created_parents_.rbegin(); it != created_parents_.rend(); ++it) fs::remove(*it, ec);  // only when empty
}

void OutputDir::commit() {
  const fs::path p = normal_out(out_);
  const fs::path tmp(tmp_);
  std::error_code ec;
  fs::path old;
  if (fs::exists(fs::symlink_status(p, ec))) {
    old = p.parent_path() / ("." + p.filename().string() + ".tessera-old." + std::to_string(::getpid()));
    fs::remove_all(old, ec);
    fs::rename(p, old, ec);
    if (ec) {
      committed_ = true;  // keep what the run wrote
      throw InputError("--out", "cannot replace '" + out_ + "': " + ec.message(), "this run's outputs are in " + tmp_);
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    std::error_code back;
    if (!old.empty()) fs::rename(old, p, back);
    committed_ = true;
    throw InputError("--out", "cannot move the outputs into '" + out_ + "': " + ec.message(), "this run's outputs are in " + tmp_);
  }
  committed_ = true;
  if (!old.empty()) {
    fs::remove_all(old, ec);
    if (ec) Console::get().warn("--out: the previous outputs could not be removed (" + ec.message() + "); they are in " + old.string());
  }
}

std::string shown_path(const std::string& path) {
  if (!g_tmp.empty() && path.rfind(g_tmp, 0) == 0) return g_out + path.substr(g_tmp.size());
  return path;
}

}  // namespace tessera::sim
