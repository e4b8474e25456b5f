#include "gnuplot_run.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace baton::cli {

absl::StatusOr<GnuplotRun> GnuplotRun::Create(const std::string& name) {
  std::string pattern = "/tmp/baton-" + name + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("mkdtemp failed for the gnuplot files");
  GnuplotRun run;
  run.dir_ = pattern;
  return run;
}

GnuplotRun::~GnuplotRun() {
  if (dir_.empty()) return;  // moved from
  for (const std::string& file : files_) std::remove(file.c_str());
  rmdir(dir_.c_str());
}

std::string GnuplotRun::path(const std::string& file) {
  files_.push_back(dir_ + "/" + file);
  return files_.back();
}

absl::Status GnuplotRun::run(const std::string& output) {
  const std::string command = "gnuplot '" + path("plot.gp") + "' 2>&1";
  const int rc = std::system(command.c_str());
  if (rc != 0) return absl::InternalError(absl::StrFormat("gnuplot failed (exit %d) writing %s", rc, output));
  return absl::OkStatus();
}

}  // namespace baton::cli
