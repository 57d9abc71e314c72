#include "daemon/testing/nrtprofd_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/spawn.h"

namespace nrtprof::testing {
namespace {

constexpr char kDaemon[] = "daemon/nrtprofd";  // in the runfiles, the test's working folder

}  // namespace

DaemonRun Start(const std::vector<std::string>& args) {
  int ready[2], err[2];
  EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
  std::vector<std::string> argv = {kDaemon};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(absl::StrCat("--ready_fd=", ready[1]));
  SpawnOptions options;
  options.stderr_fd = err[1];
  options.inherit_fd = ready[1];  // this one survives exec
  DaemonRun run;
  run.pid = Spawn(argv, options);
  close(ready[1]);
  close(err[1]);
  run.ready_line = ReadAll(ready[0]);  // EOF once the daemon closed it or exited
  close(ready[0]);
  run.ready = run.ready_line == "ready\n" ||
              (absl::StartsWith(run.ready_line, "ready ") && absl::EndsWith(run.ready_line, "\n"));
  run.stderr_fd = err[0];
  return run;
}

int Wait(DaemonRun* run, std::string* err) {
  int status = 0;
  waitpid(run->pid, &status, 0);
  const std::string text = ReadAll(run->stderr_fd);
  close(run->stderr_fd);
  const int code = ExitCode(status);
  if (err != nullptr) {
    *err = text;
  } else if (code != 0) {
    // The caller did not keep the daemon's words; a failed exit shows them anyway (a sanitizer's
    // report, for one, is only there).
    std::fprintf(stderr, "nrtprofd exited %d; its stderr:\n%s", code, text.c_str());
  }
  return code;
}

int RunToExit(const std::vector<std::string>& args, std::string* err) {
  DaemonRun run = Start(args);
  EXPECT_FALSE(run.ready);
  if (run.ready) kill(run.pid, SIGTERM);  // the test fails, and does not wait forever
  return Wait(&run, err);
}

void DaemonTest::SetUp() {
  std::string templ = absl::StrCat("/tmp/", folder_prefix_, "-XXXXXX");
  ASSERT_NE(mkdtemp(templ.data()), nullptr) << templ << ": " << strerror(errno);
  folder_ = templ;
  socket_ = folder_ + "/sock/nrtprofd.sock";
  out_ = folder_ + "/captures";
}

void DaemonTest::TearDown() {
  if (!folder_.empty()) RemoveTree(folder_);
}

std::vector<std::string> DaemonTest::Args() const {
  return {"--socket", socket_, absl::StrCat("--output_root=", out_)};
}

nrtprof::ShimMessage ShimHello(uint32_t pid, const std::string& executable) {
  nrtprof::ShimMessage m;
  m.mutable_hello()->set_pid(pid);
  m.mutable_hello()->set_executable(executable);
  return m;
}

nrtprof::ShimMessage NewBatch(uint64_t sequence, bool final,
                              const std::vector<std::string>& strings) {
  nrtprof::ShimMessage m;
  nrtprof::EventBatch* b = m.mutable_batch();
  b->set_sequence(sequence);
  b->set_final(final);
  for (uint32_t i = 0; i < strings.size(); ++i) {
    nrtprof::InternedString* s = b->add_strings();
    s->set_iid(i + 1);
    s->set_value(strings[i]);
  }
  return m;
}

void AddRangeAroundCall(uint64_t start_ns, uint64_t duration_ns, uint64_t correlation_id,
                        nrtprof::EventBatch* batch) {
  nrtprof::Event* range = batch->add_events();
  range->set_kind(nrtprof::EVENT_RANGE);
  range->set_name_iid(1);
  range->set_tid(1);
  range->set_start_ns(start_ns);
  range->set_duration_ns(duration_ns);
  nrtprof::Event* call = batch->add_events();
  call->set_kind(nrtprof::EVENT_API_CALL);
  call->set_name_iid(2);
  call->set_tid(1);
  call->set_start_ns(start_ns + 100'000);
  call->set_duration_ns(duration_ns - 200'000);
  call->set_correlation_id(correlation_id);
  call->set_repeat(1);
  call->set_nc_idx(0);
}

grpc::Status StartCapture(nrtprof::Control::StubInterface* control, const std::string& capture_id,
                          nrtprof::StartCaptureReply* reply) {
  grpc::ClientContext context;
  nrtprof::StartCaptureRequest request;
  request.set_capture_id(capture_id);
  nrtprof::StartCaptureReply ignored;
  return control->StartCapture(&context, request, reply != nullptr ? reply : &ignored);
}

grpc::Status StopCapture(nrtprof::Control::StubInterface* control, const std::string& capture_id,
                         uint32_t wait_ms, nrtprof::CaptureFiles* files) {
  grpc::ClientContext context;
  nrtprof::StopCaptureRequest request;
  request.set_capture_id(capture_id);
  request.set_wait_ms(wait_ms);
  return control->StopCapture(&context, request, files);
}

ShimStream::ShimStream(nrtprof::Collector::Stub* stub, const nrtprof::ShimMessage& hello) {
  stream_ = stub->Stream(&context_);
  stream_->Write(hello);
  reader_ = std::thread([this] {
    nrtprof::DaemonMessage m;
    while (stream_->Read(&m)) {
      std::lock_guard<std::mutex> lock(mu_);
      if (m.has_ack()) acked_ = std::max(acked_, m.ack().sequence());
      acked_or_ended_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    acked_or_ended_.notify_all();
  });
}

bool ShimStream::AwaitAck(uint64_t sequence) {
  std::unique_lock<std::mutex> lock(mu_);
  acked_or_ended_.wait(lock, [&] { return acked_ >= sequence || ended_; });
  return acked_ >= sequence;
}

ShimStream::~ShimStream() {
  if (!reader_.joinable()) return;
  context_.TryCancel();
  reader_.join();
}

grpc::Status ShimStream::Finish(uint64_t* acked) {
  stream_->WritesDone();
  reader_.join();
  *acked = acked_;
  return stream_->Finish();
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, n);
  }
  return out;
}

std::string ReadFileText(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text = ReadAll(fd);
  close(fd);
  return text;
}

mode_t Mode(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

}  // namespace nrtprof::testing
