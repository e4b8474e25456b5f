// A protobuf message as one JSON object for programs (`--json` outputs):
// proto field names, every field printed (zero values included), and two
// departures from protobuf's JSON mapping so a reader never has to convert:
//   - 64-bit integers are JSON numbers (protobuf writes them as strings);
//   - digests are lowercase hex, as every table and log line shows them:
//     `bytes` fields (protobuf writes base64) and 64-bit integer fields
//     whose name ends in "digest" (16 hex digits; a number would lose bits
//     in a JSON reader that holds numbers as doubles).
#pragma once

#include <string>

#include <google/protobuf/message.h>

namespace baton {

// "null" if the message cannot be printed (never for the messages of baton.proto).
std::string proto_to_json(const google::protobuf::Message& message);

}  // namespace baton
