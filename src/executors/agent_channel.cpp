#include "executors/agent_channel.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "base/remove_tree.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "base/json_read.h"
#include "base/strings.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace autooptim::executors {
namespace {

const std::set<std::string> kRequestKeys = {"tool", "manifest", "prompts",   "prompt_ids",
                                            "why",  "text",     "technique", "file"};

[[noreturn]] void refuse(const std::string& what) { throw Error("agent request: " + what); }

const json& key(const json& j, const std::string& k) {
  if (!j.contains(k)) refuse("missing key '" + k + "'");
  return j.at(k);
}

std::string text_of(const json& j, const std::string& k, size_t max_chars) {
  const json& v = key(j, k);
  if (!v.is_string()) refuse("key '" + k + "': expected a string");
  std::string s = v.get<std::string>();
  if (s.size() > max_chars) refuse("key '" + k + "': longer than " + std::to_string(max_chars) + " characters");
  return s;
}

// A request file's name as the tools write it: letters, digits, '-', '_' and one ".json" (never a path).
bool request_name(const std::string& n) {
  if (n.size() < 6 || n.size() > 96 || n.compare(n.size() - 5, 5, ".json") != 0 || n[0] == '.') return false;
  return std::all_of(n.begin(), n.end() - 5,
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; });
}

// The file's text, opened without following a link and read only when it is a small regular file.
std::optional<std::string> read_small_regular(const fs::path& p, std::string& problem) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    problem = "not a regular file (a link, or unreadable)";
    return std::nullopt;
  }
  struct stat st {};
  std::string out;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if (st.st_size > kMaxAgentRequestBytes) {
    problem = "larger than " + std::to_string(kMaxAgentRequestBytes) + " bytes";
  } else {
    out.resize(static_cast<size_t>(st.st_size));
    const ssize_t n = ::read(fd, out.data(), out.size());
    if (n != st.st_size) problem = "could not be read whole";
  }
  ::close(fd);
  if (!problem.empty()) return std::nullopt;
  return out;
}

}  // namespace

const std::vector<std::string>& agent_tools() {
  static const std::vector<std::string> t = {"techniques", "trial", "calibrate", "budget", "propose", "plugin", "log"};
  return t;
}

json AgentToolRequest::to_json() const {
  return {{"tool", tool}, {"manifest", manifest}, {"prompts", prompts},     {"prompt_ids", prompt_ids},
          {"why", why},   {"text", text},         {"technique", technique}, {"file", file}};
}

AgentToolRequest AgentToolRequest::from_json(const json& j) {
  if (!j.is_object()) refuse("expected a JSON object");
  for (const auto& [k, v] : j.items())
    if (!kRequestKeys.count(k)) refuse("unknown key '" + k + "'");
  AgentToolRequest r;
  r.tool = text_of(j, "tool", 32);
  const auto& tools = agent_tools();
  if (std::find(tools.begin(), tools.end(), r.tool) == tools.end())
    refuse("unknown tool '" + r.tool + "' (" + base::join(tools, ", ") + ")");
  r.manifest = key(j, "manifest");
  if (!r.manifest.is_null() && !r.manifest.is_object()) refuse("key 'manifest': expected an object or null");
  const json& n = key(j, "prompts");
  if (!n.is_number_integer() || n.get<int64_t>() < 0 || n.get<int64_t>() > 100000)
    refuse("key 'prompts': expected a count from 0");
  r.prompts = n.get<int64_t>();
  const json& ids = key(j, "prompt_ids");
  if (!ids.is_array() || ids.size() > 1000) refuse("key 'prompt_ids': expected an array of strings");
  for (const auto& id : ids) {
    if (!id.is_string() || id.get<std::string>().size() > 200) refuse("key 'prompt_ids': expected strings");
    r.prompt_ids.push_back(id.get<std::string>());
  }
  r.why = text_of(j, "why", 4000);
  r.text = text_of(j, "text", 4000);
  r.technique = text_of(j, "technique", 64);
  r.file = text_of(j, "file", 255);
  return r;
}

json AgentToolReply::to_json() const {
  json j = {{"ok", ok}, {"result", result}};
  if (!ok) j["error"] = error;
  return j;
}

AgentToolReply AgentToolReply::from_json(const json& j) {
  AgentToolReply r;
  if (!j.is_object() || !j.contains("ok") || !j["ok"].is_boolean()) throw Error("agent host: malformed reply");
  r.ok = j["ok"].get<bool>();
  r.result = j.value("result", json());
  if (!r.ok) r.error = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "refused";
  return r;
}

AgentToolReply call_agent_host(const std::string& requests_dir, const std::string& replies_dir,
                               const AgentToolRequest& r, double timeout_s) {
  static std::atomic<int> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const std::string name = std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) + "-" +
                           std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".json";
  gates::write_file_atomic((fs::path(requests_dir) / name).string(), r.to_json().dump());
  const fs::path reply = fs::path(replies_dir) / name;
  const auto t0 = std::chrono::steady_clock::now();
  while (true) {
    std::error_code ec;
    if (fs::exists(reply, ec)) {
      std::ifstream in(reply);
      std::stringstream ss;
      ss << in.rdbuf();
      return AgentToolReply::from_json(runtime::parse_json_text(ss.str(), reply.string()));
    }
    if (timeout_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s)
      throw Error("agent " + r.tool + ": no reply from the run within " + std::to_string(static_cast<int>(timeout_s)) +
                  " s (" + requests_dir + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

AgentChannel::AgentChannel(std::string requests_dir, std::string replies_dir)
    : requests_(std::move(requests_dir)), replies_(std::move(replies_dir)) {
  fs::create_directories(requests_);
  fs::create_directories(replies_);
}

std::vector<AgentChannel::Incoming> AgentChannel::take(size_t max) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(requests_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n[0] == '.') continue;  // a tool's temporary file, or the network relay's socket
    names.push_back(n);
  }
  std::sort(names.begin(), names.end());  // the tools' names start with the time
  if (names.size() > max) names.resize(max);
  std::vector<Incoming> out;
  for (const auto& n : names) {
    Incoming in;
    in.name = n;
    const fs::path p = fs::path(requests_) / n;
    if (!request_name(n)) {
      in.problem = "a file in the request folder that is not a request ('" + n.substr(0, 60) + "')";
      in.name.clear();  // nothing to reply to
    } else if (auto text = read_small_regular(p, in.problem)) {
      try {
        in.request = AgentToolRequest::from_json(runtime::parse_json_text(*text, "agent request"));
      } catch (const std::exception& e) {
        in.problem = e.what();
      }
    }
    runtime::remove_tree(p, ec);
    out.push_back(std::move(in));
  }
  return out;
}

void AgentChannel::reply(const std::string& name, const AgentToolReply& r) const {
  if (name.empty()) return;
  gates::write_file_atomic((fs::path(replies_) / name).string(), r.to_json().dump() + "\n");
}

}  // namespace autooptim::executors
