// HttpListener: every Baton HTTP listener's bind, accept thread and stop.
#include "common/util/http_listener.h"

#include <httplib.h>

#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(HttpListenerTest, ServesOnAnyFreePortUntilStopped) {
  HttpListener listener(std::make_unique<httplib::Server>(), 2);
  listener.server().Get("/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("pong", "text/plain");
  });
  ASSERT_TRUE(listener.start("127.0.0.1", 0, "127.0.0.1:0", "the test listener").ok());
  ASSERT_GT(listener.port(), 0);
  httplib::Client client("127.0.0.1", listener.port());
  httplib::Result reply = client.Get("/ping");
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->body, "pong");
  listener.stop();
  listener.stop();  // twice is fine
  EXPECT_FALSE(client.Get("/ping")) << "still answering after stop()";
}

TEST(HttpListenerTest, ATakenPortIsUnavailableNamingTheAddress) {
  HttpListener first(std::make_unique<httplib::Server>(), 1);
  ASSERT_TRUE(first.start("127.0.0.1", 0, "127.0.0.1:0", "the first listener").ok());
  const std::string address = "127.0.0.1:" + std::to_string(first.port());
  HttpListener second(std::make_unique<httplib::Server>(), 1);
  absl::Status status = second.start("127.0.0.1", first.port(), address, "the second listener");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot listen on " + address));
}

}  // namespace
}  // namespace baton
