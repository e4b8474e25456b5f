// The stats table printed after a Generate turn (`baton generate --edge`,
// and any command that shows a turn's Stats): only figures that apply to
// the turn (no cloud rows on a local turn) and "not measured" instead of a 0
// that was never measured.
#pragma once

#include <cstdio>
#include <string>

#include "proto/baton.pb.h"

namespace baton::cli {

// "end of sequence", "max tokens", ...
const char* finish_name(v1::FinishReason reason);
// Prints the table for `stats` of a turn served by the edge at `address`.
// `interrupted`: Ctrl-C ended the call and the agent sent no Stats, so `stats`
// holds what this client saw: the rows only the agent knows (the TTFT split,
// prompt tokens) are left out and the title says so.
void print_turn_stats(const std::string& address, const v1::Stats& stats, std::FILE* out = stderr,
                      bool interrupted = false);

}  // namespace baton::cli
