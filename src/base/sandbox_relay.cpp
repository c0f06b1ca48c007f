#include "base/sandbox_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"

namespace autooptim::base {
namespace {

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// No capability left in any set, none to regain: the command runs with what its uid may do.
bool drop_capabilities() {
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return false;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) return false;
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
}

int listen_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 64) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int connect_unix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// connect() that gives up when `stop` is set or after 30 s; errno tells why it failed.
bool connect_until(int fd, const sockaddr* addr, socklen_t len, const std::atomic<bool>& stop) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  bool ok = connect(fd, addr, len) == 0;
  for (int waited_ms = 0; !ok && errno == EINPROGRESS && !stop && waited_ms < 30000; waited_ms += 250) {
    pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 250) <= 0) {
      errno = EINPROGRESS;
      continue;
    }
    int err = 0;
    socklen_t err_len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
    ok = err == 0;
    errno = err;
    break;
  }
  if (!ok && errno == EINPROGRESS) errno = ETIMEDOUT;
  fcntl(fd, F_SETFL, flags);
  return ok;
}

// The exit code that reports `status` the way a shell does.
int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

void parse_endpoint(const std::string& endpoint, std::string* host, int* port) {
  const size_t colon = endpoint.rfind(':');
  const std::string why = "network endpoint '" + endpoint + "' is not HOST:PORT";
  if (colon == std::string::npos || colon == 0 || colon + 1 >= endpoint.size()) throw Error(why);
  std::string h = endpoint.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char* end = nullptr;
  const long p = std::strtol(endpoint.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 1 || p > 65535 || h.find_first_of(" /\t") != std::string::npos) throw Error(why);
  *host = h;
  *port = static_cast<int>(p);
}

void relay_bytes(int a, int b, const std::atomic<bool>& stop) {
  bool a_open = true, b_open = true;  // a -> b and b -> a still flow
  char buf[65536];
  while ((a_open || b_open) && !stop) {
    pollfd p[2] = {{a, static_cast<short>(a_open ? POLLIN : 0), 0}, {b, static_cast<short>(b_open ? POLLIN : 0), 0}};
    const int ready = poll(p, 2, 250);
    if (ready < 0 && errno != EINTR) return;
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int from = i == 0 ? a : b, to = i == 0 ? b : a;
      const ssize_t n = recv(from, buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) return;
      if (n == 0) {  // half close: pass the end of this direction on, keep the other
        shutdown(to, SHUT_WR);
        (i == 0 ? a_open : b_open) = false;
      } else if (!send_all(to, buf, static_cast<size_t>(n))) {
        return;
      }
    }
  }
}

HostRelay::HostRelay(int listen_fd, std::string host, int port)
    : listen_fd_(listen_fd), host_(std::move(host)), port_(port) {
  if (pipe2(wake_, O_CLOEXEC) != 0) throw Error("cannot start the network relay: pipe failed");
  acceptor_ = std::thread([this] { accept_loop(); });
}

HostRelay::~HostRelay() {
  stop_ = true;
  ssize_t n = write(wake_[1], "x", 1);
  (void)n;
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const int fd : open_fds_) shutdown(fd, SHUT_RDWR);  // unblocks a send to a peer that stopped reading
  }
  for (auto& t : threads_) t.join();
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

std::vector<std::string> HostRelay::take_failures() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.swap(failures_);
  return out;
}

void HostRelay::accept_loop() {
  while (!stop_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (stop_ || !(p[0].revents & POLLIN)) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    ++connections_;
    std::lock_guard<std::mutex> lock(mu_);
    open_fds_.insert(client);
    threads_.emplace_back([this, client] { serve(client); });
  }
}

void HostRelay::serve(int client) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string where = host_ + ":" + std::to_string(port_);
  const int gai = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found);
  int upstream = -1, err = 0;
  for (addrinfo* a = gai == 0 ? found : nullptr; a && upstream < 0; a = a->ai_next) {
    upstream = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (upstream >= 0 && !connect_until(upstream, a->ai_addr, a->ai_addrlen, stop_)) {
      err = errno;
      close(upstream);
      upstream = -1;
    }
  }
  if (found) freeaddrinfo(found);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (upstream < 0)
      failures_.push_back("connecting to " + where + " failed: " + (gai != 0 ? gai_strerror(gai) : strerror(err)));
    else
      open_fds_.insert(upstream);
  }
  if (upstream >= 0) relay_bytes(client, upstream, stop_);
  std::lock_guard<std::mutex> lock(mu_);
  open_fds_.erase(client);
  close(client);
  if (upstream >= 0) {
    open_fds_.erase(upstream);
    close(upstream);
  }
}

int sandbox_init_main(int port, const std::string& socket_path, const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::fprintf(stderr, "sandbox-init: no command to run\n");
    return 2;
  }
  const int listener = listen_loopback(port);
  if (listener < 0) {
    std::fprintf(stderr, "sandbox-init: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
    return 2;
  }
  if (!drop_capabilities()) {
    std::fprintf(stderr, "sandbox-init: cannot drop capabilities: %s\n", strerror(errno));
    return 2;
  }
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "sandbox-init: fork failed: %s\n", strerror(errno));
    return 2;
  }
  if (child == 0) {
    execvp(cargs[0], cargs.data());
    std::fprintf(stderr, "sandbox-init: cannot run %s: %s\n", cargs[0], strerror(errno));
    _exit(127);
  }
  static const std::atomic<bool> never{false};
  for (;;) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      std::fflush(nullptr);
      _exit(exit_code_of(status));  // relay threads may still run: no static destructors under them
    }
    pollfd p = {listener, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int client = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::thread([client, socket_path] {
      const int host = connect_unix(socket_path);
      if (host >= 0) relay_bytes(client, host, never);
      if (host >= 0) close(host);
      close(client);
    }).detach();
  }
}

}  // namespace autooptim::base
