// A real cloud prefill service (PrefillService + PrefillServer, CPU backend)
// on 127.0.0.1 and a free port, with a gRPC stub to it: the cloud of `baton
// bench prefill-service` and `baton bench split`. Plain TCP on loopback, no
// TLS and no tokens: nothing leaves the machine and only this process calls it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cloud_prefill/prefill_server.h"
#include "cloud_prefill/prefill_service.h"
#include "proto/baton.grpc.pb.h"

namespace baton::cli {

class InProcessCloud {
 public:
  // Starts the server with a service that has no model yet; Load() loads
  // one (the order of baton-prefill: listening while it loads).
  static absl::StatusOr<std::unique_ptr<InProcessCloud>> Start(const PrefillServiceOptions& options);
  absl::Status Load(const std::string& model_path) { return service_.Load(model_path); }
  ~InProcessCloud() { Shutdown(); }

  v1::Prefill::Stub& stub() { return *stub_; }
  // Stops the server (idempotent); the stub's calls fail afterwards.
  void Shutdown();

 private:
  explicit InProcessCloud(const PrefillServiceOptions& options) : service_(options) {}
  PrefillService service_;
  std::unique_ptr<PrefillServer> server_;
  std::unique_ptr<v1::Prefill::Stub> stub_;
};

}  // namespace baton::cli
