// net/http_client.h against a small Beast server on 127.0.0.1 run by the test:
// streamed (chunked) bodies, keep-alive reuse, a pooled connection the server
// dropped (retried once on a fresh one), error statuses, refused connections,
// timeouts, and the blocking http_request.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"

namespace loom::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Reply {
  int status = 200;
  std::vector<std::string> pieces;  // the body, sent as one chunk each
  bool close_after = false;         // drop the connection after this reply (no Connection: close)
  std::chrono::milliseconds delay{0};
};

// One thread accepts, one thread per connection answers its requests in turn.
class TestServer {
 public:
  using Handler = std::function<Reply(const http::request<http::string_body>&)>;

  explicit TestServer(Handler handler) : handler_(std::move(handler)) {
    acceptor_.open(tcp::v4());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~TestServer() {
    {
      std::lock_guard<std::mutex> lk(delay_mu_);
      stopping_ = true;
    }
    delay_cv_.notify_all();  // ends a reply's delay early
    beast::error_code ec;
    {  // wake the blocking accept()
      tcp::socket wake(io_);
      wake.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
      accept_thread_.join();
    }
    acceptor_.close(ec);
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto& s : sockets_) {
        s->shutdown(tcp::socket::shutdown_both, ec);
        s->close(ec);
      }
    }
    for (auto& t : conn_threads_) t.join();
  }

  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int connections() const { return connections_; }
  std::vector<http::request<http::string_body>> requests() {
    std::lock_guard<std::mutex> lk(mu_);
    return requests_;
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      auto sock = std::make_shared<tcp::socket>(io_);
      beast::error_code ec;
      acceptor_.accept(*sock, ec);
      if (ec || stopping_) return;
      ++connections_;
      std::lock_guard<std::mutex> lk(mu_);
      sockets_.push_back(sock);
      conn_threads_.emplace_back([this, sock] { serve(*sock); });
    }
  }

  void serve(tcp::socket& sock) {
    beast::flat_buffer buf;
    for (;;) {
      http::request<http::string_body> req;
      beast::error_code ec;
      http::read(sock, buf, req, ec);
      if (ec) return;
      {
        std::lock_guard<std::mutex> lk(mu_);
        requests_.push_back(req);
      }
      const Reply r = handler_(req);
      if (r.delay.count() > 0) {
        std::unique_lock<std::mutex> lk(delay_mu_);
        if (delay_cv_.wait_for(lk, r.delay, [this] { return stopping_.load(); }))
          return;  // the server is going: the destructor closes the socket
      }
      http::response<http::empty_body> head{static_cast<http::status>(r.status), 11};
      head.chunked(true);
      head.keep_alive(true);
      http::response_serializer<http::empty_body> sr{head};
      http::write_header(sock, sr, ec);
      for (const auto& p : r.pieces) asio::write(sock, http::make_chunk(asio::buffer(p)), ec);
      asio::write(sock, http::make_chunk_last(), ec);
      if (ec || r.close_after) {
        sock.shutdown(tcp::socket::shutdown_both, ec);
        sock.close(ec);
        return;
      }
    }
  }

  Handler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex delay_mu_;
  std::condition_variable delay_cv_;
  std::atomic<int> connections_{0};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> conn_threads_;
  std::vector<http::request<http::string_body>> requests_;
};

struct Result {
  int status = -1;
  std::string body;
  std::string error = "(not done)";
  int status_calls = 0, done_calls = 0;
};

// POSTs each (path, body) in turn, the next one after the previous finished.
std::vector<Result> post_in_turn(const std::string& base_url,
                                 const std::vector<std::pair<std::string, std::string>>& calls,
                                 double timeout_s = 10) {
  asio::io_context io;
  StreamingHttpClient client(io, parse_url(base_url), timeout_s);
  std::vector<Result> results(calls.size());
  std::function<void(size_t)> send = [&](size_t i) {
    if (i == calls.size()) return;
    StreamingHttpClient::Handlers h;
    h.on_status = [&, i](int status) {
      results[i].status = status;
      ++results[i].status_calls;
    };
    h.on_body = [&, i](std::string_view piece) { results[i].body.append(piece); };
    h.on_done = [&, i](const std::string& error) {
      results[i].error = error;
      ++results[i].done_calls;
      send(i + 1);
    };
    client.post(calls[i].first, calls[i].second, std::move(h));
  };
  send(0);
  io.run();
  return results;
}

TEST(StreamingHttpClient, StreamsAChunkedBodyAndSendsTheRequestAsGiven) {
  TestServer server([](const auto&) { return Reply{200, {"data: a\n\n", "data: b\n\n"}}; });
  const auto r = post_in_turn(server.url("/base/"), {{"/v1/completions", R"({"x":1})"}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[0].status_calls, 1);
  EXPECT_EQ(r[0].body, "data: a\n\ndata: b\n\n");
  EXPECT_EQ(r[0].error, "");
  EXPECT_EQ(r[0].done_calls, 1);
  const auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method(), http::verb::post);
  EXPECT_EQ(reqs[0].target(), "/base/v1/completions");
  EXPECT_EQ(reqs[0][http::field::content_type], "application/json");
  EXPECT_EQ(reqs[0].body(), R"({"x":1})");
}

TEST(StreamingHttpClient, ReusesAKeptAliveConnection) {
  TestServer server([](const auto& req) { return Reply{200, {req.body()}}; });
  const auto r = post_in_turn(server.url(), {{"/a", "1"}, {"/b", "2"}, {"/c", "3"}});
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].error, "");
    EXPECT_EQ(r[i].body, std::to_string(i + 1));
  }
  EXPECT_EQ(server.connections(), 1);
}

TEST(StreamingHttpClient, RetriesOnceWhenAPooledConnectionWasDropped) {
  TestServer server([](const auto& req) {
    Reply r{200, {"ok " + req.body()}};
    r.close_after = true;  // as a server whose keep-alive timer fired
    return r;
  });
  const auto r = post_in_turn(server.url(), {{"/a", "1"}, {"/b", "2"}});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].error, "");
  EXPECT_EQ(r[1].error, "");
  EXPECT_EQ(r[1].body, "ok 2");
  EXPECT_EQ(r[1].status_calls, 1);
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(StreamingHttpClient, ReportsErrorStatusesWithTheirBody) {
  TestServer server([](const auto&) { return Reply{503, {R"({"error":"draining"})"}}; });
  const auto r = post_in_turn(server.url(), {{"/v1/completions", "{}"}});
  EXPECT_EQ(r[0].status, 503);
  EXPECT_EQ(r[0].body, R"({"error":"draining"})");
  EXPECT_EQ(r[0].error, "");  // a response arrived: not a transport error
}

TEST(StreamingHttpClient, RefusedConnectionEndsWithAnError) {
  std::string url;
  {
    TestServer gone([](const auto&) { return Reply{}; });
    url = gone.url();
  }  // nothing listens there any more
  const auto r = post_in_turn(url, {{"/x", "{}"}});
  EXPECT_EQ(r[0].status_calls, 0);
  EXPECT_EQ(r[0].done_calls, 1);
  EXPECT_NE(r[0].error.find("connect"), std::string::npos) << r[0].error;
}

TEST(StreamingHttpClient, TimesOutAWaitForTheServer) {
  TestServer server([](const auto&) {
    Reply r{200, {"late"}};
    r.delay = std::chrono::seconds(30);  // cut short when the server goes
    return r;
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = post_in_turn(server.url(), {{"/x", "{}"}}, 0.2);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r[0].error.find("read"), std::string::npos) << r[0].error;
  EXPECT_LT(s, 10.0);  // the 0.2 s timeout, with room for a loaded machine
}

TEST(StreamingHttpClient, SendsAnyMethodWithHeaders) {
  TestServer server([](const auto& req) {
    return Reply{200, {std::string(req.method_string()) + " " + std::string(req[http::field::authorization])}};
  });
  asio::io_context io;
  StreamingHttpClient client(io, parse_url(server.url()), 10);
  Result r;
  StreamingHttpClient::Handlers h;
  h.on_status = [&](int status) { r.status = status; };
  h.on_body = [&](std::string_view piece) { r.body.append(piece); };
  h.on_done = [&](const std::string& error) { r.error = error; };
  client.send("GET", "/v1/models", "", {{"Authorization", "Bearer k"}}, std::move(h));
  io.run();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "GET Bearer k");
  EXPECT_EQ(r.error, "");
}

// A client that goes away: the connection closes at once, on_done says
// "cancelled" exactly once, and nothing of the stream arrives after it.
TEST(StreamingHttpClient, CancelClosesTheConnection) {
  TestServer server([](const auto&) {
    Reply r{200, {"first"}};
    r.delay = std::chrono::seconds(30);  // cut short when the server goes
    return r;
  });
  asio::io_context io;
  StreamingHttpClient client(io, parse_url(server.url()), 10);
  Result r;
  bool body_after_done = false;
  StreamingHttpClient::Handlers h;
  h.on_status = [&](int status) { r.status = status; };
  h.on_body = [&](std::string_view) { body_after_done = body_after_done || r.done_calls > 0; };
  h.on_done = [&](const std::string& error) {
    r.error = error;
    ++r.done_calls;
  };
  auto cancel = client.send("POST", "/v1/completions", "{}", {}, std::move(h));
  asio::steady_timer timer(io, std::chrono::milliseconds(100));
  timer.async_wait([&](const beast::error_code&) {
    cancel();
    cancel();  // twice: still one on_done
  });
  const auto t0 = std::chrono::steady_clock::now();
  io.run();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_EQ(r.error, "cancelled");
  EXPECT_EQ(r.done_calls, 1);
  EXPECT_EQ(r.status, -1);  // cancelled before the answer
  EXPECT_FALSE(body_after_done);
  cancel();  // after the end: nothing
  EXPECT_EQ(r.done_calls, 1);
}

TEST(HttpRequest, BlockingGetAndPost) {
  TestServer server([](const auto& req) {
    return Reply{
        req.method() == http::verb::get ? 200 : 201,
        {std::string(req.method_string()) + " " + std::string(req.target()) + " " + req.body()}};
  });
  const Url url = parse_url(server.url("/p"));
  HttpResult g = http_request(url, "GET", "/metrics", "", 5);
  EXPECT_EQ(g.status, 200);
  EXPECT_EQ(g.body, "GET /p/metrics ");
  EXPECT_EQ(g.error, "");
  HttpResult p = http_request(url, "POST", "/tokenize", R"({"prompt":"hi"})", 5);
  EXPECT_EQ(p.status, 201);
  EXPECT_EQ(p.body, R"(POST /p/tokenize {"prompt":"hi"})");
}

TEST(HttpRequest, NoServerGivesStatusZeroAndAnError) {
  std::string url;
  {
    TestServer gone([](const auto&) { return Reply{}; });
    url = gone.url();
  }
  HttpResult r = http_request(parse_url(url), "GET", "/", "", 2);
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
}

}  // namespace
}  // namespace loom::net
