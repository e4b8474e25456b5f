// PrefillJobObserver: what PrefillService tells about its work as it ends.
// PrefillMetrics is the one observer today; the interface is what lets the
// metrics read the service (collect()) while the service knows nothing of
// the metrics.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "cloud_prefill/prefill_job.h"
#include "common/util/metrics.h"

namespace baton {

class PrefillJobObserver {
 public:
  virtual ~PrefillJobObserver() = default;
  // One finished prefill job (run_prefill_job's answer); `kv_bytes_per_token`
  // is the size per token of the KV the caches hold.
  virtual void job_finished(const absl::StatusOr<PrefillJobResult>& result, uint64_t kv_bytes_per_token) = 0;
  // Counts the streams cancelled because their client stopped reading (the
  // service's WriteStallWatchdog); nullptr: not counted.
  virtual Counter* write_stall_counter() { return nullptr; }
};

}  // namespace baton
