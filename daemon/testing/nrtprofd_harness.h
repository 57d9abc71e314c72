// The harness of the daemon's process-level tests, nrtprofd_main_test and nrtprofd_tcp_test:
// the real nrtprofd (in this library's runfiles, at daemon/nrtprofd) started as a child with
// --ready_fd and its stderr in a pipe, the fixture that gives each test a folder for the
// daemon's socket and captures, and the shim messages and control calls both tests send.
// tests/testing/processes.h is the end-to-end tests' own standing daemon, not this one.
//
// Not thread-safe: a test calls all of these from its main thread (a ShimStream's reader
// thread is its own). A DaemonRun's stderr is read only by Wait(): a daemon that writes more
// than a pipe holds (64 KiB) before then blocks until Wait().
#ifndef NRTPROF_DAEMON_TESTING_NRTPROFD_HARNESS_H_
#define NRTPROF_DAEMON_TESTING_NRTPROFD_HARNESS_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.grpc.pb.h"

namespace nrtprof::testing {

// ---- nrtprofd as a child process ----

struct DaemonRun {
  pid_t pid = -1;
  int stderr_fd = -1;      // the read end; Wait() reads and closes it
  bool ready = false;      // it wrote its ready line
  std::string ready_line;  // "ready\n", or "ready HOST:PORT\n" with --listen; else what it wrote
};

// Starts nrtprofd with `args` and --ready_fd; returns once it said "ready" or exited.
DaemonRun Start(const std::vector<std::string>& args);

// Waits for the exit; returns the exit code (128 + signal if a signal ended it) and, if `err`
// is not null, the daemon's stderr.
int Wait(DaemonRun* run, std::string* err = nullptr);

// A run expected to fail before it is ready (a test failure if it got ready, and then it is
// stopped with SIGTERM): its exit code and stderr.
int RunToExit(const std::vector<std::string>& args, std::string* err);

// The fixture: a folder of the test's own, /tmp/PREFIX-XXXXXX (short: socket paths are limited
// to 107 bytes), removed with all in it after the test.
class DaemonTest : public ::testing::Test {
 protected:
  explicit DaemonTest(std::string folder_prefix) : folder_prefix_(std::move(folder_prefix)) {}
  void SetUp() override;  // a fatal failure if the folder cannot be made
  void TearDown() override;

  // The flags for a daemon on socket_ that writes captures under out_.
  std::vector<std::string> Args() const;

  std::string folder_;
  std::string socket_;  // folder_/sock/nrtprofd.sock
  std::string out_;     // folder_/captures

 private:
  const std::string folder_prefix_;
};

// ---- What clients send ----

// A shim's Hello: process `pid` running `executable`.
nrtprof::ShimMessage ShimHello(uint32_t pid, const std::string& executable);

// A shim's batch number `sequence` that interns `strings` as iids 1, 2, ... and has no events.
nrtprof::ShimMessage NewBatch(uint64_t sequence, bool final,
                              const std::vector<std::string>& strings);

// Adds to `batch` a range named by iid 1 on thread 1 from `start_ns` for `duration_ns`, and
// inside it a call named by iid 2 on NeuronCore 0 that starts 100 us after the range and ends
// 100 us before it, with `correlation_id`. The batch interns "aten::mul" and "nrt_execute" as
// 1 and 2 (or an earlier one of the stream did).
void AddRangeAroundCall(uint64_t start_ns, uint64_t duration_ns, uint64_t correlation_id,
                        nrtprof::EventBatch* batch);

// Control.StartCapture of `capture_id`; the reply in *reply if it is not null.
grpc::Status StartCapture(nrtprof::Control::StubInterface* control, const std::string& capture_id,
                          nrtprof::StartCaptureReply* reply = nullptr);

// Control.StopCapture of `capture_id`, waiting up to `wait_ms` for the final batches of its
// processes (0: the daemon's default); the capture's files in *files.
grpc::Status StopCapture(nrtprof::Control::StubInterface* control, const std::string& capture_id,
                         uint32_t wait_ms, nrtprof::CaptureFiles* files);

// A well-behaved shim's stream: it has sent `hello`, and a reader thread always waits on the
// daemon, as the shim's reactor does (so the stream answers keepalive pings like a real one).
// Write(), AwaitAck() and Finish() belong to the test's thread; `stub` must outlive the stream.
class ShimStream {
 public:
  ShimStream(nrtprof::Collector::Stub* stub, const nrtprof::ShimMessage& hello);
  ~ShimStream();  // cancels the stream if Finish() was not called (a test that failed first)
  ShimStream(const ShimStream&) = delete;
  ShimStream& operator=(const ShimStream&) = delete;

  bool Write(const nrtprof::ShimMessage& m) { return stream_->Write(m); }
  // Waits until the daemon acknowledged batch `sequence` (true: it is stored) or ended the
  // stream (false).
  bool AwaitAck(uint64_t sequence);
  // Closes the stream; returns its status and the highest sequence acknowledged.
  grpc::Status Finish(uint64_t* acked);

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<nrtprof::ShimMessage, nrtprof::DaemonMessage>> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable acked_or_ended_;
  uint64_t acked_ = 0;  // guarded by mu_ while reader_ runs
  bool ended_ = false;  // guarded by mu_ while reader_ runs
};

// ---- Files ----

// All that `fd` yields until EOF.
std::string ReadAll(int fd);

// A file's contents; empty if it cannot be read.
std::string ReadFileText(const std::string& path);

// The permission bits of `path` (following links); 0 if it does not exist.
mode_t Mode(const std::string& path);

// Whether `path` exists (a dangling link does).
bool Exists(const std::string& path);

}  // namespace nrtprof::testing

#endif  // NRTPROF_DAEMON_TESTING_NRTPROFD_HARNESS_H_
