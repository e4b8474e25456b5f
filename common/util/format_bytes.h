// The one way Baton prints byte counts and byte rates, in IEC units (KiB =
// 1024 B, MiB, GiB, TiB), on every program, log line, error message and CLI
// table: plain bytes below 1 KiB, one decimal for KiB and MiB, two for GiB and
// above ("96 B", "1.5 KiB", "512.0 MiB", "1.50 GiB").
#pragma once

#include <cstdint>
#include <string>

namespace baton {

std::string format_bytes(uint64_t bytes);
// Bytes per second -> "12.3 MiB/s"; a rate <= 0 (not measured) -> "not measured yet".
std::string format_rate(double bytes_per_s);

// The text for a figure that is 0 until measured ("decode 0.0 tok/s" would
// read as a broken system).
inline constexpr char kNotMeasuredYet[] = "not measured yet";

}  // namespace baton
