// The chat page baton-edge serves at "/" on its --http address: plain HTML,
// JavaScript and CSS (edge_decode/http/web/), embedded into the binary at build
// time (web/embed.cmake writes them into a generated web_assets.cc as raw
// string literals), with no external asset: no CDN, no web font, nothing
// fetched but this agent's own API. The page streams answers from POST
// /v1/chat/completions (stream: true, read with fetch + ReadableStream),
// keeps the conversation in an agent session ("baton": {"session"}), lists
// and deletes the caller's sessions (GET/DELETE /v1/baton/sessions, below),
// shows each turn's figures (the last streamed chunk's "baton" object: TTFT
// split into cloud prefill / transfer / ingest / local, KV bytes, the plan)
// with a chart of where the time went, and sends the API key it keeps in
// localStorage as "Authorization: Bearer KEY".
//
// The page's files need no API key (they hold no data; the page asks for the
// key); every answer carries a strict Content-Security-Policy
// (kWebUiContentSecurityPolicy): scripts, styles and connections to this
// origin only, no inline script or style, no framing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "proto/baton.pb.h"

namespace httplib {
class Server;
}

namespace baton {

struct WebAsset {
  const char* path;          // URL path: "/" (index.html), "/app.js", "/app.css"
  const char* content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view body;
};

// The page's files (every .html, .js and .css of edge_decode/http/web/), by name.
const std::vector<WebAsset>& web_ui_assets();

// The Content-Security-Policy header of every page file.
extern const char kWebUiContentSecurityPolicy[];

// Serves every asset of web_ui_assets() on GET (and HEAD) at its path, with
// the CSP and no-sniff headers.
void register_web_ui(httplib::Server& server);

// GET /v1/baton/sessions: the caller's sessions, most recently used first:
// {"object": "list", "data": [{"id", "token_count", "kv_bytes", "codec",
//  "pack", "created_unix_ms", "last_used_unix_ms", "persisted", "busy"}]}
// (integers as JSON numbers; ids as the caller named them).
std::string sessions_json(const v1::ListSessionsResponse& response);

// DELETE /v1/baton/sessions/{id}: {"id", "object": "session.deleted",
// "deleted": true, "freed_bytes"}.
std::string deleted_session_json(std::string_view session_id, const v1::DeleteSessionResponse& response);

}  // namespace baton
