#include "tests/testing/headless_browser.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "google/protobuf/util/json_util.h"

namespace nrtprof::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int kReplyTimeoutMs = 30'000;

const Value* Field(const Struct& s, const std::string& name) {
  auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::string StringField(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->has_string_value() ? v->string_value() : "";
}

const Struct& StructField(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->has_struct_value() ? v->struct_value() : Struct::default_instance();
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

}  // namespace

std::string HeadlessBrowser::Find() {
  for (const char* path : {"/usr/bin/chromium", "/usr/lib/chromium/chromium"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HeadlessBrowser>> HeadlessBrowser::Start(const std::string& binary,
                                                                        const std::string& dir,
                                                                        int width, int height) {
  int commands[2], replies[2];
  if (pipe2(commands, O_CLOEXEC) != 0 || pipe2(replies, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  std::vector<std::string> args = {binary,
                                   "--headless",
                                   "--disable-gpu",
                                   "--no-sandbox",
                                   "--no-first-run",
                                   "--remote-debugging-pipe",
                                   "--user-data-dir=" + dir + "/profile",
                                   absl::StrCat("--window-size=", width, ",", height),
                                   "about:blank"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string home = "HOME=" + dir;
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    // fd 3: what the browser reads; fd 4: what it writes. Its own chatter goes to a file.
    // (Through fds above 4 first: a pipe's end may already be 3 or 4.)
    const int in = fcntl(commands[0], F_DUPFD, 10), out = fcntl(replies[1], F_DUPFD, 10);
    dup2(in, 3);
    dup2(out, 4);
    const int log = open((dir + "/chromium.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    putenv(const_cast<char*>(home.c_str()));
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(commands[0]);
  close(replies[1]);
  std::unique_ptr<HeadlessBrowser> browser(new HeadlessBrowser());
  browser->pid_ = pid;
  browser->to_browser_ = commands[1];
  browser->from_browser_ = replies[0];
  // One page, attached in flat mode: its commands carry the session id.
  absl::StatusOr<Struct> targets = browser->Call("Target.getTargets", "{}", true);
  if (!targets.ok()) return targets.status();
  std::string target;
  for (const Value& t :
       StructField(*targets, "result").fields().at("targetInfos").list_value().values()) {
    if (StringField(t.struct_value(), "type") == "page")
      target = StringField(t.struct_value(), "targetId");
  }
  if (target.empty()) return absl::InternalError("chromium has no page");
  absl::StatusOr<Struct> attached =
      browser->Call("Target.attachToTarget",
                    absl::StrCat("{\"targetId\":", JsonString(target), ",\"flatten\":true}"), true);
  if (!attached.ok()) return attached.status();
  browser->session_ = StringField(StructField(*attached, "result"), "sessionId");
  for (const char* domain : {"Page.enable", "Runtime.enable", "Log.enable", "Network.enable"}) {
    if (absl::StatusOr<Struct> r = browser->Call(domain, "{}"); !r.ok()) return r.status();
  }
  absl::StatusOr<Struct> metrics =
      browser->Call("Emulation.setDeviceMetricsOverride",
                    absl::StrCat("{\"width\":", width, ",\"height\":", height,
                                 ",\"deviceScaleFactor\":1,\"mobile\":false}"));
  if (!metrics.ok()) return metrics.status();
  return browser;
}

HeadlessBrowser::~HeadlessBrowser() {
  if (to_browser_ >= 0) close(to_browser_);
  if (from_browser_ >= 0) close(from_browser_);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

bool HeadlessBrowser::ReadMessage(Struct* message, int timeout_ms) {
  const int64_t deadline = NowMs() + timeout_ms;
  for (;;) {
    if (const size_t end = buffer_.find('\0'); end != std::string::npos) {
      const std::string json = buffer_.substr(0, end);
      buffer_.erase(0, end + 1);
      message->Clear();
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = true;
      if (!google::protobuf::util::JsonStringToMessage(json, message, options).ok()) continue;
      Note(*message);
      return true;
    }
    const int64_t left = deadline - NowMs();
    if (left <= 0) return false;
    struct pollfd p = {from_browser_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[65536];
    const ssize_t n = read(from_browser_, buf, sizeof(buf));
    if (n <= 0) return false;
    buffer_.append(buf, n);
  }
}

void HeadlessBrowser::Note(const Struct& m) {
  const std::string method = StringField(m, "method");
  const Struct& params = StructField(m, "params");
  if (method == "Page.loadEventFired") loaded_ = true;
  if (method == "Runtime.exceptionThrown") {
    const Struct& details = StructField(params, "exceptionDetails");
    errors_.push_back(absl::StrCat("exception: ", StringField(details, "text"), " ",
                                   StringField(StructField(details, "exception"), "description")));
  }
  if (method == "Runtime.consoleAPICalled" && StringField(params, "type") == "error") {
    std::string line = "console.error:";
    for (const Value& a : params.fields().at("args").list_value().values()) {
      absl::StrAppend(&line, " ", StringField(a.struct_value(), "value"));
    }
    errors_.push_back(line);
  }
  if (method == "Log.entryAdded") {
    const Struct& entry = StructField(params, "entry");
    if (StringField(entry, "level") == "error") {
      errors_.push_back(
          absl::StrCat("log: ", StringField(entry, "text"), " ", StringField(entry, "url")));
    }
  }
  if (method == "Network.requestWillBeSent") {
    requests_.push_back(StringField(StructField(params, "request"), "url"));
  }
}

absl::StatusOr<Struct> HeadlessBrowser::Call(const std::string& method,
                                             const std::string& params_json, bool browser_level) {
  const int id = next_id_++;
  std::string message =
      absl::StrCat("{\"id\":", id, ",\"method\":", JsonString(method), ",\"params\":", params_json);
  if (!browser_level) absl::StrAppend(&message, ",\"sessionId\":", JsonString(session_));
  message += "}";
  message.push_back('\0');
  for (size_t sent = 0; sent < message.size();) {
    const ssize_t n = write(to_browser_, message.data() + sent, message.size() - sent);
    if (n <= 0) return absl::UnavailableError(absl::StrCat(method, ": chromium went away"));
    sent += n;
  }
  const int64_t deadline = NowMs() + kReplyTimeoutMs;
  Struct reply;
  while (NowMs() < deadline) {
    if (!ReadMessage(&reply, static_cast<int>(deadline - NowMs()))) break;
    const Value* got = Field(reply, "id");
    if (got == nullptr && Field(reply, "error") != nullptr) {  // a command it could not read
      return absl::InvalidArgumentError(
          absl::StrCat(method, ": ", StringField(StructField(reply, "error"), "message")));
    }
    if (got == nullptr || static_cast<int>(got->number_value()) != id) continue;
    if (Field(reply, "error") != nullptr) {
      return absl::InternalError(
          absl::StrCat(method, ": ", StringField(StructField(reply, "error"), "message")));
    }
    return reply;
  }
  return absl::DeadlineExceededError(absl::StrCat(method, ": no reply from chromium"));
}

absl::Status HeadlessBrowser::Open(const std::string& url) {
  loaded_ = false;
  absl::StatusOr<Struct> r = Call("Page.navigate", absl::StrCat("{\"url\":", JsonString(url), "}"));
  if (!r.ok()) return r.status();
  Struct event;
  const int64_t deadline = NowMs() + kReplyTimeoutMs;
  while (!loaded_ && NowMs() < deadline &&
         ReadMessage(&event, static_cast<int>(deadline - NowMs()))) {
  }
  return loaded_ ? absl::OkStatus() : absl::DeadlineExceededError(url + " did not load");
}

absl::StatusOr<std::string> HeadlessBrowser::Evaluate(const std::string& expression) {
  absl::StatusOr<Struct> r = Call(
      "Runtime.evaluate", absl::StrCat("{\"expression\":", JsonString("String(" + expression + ")"),
                                       ",\"returnByValue\":true}"));
  if (!r.ok()) return r.status();
  const Struct& result = StructField(*r, "result");
  if (Field(result, "exceptionDetails") != nullptr) {
    return absl::InternalError(
        absl::StrCat("exception in ", expression, ": ",
                     StringField(StructField(StructField(result, "exceptionDetails"), "exception"),
                                 "description")));
  }
  return StringField(StructField(result, "result"), "value");
}

absl::Status HeadlessBrowser::Click(double x, double y) {
  for (const char* type : {"mouseMoved", "mousePressed", "mouseReleased"}) {
    absl::StatusOr<Struct> r = Call(
        "Input.dispatchMouseEvent",
        absl::StrCat("{\"type\":\"", type, "\",\"x\":", x, ",\"y\":", y, ",\"button\":\"",
                     strcmp(type, "mouseMoved") == 0 ? "none" : "left", "\",\"clickCount\":1}"));
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HeadlessBrowser::Screenshot() {
  absl::StatusOr<Struct> r =
      Call("Page.captureScreenshot", "{\"format\":\"png\",\"captureBeyondViewport\":true}");
  if (!r.ok()) return r.status();
  std::string png;
  if (!absl::Base64Unescape(StringField(StructField(*r, "result"), "data"), &png)) {
    return absl::DataLossError("the screenshot is not base64");
  }
  return png;
}

}  // namespace nrtprof::testing
