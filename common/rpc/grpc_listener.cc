#include "common/rpc/grpc_listener.h"

#include <grpc/support/log.h>

#include <mutex>

#include "common/util/listen_address.h"
#include "common/util/log.h"

namespace baton {
namespace {

// Set while this thread binds ports: gRPC reports a failed bind itself, as a
// multi-line error tree, before BuildAndStart returns; start_grpc_server says
// it in one line, so that report would print the same error twice.
thread_local bool binding_ports = false;

// gRPC's log (what GRPC_VERBOSITY lets through) in Baton's format.
void grpc_log(gpr_log_func_args* args) {
  if (binding_ports && args->severity == GPR_LOG_SEVERITY_ERROR) return;
  const LogLevel level = args->severity == GPR_LOG_SEVERITY_ERROR  ? LogLevel::kError
                         : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo
                                                                   : LogLevel::kDebug;
  log_message(level, "grpc", "%s:%d %s", args->file, args->line, args->message);
}

}  // namespace

absl::StatusOr<std::unique_ptr<grpc::Server>> start_grpc_server(grpc::ServerBuilder& builder,
                                                                const std::vector<GrpcListeningPort>& ports) {
  static std::once_flag log_installed;
  std::call_once(log_installed, [] { gpr_set_log_function(grpc_log); });
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (const GrpcListeningPort& port : ports) {
    *port.selected_port = 0;
    builder.AddListeningPort(listen_address_or_loopback(port.address), port.credentials, port.selected_port);
  }
  binding_ports = true;
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  binding_ports = false;
  // BuildAndStart stops at the first port it cannot bind: that one reads 0.
  for (const GrpcListeningPort& port : ports) {
    if (*port.selected_port != 0) continue;
    if (server != nullptr) server->Shutdown();
    return listen_error(listen_address_or_loopback(port.address));
  }
  if (server == nullptr) return absl::UnavailableError("the gRPC server did not start");
  return server;
}

}  // namespace baton
