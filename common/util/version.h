// The Baton build version, reported by Health and --version.
#pragma once

namespace baton {

inline constexpr char kBatonVersion[] = "0.2.0";

}  // namespace baton
