#pragma once
// The sandbox's one network endpoint. Inside, the sandbox has only its own loopback: sandbox-init
// listens on 127.0.0.1:PORT there and carries each connection over a Unix socket (a file both sides
// see) to the host, where HostRelay connects to HOST:PORT and copies bytes both ways. Nothing else is
// reachable; what passes (TLS included) is not looked at.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace autooptim::base {

// "HOST:PORT" (or "[v6]:PORT") split; throws Error when it is not one.
void parse_endpoint(const std::string& endpoint, std::string* host, int* port);

// Copies bytes both ways between two connected sockets until both directions are closed, an error, or
// `stop` (checked every quarter second).
void relay_bytes(int a, int b, const std::atomic<bool>& stop);

class HostRelay {
 public:
  // Takes `listen_fd` (a listening Unix socket) and serves it on a thread until destroyed.
  HostRelay(int listen_fd, std::string host, int port);
  ~HostRelay();  // closes the listener, shuts every connection down, joins the threads
  HostRelay(const HostRelay&) = delete;
  HostRelay& operator=(const HostRelay&) = delete;

  std::vector<std::string> take_failures();  // why connections to HOST:PORT failed, since the last call
  int64_t connections() const { return connections_; }

 private:
  void accept_loop();
  void serve(int client);

  int listen_fd_;
  int wake_[2] = {-1, -1};
  std::string host_;
  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> connections_{0};
  std::mutex mu_;
  std::set<int> open_fds_;
  std::vector<std::string> failures_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

// `autooptim sandbox-init`, the sandbox's first process when it has a network: listens on
// 127.0.0.1:`port` (binding a port below 1024 needs CAP_NET_BIND_SERVICE, which bwrap grants it in the
// sandbox's user namespace), drops every capability for good, runs `argv` as its child, relays
// connections to the Unix socket at `socket_path` meanwhile, and exits with the child's status (128+N
// for signal N). Returns (2, the message on stderr) only when it cannot start.
int sandbox_init_main(int port, const std::string& socket_path, const std::vector<std::string>& argv);

}  // namespace autooptim::base
