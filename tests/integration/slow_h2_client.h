// SlowH2Client: a client that stops reading, for the write-stall tests. A
// real HTTP/2 client on a real TCP socket: it sends the connection preface
// with SETTINGS_INITIAL_WINDOW_SIZE = 16 bytes, acknowledges the server's
// SETTINGS, and calls one server-streaming gRPC method (HEADERS with literal
// HPACK fields, then one DATA frame with the gRPC-framed request). It never
// sends a WINDOW_UPDATE, so the server can put at most 16 bytes of the
// response on the wire: every later write stalls, exactly as for a client
// that stopped reading (reading the socket grants no window in HTTP/2, so
// wait_for_stream_end() may read frames without lifting the stall).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <google/protobuf/message_lite.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/util/clock.h"

namespace baton::testing {

class SlowH2Client {
 public:
  static constexpr uint32_t kWindowBytes = 16;  // the flow-control window granted to the server

  // Calls `path` ("/baton.v1.Edge/Generate") on 127.0.0.1:`port` with
  // `request`; returns once the request is sent.
  static absl::StatusOr<std::unique_ptr<SlowH2Client>> Call(int port, const std::string& path,
                                                            const google::protobuf::MessageLite& request) {
    std::unique_ptr<SlowH2Client> client(new SlowH2Client());
    client->fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (client->fd_ < 0) return absl::InternalError("socket() failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(client->fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      return absl::UnavailableError(absl::StrCat("connect to 127.0.0.1:", port, " failed"));
    }
    // The preface, then our SETTINGS: a 16-byte window per stream, no push.
    std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    std::string settings;
    append_setting(settings, 0x2, 0);             // SETTINGS_ENABLE_PUSH
    append_setting(settings, 0x4, kWindowBytes);  // SETTINGS_INITIAL_WINDOW_SIZE
    append_frame(out, kSettings, 0, 0, settings);
    if (absl::Status sent = client->send(out); !sent.ok()) return sent;
    if (absl::Status acked = client->ack_server_settings(); !acked.ok()) return acked;

    std::string headers;
    const std::pair<std::string, std::string> fields[] = {{":method", "POST"},
                                                          {":scheme", "http"},
                                                          {":path", path},
                                                          {":authority", absl::StrCat("127.0.0.1:", port)},
                                                          {"content-type", "application/grpc"},
                                                          {"te", "trailers"}};
    for (const auto& [name, value] : fields) append_literal_header(headers, name, value);
    std::string message = request.SerializeAsString();
    std::string data(1, '\0');  // not compressed
    append_u32(data, static_cast<uint32_t>(message.size()));
    data += message;
    if (data.size() > kMaxFramePayload) return absl::InvalidArgumentError("the request is over one DATA frame");
    out.clear();
    append_frame(out, kHeaders, kEndHeaders, kStreamId, headers);
    append_frame(out, kData, kEndStream, kStreamId, data);
    if (absl::Status sent = client->send(out); !sent.ok()) return sent;
    return client;
  }

  ~SlowH2Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  SlowH2Client(const SlowH2Client&) = delete;
  SlowH2Client& operator=(const SlowH2Client&) = delete;

  // Reads frames (granting no window) until the server ends the stream:
  // "RST_STREAM <code>", "trailers", "GOAWAY" or "closed"; DEADLINE_EXCEEDED
  // when it has not ended within `timeout`. While the window is shut, the
  // server cannot end a stream that still has data to send but by
  // cancelling it (trailers with its status, or RST_STREAM).
  absl::StatusOr<std::string> wait_for_stream_end(std::chrono::milliseconds timeout) {
    const SteadyClock::time_point give_up = SteadyClock::now() + timeout;
    while (true) {
      absl::StatusOr<Frame> frame = read_frame(give_up);
      if (absl::IsOutOfRange(frame.status())) return std::string("closed");
      if (!frame.ok()) return frame.status();
      if (frame->type == kGoAway) return std::string("GOAWAY");
      if (frame->stream_id != kStreamId) continue;
      if (frame->type == kRstStream && frame->payload.size() >= 4) {
        return absl::StrCat("RST_STREAM ", read_u32(frame->payload, 0));
      }
      if (frame->type == kHeaders && (frame->flags & kEndStream) != 0) return std::string("trailers");
    }
  }

 private:
  struct Frame {
    uint8_t type = 0;
    uint8_t flags = 0;
    uint32_t stream_id = 0;
    std::string payload;
  };
  static constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4, kGoAway = 0x7;
  static constexpr uint8_t kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4;
  static constexpr uint32_t kStreamId = 1;
  static constexpr size_t kMaxFramePayload = 16384;  // SETTINGS_MAX_FRAME_SIZE's default

  SlowH2Client() = default;

  static void append_u32(std::string& out, uint32_t value) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
  }
  static uint32_t read_u32(const std::string& in, size_t at) {
    uint32_t value = 0;
    for (size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<uint8_t>(in[at + i]);
    return value;
  }
  static void append_setting(std::string& out, uint16_t id, uint32_t value) {
    out.push_back(static_cast<char>(id >> 8));
    out.push_back(static_cast<char>(id & 0xff));
    append_u32(out, value);
  }
  // Frame header: length (24 bits), type, flags, stream id (31 bits).
  static void append_frame(std::string& out, uint8_t type, uint8_t flags, uint32_t stream_id,
                           const std::string& payload) {
    const uint32_t length = static_cast<uint32_t>(payload.size());
    out.push_back(static_cast<char>((length >> 16) & 0xff));
    out.push_back(static_cast<char>((length >> 8) & 0xff));
    out.push_back(static_cast<char>(length & 0xff));
    out.push_back(static_cast<char>(type));
    out.push_back(static_cast<char>(flags));
    append_u32(out, stream_id & 0x7fffffff);
    out += payload;
  }
  // HPACK integer with a 7-bit prefix (RFC 7541 5.1); the H bit (Huffman) stays 0.
  static void append_hpack_length(std::string& out, size_t value) {
    if (value < 127) {
      out.push_back(static_cast<char>(value));
      return;
    }
    out.push_back(static_cast<char>(127));
    value -= 127;
    while (value >= 128) {
      out.push_back(static_cast<char>(0x80 | (value & 0x7f)));
      value >>= 7;
    }
    out.push_back(static_cast<char>(value));
  }
  // "Literal Header Field without Indexing — New Name" (RFC 7541 6.2.2).
  static void append_literal_header(std::string& out, const std::string& name, const std::string& value) {
    out.push_back('\0');
    append_hpack_length(out, name.size());
    out += name;
    append_hpack_length(out, value.size());
    out += value;
  }

  absl::Status send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return absl::UnavailableError("send failed");
      sent += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
  // Exactly `n` bytes; OUT_OF_RANGE when the server closed the connection.
  absl::Status receive(size_t n, std::string& out, SteadyClock::time_point give_up) {
    out.resize(n);
    size_t got = 0;
    while (got < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - SteadyClock::now());
      if (left.count() <= 0) return absl::DeadlineExceededError("no frame from the server in time");
      pollfd descriptor{fd_, POLLIN, 0};
      if (::poll(&descriptor, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r == 0) return absl::OutOfRangeError("the server closed the connection");
      if (r < 0) return absl::UnavailableError("recv failed");
      got += static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<Frame> read_frame(SteadyClock::time_point give_up) {
    std::string header;
    if (absl::Status status = receive(9, header, give_up); !status.ok()) return status;
    Frame frame;
    const uint32_t length = (static_cast<uint32_t>(static_cast<uint8_t>(header[0])) << 16) |
                            (static_cast<uint32_t>(static_cast<uint8_t>(header[1])) << 8) |
                            static_cast<uint8_t>(header[2]);
    frame.type = static_cast<uint8_t>(header[3]);
    frame.flags = static_cast<uint8_t>(header[4]);
    frame.stream_id = read_u32(header, 5) & 0x7fffffff;
    if (absl::Status status = receive(length, frame.payload, give_up); !status.ok()) return status;
    return frame;
  }
  // The server's first SETTINGS must be acknowledged (RFC 9113 6.5.3).
  absl::Status ack_server_settings() {
    const SteadyClock::time_point give_up = SteadyClock::now() + std::chrono::seconds(10);
    while (true) {
      absl::StatusOr<Frame> frame = read_frame(give_up);
      if (!frame.ok()) return frame.status();
      if (frame->type == kSettings && (frame->flags & kAck) == 0) {
        std::string ack;
        append_frame(ack, kSettings, kAck, 0, "");
        return send(ack);
      }
    }
  }

  int fd_ = -1;
};

}  // namespace baton::testing
