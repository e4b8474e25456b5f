#pragma once
// Shared by the service fuzzers (prefill_request_fuzz, edge_request_fuzz):
// invariant checks, the record format of their inputs, seed writing, and the
// check that a refusal carries a documented code and a message.
//
// An input is a sequence of records: [tag u8][length u16 little-endian][payload].
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace baton::fuzz {

// The fuzzer's name in messages; set once in LLVMFuzzerInitialize.
inline const char* g_target = "service_fuzz";

// A broken invariant: a finding (abort, so libFuzzer saves the input).
inline void require(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "%s: invariant broken: %s\n", g_target, what.c_str());
    std::abort();
  }
}

// A harness set-up failure: not a finding.
inline void die_unless_ok(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", g_target, what, status.ToString().c_str());
    std::exit(1);
  }
}

inline std::string record(uint8_t tag, const std::string& payload) {
  std::string out(1, static_cast<char>(tag));
  out += static_cast<char>(payload.size() & 0xff);
  out += static_cast<char>((payload.size() >> 8) & 0xff);
  return out + payload;
}

// A deterministic prompt of `n` token ids (all in the tiny vocabularies).
inline std::vector<int32_t> seed_prompt(int n, int salt) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(3 + (i * 37 + salt * 101) % 500);
  return tokens;
}

inline void write_seed(const std::string& dir, const std::string& name, const std::string& bytes) {
  require(bytes.size() < 4096, "seed " + name + " is under 4 KiB");
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

// <TARGET>_VERBOSE set (e.g. EDGE_REQUEST_FUZZ_VERBOSE): every call's outcome on stderr.
inline void trace(const char* rpc, const grpc::Status& status) {
  static const bool verbose = std::getenv((absl::AsciiStrToUpper(g_target) + "_VERBOSE").c_str()) != nullptr;
  if (verbose) {
    std::fprintf(stderr, "%s: %s -> %d %s\n", g_target, rpc, static_cast<int>(status.error_code()),
                 status.error_message().c_str());
  }
}

// A refusal: non-empty message, a documented code.
inline void check_refusal(const grpc::Status& status, const char* rpc,
                          std::initializer_list<grpc::StatusCode> allowed) {
  require(!status.error_message().empty(), absl::StrFormat("%s refused with code %d and an empty message", rpc,
                                                           static_cast<int>(status.error_code())));
  bool documented = false;
  for (grpc::StatusCode code : allowed) documented |= status.error_code() == code;
  require(documented, absl::StrFormat("%s refused with undocumented code %d: %s", rpc,
                                      static_cast<int>(status.error_code()), status.error_message()));
}

}  // namespace baton::fuzz
