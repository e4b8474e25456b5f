// Default server addresses of the `baton` CLI, so that `baton chat` alone
// talks to an agent on this machine. Rule: the flag, else the environment
// variable, else the address the README's walkthrough uses:
//   --edge   $BATON_EDGE    127.0.0.1:7071  (baton-edge --listen)
//   --cloud  $BATON_CLOUD   127.0.0.1:7070  (baton-prefill --listen)
// --help shows the effective default and names the variable.
#pragma once

#include <string>
#include <string_view>

namespace baton {
class FlagSet;
}

namespace baton::cli {

inline constexpr char kEdgeAddressEnv[] = "BATON_EDGE";
inline constexpr char kDefaultEdgeAddress[] = "127.0.0.1:7071";
inline constexpr char kCloudAddressEnv[] = "BATON_CLOUD";
inline constexpr char kDefaultCloudAddress[] = "127.0.0.1:7070";

// `env_value` when it is set and not empty, else `builtin`.
std::string default_address(const char* env_value, std::string_view builtin);
// The same, reading the variable `env_name` now.
std::string default_address_from_env(const char* env_name, std::string_view builtin);

// Registers --edge ADDR with the default above ($BATON_EDGE, else
// 127.0.0.1:7071) written into *edge first, so --help shows it.
void add_edge_address_flag(FlagSet& flags, std::string* edge);
// Registers --cloud ADDR with $BATON_CLOUD, else 127.0.0.1:7070. `help`
// says what the command uses the cloud for.
void add_cloud_address_flag(FlagSet& flags, std::string* cloud, std::string_view help);

}  // namespace baton::cli
