// baton pack build|push|delete|pull|ls|info: prefix packs (DESIGN.md "KV stream
// format": a KV stream with first_position 0 saved to a file).
//   build  computes the KV of a text (or token ids) and writes a pack file:
//          with --cloud the cloud's Prefill computes it (first_position 0),
//          with --model the CPU engine in this process does.
//   push   uploads a pack file to the cloud (PutPrefix).
//   delete deletes a pack of the caller's tenant on the cloud (DeletePrefix).
//   pull   has an edge agent fetch a pack from its cloud (Edge.PullPack).
//   ls     lists the packs an edge agent holds (Edge.ListPacks).
//   info   prints a pack file's header.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli_defaults.h"
#include "commands.h"
#include "common/engine/engine.h"
#include "common/kv_cache/f32_kv_cache.h"
#include "common/kv_codec/kv_codec_config.h"
#include "common/kv_stream/kv_codec_params.h"
#include "common/kv_stream/kv_fingerprint.h"
#include "common/kv_stream/kv_handoff.h"
#include "common/kv_stream/kv_pack_file.h"
#include "common/kv_stream/kv_stream_reader.h"
#include "common/kv_stream/kv_stream_writer.h"
#include "common/kv_stream/prefix_digest.h"
#include "common/model/model.h"
#include "common/model/model_fingerprint.h"
#include "common/rpc/proto_json.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/check.h"
#include "common/util/flags.h"
#include "edge_client.h"
#include "edge_client_format.h"
#include "kv_codec_list.h"
#include "progress_line.h"
#include "prompt_flags.h"

namespace baton::cli {
namespace {

constexpr char kPackUsage[] =
    "usage: baton pack build (--cloud ADDR | --model FILE) (-p TEXT | --prompt-file F) --out FILE [flags]\n"
    "       baton pack push --cloud ADDR FILE\n"
    "       baton pack delete --cloud ADDR ID\n"
    "       baton pack pull --edge ADDR ID\n"
    "       baton pack ls --edge ADDR [--json]\n"
    "       baton pack info FILE [--json]\n"
    "\n"
    "Prefix packs hold the KV of a shared prompt start (a system prompt, a document):\n"
    "a session that starts from one skips its prefill.\n"
    "Run 'baton pack ACTION --help' for the flags of an action.\n";

absl::Status pack_usage_error(const std::string& action, const std::string& message) {
  return usage_error("pack " + action, message);
}

// A pack id: [A-Za-z0-9._-], 1..128 characters (proto KvHeader.pack_id).
bool valid_pack_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Reads every message of a pack file (magic, then size-delimited messages),
// handing each to `on_message`; the stream itself is verified by whoever
// consumes it.
absl::Status for_each_pack_message(const std::string& path,
                                   const std::function<absl::Status(const v1::KvStreamMessage&)>& on_message) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open pack file ", path));
  google::protobuf::io::FileInputStream input(fd);
  input.SetCloseOnDelete(true);
  const void* data = nullptr;
  int size = 0;
  std::string magic;
  while (magic.size() < kKvPackMagic.size() && input.Next(&data, &size)) {
    const size_t take = std::min(kKvPackMagic.size() - magic.size(), static_cast<size_t>(size));
    magic.append(static_cast<const char*>(data), take);
    if (take < static_cast<size_t>(size)) input.BackUp(size - static_cast<int>(take));
  }
  if (magic != kKvPackMagic) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a Baton pack file (no BATONKV1 magic)"));
  }
  while (true) {
    v1::KvStreamMessage message;
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&message, &input, &clean_eof)) {
      if (clean_eof) return absl::OkStatus();
      return absl::DataLossError(absl::StrCat(path, ": truncated or corrupt message after byte ", input.ByteCount()));
    }
    BATON_RETURN_IF_ERROR(on_message(message));
  }
}

// Verifies a complete stream (checksums, coverage, trailer digest) against
// the model its own header names; returns the segment.
absl::StatusOr<KvSegment> verify_stream(const std::vector<v1::KvStreamMessage>& messages) {
  if (messages.empty() || !messages.front().has_header()) {
    return absl::InvalidArgumentError("the stream does not start with a header");
  }
  BATON_ASSIGN_OR_RETURN(ModelFingerprint model,
                         model_fingerprint_from_proto(messages.front().header().fingerprint().model()));
  KvStreamExpectation expected;
  expected.model = model;
  expected.first_position = 0;
  KvStreamReader reader(expected, KvStreamReaderOptions{});
  for (const v1::KvStreamMessage& message : messages) BATON_RETURN_IF_ERROR(reader.consume(message));
  return reader.commit();
}

// Bytes of the file at `path`; 0 if it cannot be read.
uint64_t file_size_or_zero(const std::string& path) {
  std::error_code error;
  const uintmax_t bytes = std::filesystem::file_size(path, error);
  return error ? 0 : static_cast<uint64_t>(bytes);
}

void print_pack_header(const std::string& path, const v1::KvHeader& header, uint64_t file_bytes) {
  std::printf("pack %s\n", path.c_str());
  std::printf("  pack id          %s\n", header.pack_id().empty() ? "-" : header.pack_id().c_str());
  std::printf("  description      %s\n", header.description().empty() ? "-" : header.description().c_str());
  std::printf("  tokens           %u\n", header.token_count());
  std::printf("  codec            %s\n", codec_params_name(header.codec()).c_str());
  const v1::ModelFingerprint& model = header.fingerprint().model();
  std::printf("  model            %s (fingerprint %s)\n",
              model.name().empty() ? model.architecture().c_str() : model.name().c_str(),
              short_digest(model.digest()).c_str());
  std::printf("  prefix digest    %s\n", short_digest(header.prefix_digest(), 64).c_str());
  if (file_bytes > 0) std::printf("  file             %s\n", format_bytes(file_bytes).c_str());
}

// --- build -----------------------------------------------------------------

struct BuildInput {
  std::string text;                 // or
  std::vector<int32_t> tokens;      // (one of the two)
  std::string pack_id, description;
  std::string codec_name;           // "" = int8 default
  std::string out_path;
};

// The pack's codec for a model of `geometry`: a bare width takes its default
// variant (kv_codec_config.h default_kv_codec_config).
absl::StatusOr<KvCodecConfig> resolve_codec(const std::string& name, const KvGeometry& geometry) {
  if (name.empty() || name == "int8") return default_kv_codec_config(KvCodecConfig::Bits::kInt8, geometry);
  if (name == "int4") return default_kv_codec_config(KvCodecConfig::Bits::kInt4, geometry);
  if (name == "f16") return default_kv_codec_config(KvCodecConfig::Bits::kF16, geometry);
  BATON_ASSIGN_OR_RETURN(KvCodecConfig config, parse_kv_codec_config(name));
  BATON_RETURN_IF_ERROR(config.validate(geometry));
  return config;
}

// Computes the pack with the engine in this process.
absl::StatusOr<uint64_t> build_locally(const BuildInput& input, const std::string& model_path, int threads) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(model_path));
  std::vector<int32_t> tokens = input.tokens;
  if (tokens.empty()) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::FromGguf(model->file()));
    tokens = tokenizer->encode(input.text);
  }
  if (tokens.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  BATON_RETURN_IF_ERROR(check_tokens(tokens, model->spec().n_vocab));
  Engine engine(*model, EngineOptions{threads, 64});
  const KvGeometry geometry = engine.kv_geometry();
  BATON_ASSIGN_OR_RETURN(KvCodecConfig codec, resolve_codec(input.codec_name, geometry));
  F32KvCache cache(geometry, static_cast<int64_t>(tokens.size()));
  std::vector<float> logits;
  BATON_RETURN_IF_ERROR(engine.prefill(tokens, cache, &logits));

  KvStreamHeaderInfo info;
  BATON_ASSIGN_OR_RETURN(info.model, model_fingerprint(*model));
  info.codec = codec;
  info.first_position = 0;
  info.token_ids = tokens;
  info.prefix_digest = prefix_digest(tokens);
  info.pack_id = input.pack_id;
  info.description = input.description;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvPackFileWriter> file, KvPackFileWriter::create(input.out_path));
  KvStreamWriter writer(file->sink());
  const KvRope rope = kv_rope_of(*model);
  BATON_RETURN_IF_ERROR(write_kv_segment(cache, info, &rope, writer));
  BATON_RETURN_IF_ERROR(file->commit());
  return writer.encoded_bytes();
}

// Asks the cloud for the KV of the whole prompt and saves its stream with
// the pack id and description set in the header (outside every digest).
absl::StatusOr<uint64_t> build_on_cloud(const BuildInput& input, const RpcTarget& target) {
  v1::PrefillRequest request;
  if (!input.tokens.empty()) {
    for (int32_t id : input.tokens) request.mutable_tokens()->add_ids(static_cast<uint32_t>(id));
  } else {
    request.set_text(input.text);
  }
  request.set_first_position(0);
  if (input.codec_name == "auto") {
    return absl::InvalidArgumentError("--codec auto is the edge's choice per request; a pack needs a codec name");
  }
  if (!input.codec_name.empty()) BATON_RETURN_IF_ERROR(set_requested_codec(input.codec_name, request.mutable_codec()));
  auto stub = v1::Prefill::NewStub(open_channel(target));
  std::vector<v1::KvStreamMessage> messages;
  ProgressLine progress(stderr);
  uint64_t received_bytes = 0;
  grpc::Status status = call_with_retry(target, deadline_after(target), [&](grpc::ClientContext& context,
                                                                            bool* started) {
    messages.clear();
    std::unique_ptr<grpc::ClientReader<v1::KvStreamMessage>> reader = stub->Prefill(&context, request);
    v1::KvStreamMessage message;
    while (reader->Read(&message)) {
      *started = true;
      if (message.has_block()) {
        received_bytes += message.block().encoded_size();
        progress.update(absl::StrFormat("[pack] layer %d  %s", message.block().layer(), format_bytes(received_bytes)));
      }
      messages.push_back(std::move(message));
    }
    return reader->Finish();
  });
  progress.clear();
  if (!status.ok()) return absl::UnavailableError(describe_rpc_error(target, "Prefill", status));
  BATON_ASSIGN_OR_RETURN(KvSegment segment, verify_stream(messages));
  (void)segment;
  v1::KvHeader* header = messages.front().mutable_header();
  header->set_pack_id(input.pack_id);
  header->set_description(input.description);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<KvPackFileWriter> file, KvPackFileWriter::create(input.out_path));
  for (const v1::KvStreamMessage& message : messages) BATON_RETURN_IF_ERROR(file->append(message));
  BATON_RETURN_IF_ERROR(file->commit());
  return received_bytes;
}

// The flags of `baton pack build`, bound to `*out` and `*prompt`.
struct BuildFlags {
  std::string cloud, model_path;
  PromptFlags prompt;
  ChannelSecurityOptions security;
  int64_t threads = 0;
  std::chrono::milliseconds timeout{600'000};
};

std::unique_ptr<FlagSet> build_flag_set(BuildFlags* f, BuildInput* input) {
  auto flag_set = std::make_unique<FlagSet>(
      "baton pack build",
      "[--cloud ADDR | --model FILE] (-p TEXT | --prompt-file F | --prompt-tokens IDS) --out FILE [flags]",
      "Computes the KV of a prompt start and writes it as a prefix pack file: on the cloud "
      "(--cloud, its Prefill from position 0) or with the CPU engine here (--model). The "
      "text is tokenized as the model's tokenizer does for a prompt (BOS as its metadata says). "
      "An edge agent indexes the packs in its --packs DIR named <id>.batonkv at start; "
      "'baton pack push' uploads one to the cloud.");
  FlagSet& flags = *flag_set;
  add_cloud_address_flag(flags, &f->cloud, "cloud prefill service that computes the KV (unless --model)");
  flags.add_string("model", &f->model_path, "compute here with this GGUF model instead", "FILE");
  add_prompt_flags(flags, &f->prompt,
                   {"the pack's text (also -p)", "read the pack's text from a file",
                    "the pack's tokens as comma-separated ids"});
  flags.add_string("id", &input->pack_id, "pack id: [A-Za-z0-9._-], at most 128 characters", "ID");
  flags.add_string("description", &input->description, "what the pack holds (free text)", "TEXT");
  flags.add_string("codec", &input->codec_name, "KV codec (f16, int8, int4 or a full name); default int8", "NAME");
  flags.add_string("out", &input->out_path, "pack file to write", "FILE");
  add_cloud_channel_flags(flags, &f->security);
  flags.add_int64("threads", &f->threads, "with --model: CPU threads; 0: one per core");
  flags.add_duration("timeout", &f->timeout, "with --cloud: deadline of the Prefill call");
  flags.require("out");
  flags.require("id");
  return flag_set;
}

absl::Status pack_build(const Args& args) {
  BuildFlags f;
  BuildInput input;
  std::unique_ptr<FlagSet> flags = build_flag_set(&f, &input);
  if (std::optional<absl::Status> done = parse_flags(*flags, with_prompt_short_flag(args))) return *done;
  // --model computes here; else the cloud (its default address unless --cloud).
  if (flags->is_set("cloud") && !f.model_path.empty()) {
    return pack_usage_error("build", "give one of --cloud ADDR, --model FILE, not both");
  }
  if (!f.model_path.empty()) f.cloud.clear();
  if (!flags->positional().empty()) {
    return pack_usage_error("build", "unexpected argument '" + flags->positional()[0] + "'");
  }
  if (!valid_pack_id(input.pack_id)) {
    return pack_usage_error("build", "--id: '" + input.pack_id + "' is not 1..128 characters of [A-Za-z0-9._-]");
  }
  // A pack is read by any edge of the model, with or without a calibration.
  if (absl::StartsWith(input.codec_name, "tc-")) {
    return pack_usage_error("build", "--codec " + input.codec_name +
                                         ": packs cannot use the transform codec (it needs the calibration on both "
                                         "ends); use f16, int8, int4 or another full name");
  }
  BATON_ASSIGN_OR_RETURN(PromptInput prompt, read_prompt(f.prompt, "pack build", /*required=*/true));
  input.text = std::move(prompt.text);
  input.tokens = std::move(prompt.tokens);
  absl::StatusOr<uint64_t> bytes;
  if (!f.cloud.empty()) {
    absl::StatusOr<RpcTarget> target =
        make_rpc_target("cloud", f.cloud, "cloud prefill service", f.timeout, f.security);
    if (!target.ok()) return pack_usage_error("build", std::string(target.status().message()));
    bytes = build_on_cloud(input, *target);
  } else {
    bytes = build_locally(input, f.model_path, static_cast<int>(f.threads));
  }
  if (!bytes.ok()) return bytes.status();
  BATON_ASSIGN_OR_RETURN(v1::KvHeader header, read_kv_pack_header(input.out_path));
  // The pack's size is its file's, in every pack command (build, push,
  // pull, ls, info); the encoded KV inside it is named as such.
  std::printf("wrote pack '%s' to %s: %u tokens, codec %s, file %s (encoded KV %s)\n", input.pack_id.c_str(),
              input.out_path.c_str(), header.token_count(), codec_params_name(header.codec()).c_str(),
              format_bytes(file_size_or_zero(input.out_path)).c_str(), format_bytes(*bytes).c_str());
  return absl::OkStatus();
}

// --- push ------------------------------------------------------------------

absl::Status pack_push(const Args& args) {
  std::string cloud;
  ChannelSecurityOptions security;
  std::chrono::milliseconds timeout{600'000};
  FlagSet flags("baton pack push", "[--cloud ADDR] FILE [flags]",
                "Uploads a pack file to the cloud prefill service (PutPrefix); Prefill requests naming "
                "the pack then skip its tokens. Re-uploading the same prefix changes nothing.");
  add_cloud_address_flag(flags, &cloud, "cloud prefill service");
  add_cloud_channel_flags(flags, &security);
  flags.add_duration("timeout", &timeout, "deadline of the upload");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 1) return pack_usage_error("push", "give exactly one pack FILE");
  const std::string path = flags.positional()[0];
  absl::StatusOr<RpcTarget> target = make_rpc_target("cloud", cloud, "cloud prefill service", timeout, security);
  if (!target.ok()) return target_error("pack push", target.status());
  // Check the file first: a local error is clearer than the server's.
  std::vector<v1::KvStreamMessage> messages;
  if (absl::Status read = for_each_pack_message(path, [&](const v1::KvStreamMessage& m) {
        messages.push_back(m);
        return absl::OkStatus();
      });
      !read.ok()) {
    return read;
  }
  if (absl::StatusOr<KvSegment> verified = verify_stream(messages); !verified.ok()) {
    return with_prefix(path, verified.status());
  }
  auto stub = v1::Prefill::NewStub(open_channel(*target));
  v1::PutPrefixResponse response;
  grpc::Status status = call_with_retry(*target, deadline_after(*target), [&](grpc::ClientContext& context, bool*) {
    std::unique_ptr<grpc::ClientWriter<v1::KvStreamMessage>> writer = stub->PutPrefix(&context, &response);
    for (const v1::KvStreamMessage& message : messages) {
      if (!writer->Write(message)) break;  // the server ended the call; Finish says why
    }
    writer->WritesDone();
    return writer->Finish();
  });
  if (!status.ok()) return absl::UnavailableError(describe_rpc_error(*target, "PutPrefix", status));
  std::printf("%s pack '%s' on %s: %u tokens, file %s; the cloud holds %s for it (the encoded stream + its "
              "decoded f32 KV, counted against your quota), prefix %s\n",
              response.already_present() ? "already had" : "stored", response.pack_id().c_str(),
              target->address.c_str(), response.token_count(), format_bytes(file_size_or_zero(path)).c_str(),
              format_bytes(response.stored_bytes()).c_str(), short_digest(response.prefix_digest()).c_str());
  return absl::OkStatus();
}

// --- delete ------------------------------------------------------------------

absl::Status pack_delete(const Args& args) {
  std::string cloud;
  ChannelSecurityOptions security;
  std::chrono::milliseconds timeout{30'000};
  FlagSet flags("baton pack delete", "[--cloud ADDR] ID [flags]",
                "Deletes a prefix pack of your tenant on the cloud prefill service (DeletePrefix) and frees its "
                "bytes from your pack quota. Exit 1 when the cloud has no such pack for you.");
  add_cloud_address_flag(flags, &cloud, "cloud prefill service");
  add_cloud_channel_flags(flags, &security);
  flags.add_duration("timeout", &timeout, "deadline of the call");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 1) return pack_usage_error("delete", "give exactly one pack ID");
  const std::string id = flags.positional()[0];
  if (!valid_pack_id(id)) return pack_usage_error("delete", "'" + id + "' is not 1..128 characters of [A-Za-z0-9._-]");
  absl::StatusOr<RpcTarget> target = make_rpc_target("cloud", cloud, "cloud prefill service", timeout, security);
  if (!target.ok()) return target_error("pack delete", target.status());
  auto stub = v1::Prefill::NewStub(open_channel(*target));
  v1::DeletePrefixRequest request;
  request.set_pack_id(id);
  v1::DeletePrefixResponse response;
  grpc::Status status = call_with_retry(*target, deadline_after(*target), [&](grpc::ClientContext& context, bool*) {
    return stub->DeletePrefix(&context, request, &response);
  });
  if (!status.ok()) return absl::UnavailableError(describe_rpc_error(*target, "DeletePrefix", status));
  std::printf("deleted pack '%s' on %s: %s freed\n", response.pack_id().c_str(), target->address.c_str(),
              format_bytes(response.freed_bytes()).c_str());
  return absl::OkStatus();
}

// --- pull / ls (edge) ------------------------------------------------------

void print_pack_info(const v1::PackInfo& p) {
  std::printf("%-24s %8u %-24s %10s  %-16s %s\n", p.pack_id().c_str(), p.token_count(),
              codec_params_name(p.codec()).c_str(), format_bytes(p.file_bytes()).c_str(),
              short_digest(p.prefix_digest()).c_str(), p.description().c_str());
}

absl::Status pack_pull(const Args& args) {
  std::string edge;
  bool overwrite = false;
  std::chrono::milliseconds timeout{600'000};
  FlagSet flags("baton pack pull", "[--edge ADDR] ID [flags]",
                "Has the edge agent fetch a pack from its cloud (GetPrefix) into its pack directory.");
  add_edge_address_flag(flags, &edge);
  ChannelSecurityOptions security;
  add_edge_channel_flags(flags, &security);
  flags.add_bool("overwrite", &overwrite, "replace a local pack with the same id");
  flags.add_duration("timeout", &timeout, "deadline of the pull");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 1) return pack_usage_error("pull", "give exactly one pack ID");
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", edge, "edge agent", timeout, security);
  if (!target.ok()) return pack_usage_error("pull", std::string(target.status().message()));
  v1::PullPackRequest request;
  request.set_pack_id(flags.positional()[0]);
  request.set_overwrite(overwrite);
  EdgeClient client(*target);
  ProgressLine progress(stderr);
  std::optional<v1::PackInfo> done;
  grpc::Status status = client.pull_pack(request, [&](const v1::PullPackResponse& event) {
    if (event.has_progress()) progress.update(format_progress(event.progress(), 0));
    if (event.has_done()) done = event.done();
  });
  progress.clear();
  if (!status.ok()) return absl::UnavailableError(client.describe("PullPack", status));
  if (!done) return absl::DataLossError("the edge agent ended PullPack without the stored pack");
  std::printf("pulled pack '%s': %u tokens, file %s, kept at %s\n", done->pack_id().c_str(), done->token_count(),
              format_bytes(done->file_bytes()).c_str(), done->path().c_str());
  return absl::OkStatus();
}

absl::Status pack_ls(const Args& args) {
  std::string edge;
  bool json = false;
  std::chrono::milliseconds timeout{30'000};
  FlagSet flags("baton pack ls", "[--edge ADDR] [--json]", "Lists the prefix packs the edge agent holds.");
  add_edge_address_flag(flags, &edge);
  ChannelSecurityOptions security;
  add_edge_channel_flags(flags, &security);
  flags.add_bool("json", &json, "print the response as one JSON object");
  flags.add_duration("timeout", &timeout, "deadline of the call");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (!flags.positional().empty()) return pack_usage_error("ls", "takes no arguments");
  absl::StatusOr<RpcTarget> target = make_rpc_target("edge", edge, "edge agent", timeout, security);
  if (!target.ok()) return pack_usage_error("ls", std::string(target.status().message()));
  EdgeClient client(*target);
  v1::ListPacksResponse response;
  grpc::Status status = client.list_packs(&response);
  if (!status.ok()) return absl::UnavailableError(client.describe("ListPacks", status));
  if (json) {
    std::printf("%s\n", proto_to_json(response).c_str());
    return absl::OkStatus();
  }
  if (response.packs().empty()) {
    std::printf("no packs on the edge agent at %s\n", target->address.c_str());
    return absl::OkStatus();
  }
  std::printf("%-24s %8s %-24s %10s  %-16s %s\n", "PACK", "TOKENS", "CODEC", "SIZE", "PREFIX", "DESCRIPTION");
  for (const v1::PackInfo& p : response.packs()) print_pack_info(p);
  return absl::OkStatus();
}

absl::Status pack_info(const Args& args) {
  bool json = false, verify = false;
  FlagSet flags("baton pack info", "FILE [--json] [--verify]", "Prints a pack file's header.");
  flags.add_bool("json", &json, "print the header as one JSON object");
  flags.add_bool("verify", &verify, "also check every block and the trailer digest");
  if (std::optional<absl::Status> done = parse_flags(flags, args)) return *done;
  if (flags.positional().size() != 1) return pack_usage_error("info", "give exactly one pack FILE");
  const std::string path = flags.positional()[0];
  absl::StatusOr<v1::KvHeader> header = read_kv_pack_header(path);
  if (!header.ok()) return with_prefix(path, header.status());
  if (verify) {
    std::vector<v1::KvStreamMessage> messages;
    absl::Status read = for_each_pack_message(path, [&](const v1::KvStreamMessage& m) {
      messages.push_back(m);
      return absl::OkStatus();
    });
    if (!read.ok()) return read;
    if (absl::StatusOr<KvSegment> verified = verify_stream(messages); !verified.ok()) {
      return with_prefix(path, verified.status());
    }
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const uint64_t file_bytes = in ? static_cast<uint64_t>(in.tellg()) : 0;
  if (json) {
    std::printf("%s\n", proto_to_json(*header).c_str());
  } else {
    print_pack_header(path, *header, file_bytes);
    if (verify) std::printf("  verified         every block checksum and the trailer digest\n");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status pack_command(const Args& args) {
  if (std::optional<absl::Status> help = subcommand_help(args, kPackUsage, /*help_word=*/true)) return *help;
  const std::string action = args[0];
  const Args rest(args.begin() + 1, args.end());
  if (action == "build") return pack_build(rest);
  if (action == "push") return pack_push(rest);
  if (action == "delete") return pack_delete(rest);
  if (action == "pull") return pack_pull(rest);
  if (action == "ls") return pack_ls(rest);
  if (action == "info") return pack_info(rest);
  return exit_status(2, absl::StrCat("baton pack: unknown action '", action, "'\n\n", kPackUsage));
}

}  // namespace baton::cli
