#include "in_process_cloud.h"

#include <grpcpp/grpcpp.h>

#include "common/rpc/channel_options.h"
#include "common/util/check.h"

namespace baton::cli {

absl::StatusOr<std::unique_ptr<InProcessCloud>> InProcessCloud::Start(const PrefillServiceOptions& options) {
  std::unique_ptr<InProcessCloud> cloud(new InProcessCloud(options));
  BATON_ASSIGN_OR_RETURN(cloud->server_, PrefillServer::Start("127.0.0.1:0", cloud->service_));
  cloud->stub_ =
      v1::Prefill::NewStub(baton::open_channel("127.0.0.1:" + std::to_string(cloud->server_->port()), nullptr));
  return cloud;
}

void InProcessCloud::Shutdown() {
  if (server_ != nullptr) server_->Shutdown();
}

}  // namespace baton::cli
