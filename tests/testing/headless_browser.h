// Debian's chromium, headless, driven through the DevTools protocol on a pipe
// (--remote-debugging-pipe: commands on its fd 3, replies and events on its fd 4, each message a
// JSON object ending in a NUL byte), for tests of pages nrtprof writes: open a file, evaluate
// an expression, click where a user would, read what the console said, take a screenshot.
//
// Not thread-safe; one test owns it. The destructor ends the browser.
#ifndef NRTPROF_TESTS_TESTING_HEADLESS_BROWSER_H_
#define NRTPROF_TESTS_TESTING_HEADLESS_BROWSER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/struct.pb.h"

namespace nrtprof::testing {

class HeadlessBrowser {
 public:
  // The chromium binary, or "" where none is installed.
  static std::string Find();
  // Starts `binary` with a profile under `dir`, a window of width x height, and one page.
  static absl::StatusOr<std::unique_ptr<HeadlessBrowser>> Start(const std::string& binary,
                                                                const std::string& dir, int width,
                                                                int height);
  ~HeadlessBrowser();
  HeadlessBrowser(const HeadlessBrowser&) = delete;
  HeadlessBrowser& operator=(const HeadlessBrowser&) = delete;

  // Loads the URL and waits for its load event.
  absl::Status Open(const std::string& url);
  // The page's value of `expression` as a string (String(value)); an error for an exception.
  absl::StatusOr<std::string> Evaluate(const std::string& expression);
  // A real mouse click (press and release of the left button) at the viewport's x, y.
  absl::Status Click(double x, double y);
  // The PNG of the whole page.
  absl::StatusOr<std::string> Screenshot();
  // What the page said as errors: uncaught exceptions, console.error, the browser's error log
  // entries (a refused fetch among them), one line each.
  const std::vector<std::string>& errors() const { return errors_; }
  // Every URL the page asked for, the page's own included.
  const std::vector<std::string>& requests() const { return requests_; }

 private:
  HeadlessBrowser() = default;
  // Sends a command to the page's session and waits for its reply (30 s at most).
  absl::StatusOr<google::protobuf::Struct> Call(const std::string& method,
                                                const std::string& params_json,
                                                bool browser_level = false);
  // Reads one message; records what events say; false on end of file or timeout.
  bool ReadMessage(google::protobuf::Struct* message, int timeout_ms);
  void Note(const google::protobuf::Struct& event);

  pid_t pid_ = -1;
  int to_browser_ = -1, from_browser_ = -1;
  std::string buffer_;
  int next_id_ = 1;
  std::string session_;
  bool loaded_ = false;
  std::vector<std::string> errors_, requests_;
};

}  // namespace nrtprof::testing

#endif  // NRTPROF_TESTS_TESTING_HEADLESS_BROWSER_H_
