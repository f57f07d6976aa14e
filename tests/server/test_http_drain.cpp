// HttpServer's shutdown drain: a response a handler sends just before its
// request stops counting as in flight still goes out, even when the I/O
// thread that must queue it is busy at that moment; and run() returns only
// once no handler runs on the worker pool.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "server/http_server.h"
#include "socket_client.h"

namespace loom::server {
namespace {

using namespace std::chrono_literals;

using test::connect_to;
using test::read_until_close;
using test::send_all;

TEST(HttpDrain, AResponseSentAsItsRequestEndsGoesOutWhileTheIoThreadIsBusy) {
  HttpServerConfig cfg;
  cfg.port = 0;
  cfg.io_threads = 1;  // one I/O thread, blocked below by an inline handler
  cfg.shutdown_timeout = std::chrono::seconds(5);
  cfg.run_inline = [](const HttpRequest& r) { return r.path() == "/block"; };
  std::atomic<size_t> in_flight{0};
  std::atomic<bool> blocking{false};
  std::promise<std::shared_ptr<ResponseSink>> slow_sink;
  DrainHooks hooks;
  hooks.in_flight = [&] { return in_flight.load(); };
  HttpServer server(
      cfg,
      [&](HttpRequest req, std::shared_ptr<ResponseSink> sink) {
        if (req.path() == "/ping") {
          sink->send({200, "text/plain", "pong", {}});
        } else if (req.path() == "/block") {  // on the I/O thread
          blocking = true;
          std::this_thread::sleep_for(600ms);
          sink->send({200, "text/plain", "unblocked", {}});
        } else {  // answered later, from the test
          ++in_flight;
          slow_sink.set_value(std::move(sink));
        }
      },
      std::move(hooks));
  server.listen();
  const uint16_t port = server.port();
  std::thread runner([&] { server.run(false); });

  const int slow = connect_to(port);
  send_all(slow, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  auto sink = slow_sink.get_future().get();
  // A second connection, accepted (one exchange done) before the acceptor closes.
  const int other = connect_to(port);
  send_all(other, "GET /ping HTTP/1.1\r\nHost: t\r\n\r\n");
  std::string pong;
  char buf[512];
  while (pong.find("pong") == std::string::npos) {
    const ssize_t n = ::recv(other, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << pong;
    pong.append(buf, static_cast<size_t>(n));
  }
  // The exchange ends on the I/O thread once the write completes; the
  // connection must be reading again before the drain starts, or it closes
  // (a second of room for an I/O thread slow to run on a loaded machine).
  std::this_thread::sleep_for(1s);

  server.stop();                   // the drain starts, waiting for /slow
  std::this_thread::sleep_for(100ms);
  send_all(other, "GET /block HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  for (int i = 0; i < 3000 && !blocking; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(blocking) << "the /block request was not handled";
  // The I/O thread is busy: the reply reaches the connection's strand only
  // after it, while the request already stops counting.
  sink->send({200, "text/plain", "slow done", {}});
  sink.reset();
  in_flight = 0;

  const std::string got = read_until_close(slow);
  EXPECT_NE(got.find("200"), std::string::npos) << got;
  EXPECT_NE(got.find("slow done"), std::string::npos) << got;
  runner.join();
  ::close(slow);
  ::close(other);
}

TEST(HttpDrain, RunReturnsOnlyOnceNoHandlerRuns) {
  HttpServerConfig cfg;
  cfg.port = 0;
  std::atomic<bool> started{false}, finished{false};
  HttpServer server(cfg, [&](HttpRequest, std::shared_ptr<ResponseSink> sink) {
    started = true;
    std::this_thread::sleep_for(400ms);  // e.g. a long prompt being tokenised
    finished = true;
    sink->send({200, "text/plain", "late", {}});
  });
  server.listen();
  std::thread runner([&] { server.run(false); });
  const int fd = connect_to(server.port());
  send_all(fd, "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  for (int i = 0; i < 3000 && !started; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(started);
  server.stop();  // nothing counts as in flight: the drain ends at once
  runner.join();
  // What the handler uses may be torn down now: it has returned.
  EXPECT_TRUE(finished);
  ::close(fd);
}

}  // namespace
}  // namespace loom::server
