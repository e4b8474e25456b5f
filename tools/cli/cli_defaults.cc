#include "cli_defaults.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/util/flags.h"

namespace baton::cli {

std::string default_address(const char* env_value, std::string_view builtin) {
  if (env_value != nullptr && *env_value != '\0') return env_value;
  return std::string(builtin);
}

std::string default_address_from_env(const char* env_name, std::string_view builtin) {
  return default_address(std::getenv(env_name), builtin);
}

void add_edge_address_flag(FlagSet& flags, std::string* edge) {
  *edge = default_address_from_env(kEdgeAddressEnv, kDefaultEdgeAddress);
  flags.add_string("edge", edge,
                   absl::StrCat("edge agent: baton-edge's gRPC --listen address (not its --http port); default $",
                                kEdgeAddressEnv, ", else ", kDefaultEdgeAddress),
                   "ADDR");
}

void add_cloud_address_flag(FlagSet& flags, std::string* cloud, std::string_view help) {
  *cloud = default_address_from_env(kCloudAddressEnv, kDefaultCloudAddress);
  flags.add_string("cloud", cloud,
                   absl::StrCat(std::string(help), ": baton-prefill's --listen address; default $", kCloudAddressEnv, ", else ",
                                kDefaultCloudAddress),
                   "ADDR");
}

}  // namespace baton::cli
