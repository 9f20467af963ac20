#include "common/platform/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

namespace ps {
namespace {

TEST(Metrics, SnapshotHasPrefixedSeriesWithLabels) {
  MetricsRegistry m;
  m.Counter("pushes_total", "Pushes applied", {{"job", "a"}}).Increment(3);
  m.Gauge("version", "Shard version", {{"job", "a"}}).Set(17);
  m.Histogram("apply_seconds", "Apply latency",
              MetricsRegistry::LatencyBuckets())
      .Observe(0.001);
  // Same name and labels: same counter.
  m.Counter("pushes_total", "Pushes applied", {{"job", "a"}}).Increment();
  const std::string text = m.TextSnapshot();
  EXPECT_NE(text.find("ps_pushes_total{job=\"a\"} 4"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ps_version{job=\"a\"} 17"), std::string::npos) << text;
  EXPECT_NE(text.find("ps_apply_seconds_count 1"), std::string::npos) << text;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

TEST(Metrics, ServesPrometheusTextOverHttp) {
  MetricsRegistry m;
  m.Counter("pulls_total", "Pulls served").Increment(5);
  auto port = m.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);
  const std::string body = HttpGet(*port, "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("ps_pulls_total 5"), std::string::npos) << body;
  EXPECT_EQ(m.Serve("127.0.0.1:0").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Metrics, CollectHooksFillGaugesAtEachSnapshotUntilRemoved) {
  MetricsRegistry m;
  prometheus::Gauge& g = m.Gauge("rows", "Rows held");
  int runs = 0;
  std::unique_ptr<MetricsRegistry::CollectHook> first =
      m.AddCollectHook([&] { g.Set(++runs); });
  EXPECT_EQ(runs, 0);  // not when added
  EXPECT_NE(m.TextSnapshot().find("ps_rows 1\n"), std::string::npos);
  EXPECT_NE(m.TextSnapshot().find("ps_rows 2\n"), std::string::npos);
  // A newer hook runs after the older ones: its figure wins.
  std::unique_ptr<MetricsRegistry::CollectHook> second =
      m.AddCollectHook([&] { g.Set(100 + runs); });
  const std::string text = m.TextSnapshot();
  EXPECT_EQ(runs, 3);
  EXPECT_NE(text.find("ps_rows 103\n"), std::string::npos) << text;
  first.reset();
  second.reset();
  m.TextSnapshot();
  EXPECT_EQ(runs, 3);  // removed: not run again
  EXPECT_EQ(g.Value(), 103);
}

TEST(Metrics, CollectHooksRunAtEachScrape) {
  MetricsRegistry m;
  prometheus::Gauge& g = m.Gauge("scrapes", "Scrapes seen");
  int runs = 0;
  auto hook = m.AddCollectHook([&] { g.Set(++runs); });
  auto port = m.Serve("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_NE(HttpGet(*port, "/metrics").find("ps_scrapes 1\n"),
            std::string::npos);
  EXPECT_NE(HttpGet(*port, "/metrics").find("ps_scrapes 2\n"),
            std::string::npos);
}

TEST(Metrics, CollectHookMayOutliveTheRegistry) {
  std::unique_ptr<MetricsRegistry::CollectHook> hook;
  {
    MetricsRegistry m;
    hook = m.AddCollectHook([] {});
  }
  hook.reset();  // unregisters from what the registry left: no crash
  SUCCEED();
}

TEST(Metrics, UnbindableAddressIsAnError) {
  MetricsRegistry m;
  auto port = m.Serve("203.0.113.1:1");  // not an address of this machine
  EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable)
      << port.status();
}

}  // namespace
}  // namespace ps
