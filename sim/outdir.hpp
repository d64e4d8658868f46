#pragma once
// A run's output directory, written all or nothing. The run writes into a temporary directory
// beside --out (".NAME.tessera-tmp.PID"); commit() puts it in place of --out at the end, so the
// previous contents stay whole until then and a run that fails or is interrupted leaves --out as it
// was (and no temporary directory). --out must be a new or empty directory or one a run wrote
// (it holds the marker file .tessera-run, or a report.json): a run replaces it as a whole.
#include <string>
#include <vector>

namespace tessera::sim {

class OutputDir {
 public:
  // Checks `out` (not a file, no file on the way, writable, ours to replace) and creates the
  // temporary directory; throws InputError("--out", ...) naming the problem.
  explicit OutputDir(std::string out);
  ~OutputDir();  // removes the temporary directory (and parents it created) unless committed
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  const std::string& dir() const { return tmp_; }    // where the run writes
  const std::string& final_dir() const { return out_; }
  // Replaces --out with what the run wrote.
  void commit();

 private:
  std::string out_, tmp_;
  std::vector<std::string> created_parents_;  // removed again (when empty) if the run fails
  bool committed_ = false;
};

// `path` as the user will find it: a path under the active run's temporary directory is shown
// under --out (messages print final paths).
std::string shown_path(const std::string& path);

// Checks --out without creating anything (validate, and runs before they load anything).
void check_out_dir(const std::string& out);

}  // namespace tessera::sim
