// Codec lists of the KV benchmarks: "G" in a name stands for the model's
// group size min(32, head_dim), "G2" for twice that.
#pragma once

#include <string>

namespace baton::cli {

// Expands G / G2 in a comma-separated list of codec names for a head_dim.
std::string expand_codec_list(const std::string& pattern, int head_dim);

}  // namespace baton::cli
