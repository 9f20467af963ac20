// Test helper: an HTTP CONNECT proxy on 127.0.0.1 that delivers every byte
// `--delay_ms` late in both directions (a slow network path). gRPC clients
// use it when started with grpc_proxy=http://127.0.0.1:PORT, so one process
// can be put behind a slow link while the others talk directly.
//
//   delay_proxy --port_file=F --delay_ms=N [--max_seconds=S]
//
// Only CONNECT to 127.0.0.1 / localhost is forwarded. The proxy exits after
// --max_seconds (default 600) so a test that forgets it cannot leak it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

int g_delay_ms = 50;

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// One direction: a reader thread stamps each chunk, a writer thread sends
// it once its delay has passed (so the link keeps its bandwidth and only
// gains latency).
void Pipe(int from, int to) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<Clock::time_point, std::string>> queue;
  bool closed = false;
  std::thread writer([&] {
    for (;;) {
      std::pair<Clock::time_point, std::string> item;
      {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [&] { return closed || !queue.empty(); });
        if (queue.empty()) break;
        item = std::move(queue.front());
        queue.pop_front();
      }
      std::this_thread::sleep_until(item.first);
      if (!WriteAll(to, item.second.data(), item.second.size())) break;
    }
    shutdown(to, SHUT_WR);
  });
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(from, buf, sizeof(buf), 0);
    if (n <= 0) break;
    std::lock_guard<std::mutex> l(mu);
    queue.emplace_back(Clock::now() + std::chrono::milliseconds(g_delay_ms),
                       std::string(buf, static_cast<size_t>(n)));
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> l(mu);
    closed = true;
    cv.notify_one();
  }
  writer.join();
}

void Serve(int client) {
  // Read the CONNECT request up to the blank line.
  std::string head;
  char c;
  while (head.size() < 4096 && head.find("\r\n\r\n") == std::string::npos) {
    if (recv(client, &c, 1, 0) != 1) {
      close(client);
      return;
    }
    head.push_back(c);
  }
  char host[256] = {0};
  int port = 0;
  if (std::sscanf(head.c_str(), "CONNECT %255[^:]:%d", host, &port) != 2 ||
      (std::strcmp(host, "127.0.0.1") != 0 &&
       std::strcmp(host, "localhost") != 0)) {
    const char* bad = "HTTP/1.1 403 Forbidden\r\n\r\n";
    WriteAll(client, bad, std::strlen(bad));
    close(client);
    return;
  }
  const int upstream = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    const char* bad = "HTTP/1.1 502 Bad Gateway\r\n\r\n";
    WriteAll(client, bad, std::strlen(bad));
    close(upstream);
    close(client);
    return;
  }
  const int one = 1;
  setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::fprintf(stderr, "delay_proxy: CONNECT %s:%d\n", host, port);
  const char* ok = "HTTP/1.1 200 Connection established\r\n\r\n";
  WriteAll(client, ok, std::strlen(ok));
  std::thread up([=] { Pipe(client, upstream); });
  Pipe(upstream, client);
  up.join();
  close(upstream);
  close(client);
}

std::string Flag(int argc, char** argv, const char* name,
                 const char* fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return argv[i] + prefix.size();
    }
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  g_delay_ms = std::atoi(Flag(argc, argv, "delay_ms", "50").c_str());
  const int max_seconds =
      std::atoi(Flag(argc, argv, "max_seconds", "600").c_str());
  const std::string port_file = Flag(argc, argv, "port_file", "");
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 64) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("delay_proxy: listen");
    return 1;
  }
  const int port = ntohs(addr.sin_port);
  std::fprintf(stderr, "delay_proxy: 127.0.0.1:%d, delay %d ms\n", port,
               g_delay_ms);
  if (!port_file.empty()) std::ofstream(port_file) << port << "\n";
  alarm(static_cast<unsigned>(max_seconds));  // SIGALRM ends the process
  for (;;) {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) continue;
    std::thread(Serve, client).detach();
  }
}
