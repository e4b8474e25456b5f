#include "edge_decode/http/web_ui.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_replace.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"

namespace baton {
namespace {

using Json = nlohmann::json;

// The codec as `baton sessions ls` names it: the full config when it parses,
// else the bare codec name.
std::string codec_label(const v1::CodecParams& params) {
  if (absl::StatusOr<KvCodecConfig> config = kv_codec_config_from_params(params); config.ok()) {
    return config->to_string();
  }
  return kv_codec_name(params.codec());
}

}  // namespace

// 'self' only, and no 'unsafe-inline': the page's script and style are files
// of their own, so an injected <script> or style attribute does nothing.
// img-src data: is for the empty favicon (no request for /favicon.ico).
const char kWebUiContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void register_web_ui(httplib::Server& server) {
  for (const WebAsset& asset : web_ui_assets()) {
    // httplib routes are regular expressions: "/app.js" must not match "/appxjs".
    const std::string pattern = absl::StrReplaceAll(asset.path, {{".", "\\."}});
    server.Get(pattern, [&asset](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy", kWebUiContentSecurityPolicy);
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Referrer-Policy", "no-referrer");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(asset.body.data(), asset.body.size(), asset.content_type);
    });
  }
}

std::string sessions_json(const v1::ListSessionsResponse& response) {
  Json data = Json::array();
  for (const v1::SessionInfo& info : response.sessions()) {
    data.push_back(Json{{"id", info.session_id()},
                        {"token_count", info.token_count()},
                        {"kv_bytes", info.kv_bytes()},
                        {"codec", codec_label(info.codec())},
                        {"pack", info.pack_id()},
                        {"created_unix_ms", info.created_unix_ms()},
                        {"last_used_unix_ms", info.last_used_unix_ms()},
                        {"persisted", info.persisted()},
                        {"busy", info.busy()}});
  }
  return Json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string deleted_session_json(std::string_view session_id, const v1::DeleteSessionResponse& response) {
  return Json{{"id", std::string(session_id)},
              {"object", "session.deleted"},
              {"deleted", true},
              {"freed_bytes", response.freed_bytes()}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace baton
