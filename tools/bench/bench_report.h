// Output of `baton bench ...`: a readable table, or with --json one JSON
// object on one line. The flat two-column report and the JSON-line helpers
// (fixed, whole, significant, json_line) are the CLI's (report.h,
// json_line.h); benches with nested output build a Json themselves.
#pragma once

#include "json_line.h"
#include "report.h"

namespace baton::cli {

// A bench's figures as a titled two-column table or one flat JSON object
// (the table shows each figure's precision, the JSON 6 significant digits).
using BenchReport = Report;

}  // namespace baton::cli
