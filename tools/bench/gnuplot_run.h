// A gnuplot figure of a bench: the data files and plot.gp go in a private
// temporary folder, gnuplot runs on plot.gp, and the folder is removed
// whatever the outcome (bench split --plot, bench kv-quality --plot).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton::cli {

class GnuplotRun {
 public:
  // A fresh folder under /tmp named after `name`.
  static absl::StatusOr<GnuplotRun> Create(const std::string& name);
  GnuplotRun(GnuplotRun&& other) noexcept : dir_(std::exchange(other.dir_, {})), files_(std::move(other.files_)) {}
  GnuplotRun& operator=(GnuplotRun&&) = delete;
  ~GnuplotRun();

  // The path of file `file` in the folder (removed with it).
  std::string path(const std::string& file);
  // Runs gnuplot on path("plot.gp"), which writes `output`.
  absl::Status run(const std::string& output);

 private:
  GnuplotRun() = default;
  std::string dir_;
  std::vector<std::string> files_;
};

}  // namespace baton::cli
