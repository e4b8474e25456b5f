// Readable forms of the service messages the CLI prints: names of enums and
// codecs, digests, and a message as one JSON object (--json output, field
// names as in the proto, zero values included).
#pragma once

#include <string>


#include "proto/baton.pb.h"

namespace baton::cli {


const char* serving_state_name(v1::ServingState state);  // "READY", "LOADING", ...
// The canonical codec name ("int4-pc-kg128-g32-z3") of complete params, else
// the bare width ("int8") of request-style params.
std::string codec_params_name(const v1::CodecParams& params);
// The first `n_hex` hex digits of a digest (bytes), "-" when empty.
std::string short_digest(const std::string& digest_bytes, size_t n_hex = 16);

}  // namespace baton::cli
