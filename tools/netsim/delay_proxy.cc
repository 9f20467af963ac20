// An HTTP CONNECT proxy on 127.0.0.1 that delivers every byte `--delay_ms`
// (or `--delay_us`) late in both directions (a slow network path). gRPC
// clients use it when started with grpc_proxy=http://127.0.0.1:PORT, so one
// process can be put behind a slow link while the others talk directly
// (tests/fault_slow_network_test), or every worker of a simulated cluster
// behind added latency (tools/netsim/cluster.sh up --delay_us).
//
//   delay_proxy --port_file=F (--delay_ms=N | --delay_us=N)
//               [--allow=CIDR[,CIDR...]] [--max_seconds=S]
//
// Only CONNECT to 127.0.0.1 / localhost, and to IPv4 addresses in --allow
// (e.g. netsim's 198.18.0.0/15), is forwarded. The proxy exits after
// --max_seconds (default 600) so a run that forgets it cannot leak it.
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
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::microseconds g_delay{50000};

// IPv4 networks CONNECT may reach besides loopback (host byte order).
struct Network {
  uint32_t base = 0;
  uint32_t mask = 0;
};
std::vector<Network> g_allow;

// "a.b.c.d/n" (or a bare address) -> network; false when malformed.
bool ParseNetwork(const std::string& s, Network* out) {
  const size_t slash = s.find('/');
  const std::string addr = s.substr(0, slash);
  int bits = 32;
  if (slash != std::string::npos) {
    char* end = nullptr;
    const long b = std::strtol(s.c_str() + slash + 1, &end, 10);
    if (*end != '\0' || b < 0 || b > 32) return false;
    bits = static_cast<int>(b);
  }
  in_addr a{};
  if (inet_pton(AF_INET, addr.c_str(), &a) != 1) return false;
  out->mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
  out->base = ntohl(a.s_addr) & out->mask;
  return true;
}

// The address CONNECT `host` goes to, or false when it is not allowed.
bool Upstream(const char* host, in_addr* out) {
  if (std::strcmp(host, "localhost") == 0 ||
      std::strcmp(host, "127.0.0.1") == 0) {
    out->s_addr = htonl(INADDR_LOOPBACK);
    return true;
  }
  if (inet_pton(AF_INET, host, out) != 1) return false;
  const uint32_t h = ntohl(out->s_addr);
  for (const Network& n : g_allow) {
    if ((h & n.mask) == n.base) return true;
  }
  return false;
}

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
    queue.emplace_back(Clock::now() + g_delay,
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
  in_addr to{};
  if (std::sscanf(head.c_str(), "CONNECT %255[^:]:%d", host, &port) != 2 ||
      !Upstream(host, &to)) {
    const char* bad = "HTTP/1.1 403 Forbidden\r\n\r\n";
    WriteAll(client, bad, std::strlen(bad));
    close(client);
    return;
  }
  const int upstream = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = to;
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
  const std::string delay_us = Flag(argc, argv, "delay_us", "");
  g_delay = delay_us.empty()
                ? std::chrono::milliseconds(
                      std::atoi(Flag(argc, argv, "delay_ms", "50").c_str()))
                : std::chrono::microseconds(std::atoi(delay_us.c_str()));
  if (g_delay.count() < 0) {
    std::fprintf(stderr, "delay_proxy: the delay must be >= 0\n");
    return 2;
  }
  const std::string allow = Flag(argc, argv, "allow", "");
  for (size_t at = 0; at < allow.size();) {
    size_t comma = allow.find(',', at);
    if (comma == std::string::npos) comma = allow.size();
    Network n;
    if (!ParseNetwork(allow.substr(at, comma - at), &n)) {
      std::fprintf(stderr, "delay_proxy: --allow: not a CIDR network: %s\n",
                   allow.substr(at, comma - at).c_str());
      return 2;
    }
    g_allow.push_back(n);
    at = comma + 1;
  }
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
  std::fprintf(stderr, "delay_proxy: 127.0.0.1:%d, delay %lld us\n", port,
               static_cast<long long>(g_delay.count()));
  if (!port_file.empty()) std::ofstream(port_file) << port << "\n";
  alarm(static_cast<unsigned>(max_seconds));  // SIGALRM ends the process
  for (;;) {
    const int client = accept(listener, nullptr, nullptr);
    if (client < 0) continue;
    std::thread(Serve, client).detach();
  }
}
