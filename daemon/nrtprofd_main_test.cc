// nrtprofd as a user runs it: the real binary, started with a readiness fd, talked to over its
// unix socket, stopped with SIGTERM.
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.grpc.pb.h"

namespace {

// rm -r, for the folders a test made outside TEST_TMPDIR.
void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); },
      16, FTW_DEPTH | FTW_PHYS);
}

constexpr char kDaemon[] = "daemon/nrtprofd";

// A short folder of our own: socket paths are limited to 107 bytes.
std::string Folder() {
  char templ[] = "/tmp/nrtprofd-test-XXXXXX";
  return mkdtemp(templ);
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

struct DaemonRun {
  pid_t pid = -1;
  int stderr_fd = -1;
  bool ready = false;
};

// Starts nrtprofd with `args` and --ready_fd; returns once it said "ready" or exited.
DaemonRun Start(const std::vector<std::string>& args) {
  int ready[2], err[2];
  EXPECT_EQ(pipe2(ready, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
  std::vector<std::string> argv = {kDaemon};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(absl::StrCat("--ready_fd=", ready[1]));
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  DaemonRun run;
  run.pid = fork();
  if (run.pid == 0) {
    dup2(err[1], STDERR_FILENO);
    fcntl(ready[1], F_SETFD, 0);  // this one survives exec
    execv(kDaemon, c_argv.data());
    _exit(127);
  }
  close(ready[1]);
  close(err[1]);
  run.ready = ReadAll(ready[0]) == "ready\n";  // EOF once the daemon closed it or exited
  close(ready[0]);
  run.stderr_fd = err[0];
  return run;
}

// Waits for the exit; returns the exit code and the daemon's stderr.
int Wait(DaemonRun* run, std::string* err = nullptr) {
  int status = 0;
  waitpid(run->pid, &status, 0);
  const std::string text = ReadAll(run->stderr_fd);
  close(run->stderr_fd);
  if (err != nullptr) *err = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunToExit(const std::vector<std::string>& args, std::string* err) {
  DaemonRun run = Start(args);
  EXPECT_FALSE(run.ready);
  return Wait(&run, err);
}

mode_t Mode(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

nrtprof::ShimMessage Hello() {
  nrtprof::ShimMessage m;
  m.mutable_hello()->set_pid(4242);
  m.mutable_hello()->set_executable("/bin/rmsnorm");
  return m;
}

// A range around nrt_execute, its execution on the device, and the clock sync point.
nrtprof::ShimMessage Batch(bool final) {
  nrtprof::ShimMessage m;
  nrtprof::EventBatch* b = m.mutable_batch();
  b->set_sequence(1);
  b->set_final(final);
  const char* strings[] = {"aten::mul", "nrt_execute", "nc_exec_running", "aten_mul"};
  for (uint32_t i = 0; i < 4; ++i) {
    nrtprof::InternedString* s = b->add_strings();
    s->set_iid(i + 1);
    s->set_value(strings[i]);
  }
  nrtprof::Event* range = b->add_events();
  range->set_kind(nrtprof::EVENT_RANGE);
  range->set_name_iid(1);
  range->set_tid(1);
  range->set_start_ns(1'000'000);
  range->set_duration_ns(600'000);
  nrtprof::Event* call = b->add_events();
  call->set_kind(nrtprof::EVENT_API_CALL);
  call->set_name_iid(2);
  call->set_tid(1);
  call->set_start_ns(1'100'000);
  call->set_duration_ns(400'000);
  call->set_correlation_id(1);
  call->set_repeat(1);
  call->set_nc_idx(0);
  nrtprof::Event* exec = b->add_events();
  exec->set_kind(nrtprof::EVENT_DEVICE_EXEC);
  exec->set_name_iid(3);
  exec->set_tid(1);
  exec->set_start_ns(1'000'001'150'000);
  exec->set_duration_ns(360'000);
  exec->set_device_id(1);
  exec->set_model_name_iid(4);
  nrtprof::DeviceClockSync* sync = b->add_clock_syncs();
  sync->set_nc_idx(0);
  sync->set_device_ns(1'000'000'000'000);
  sync->set_host_monotonic_ns(0);
  return m;
}

class NrtprofdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = Folder();
    socket_ = folder_ + "/sock/nrtprofd.sock";
    out_ = folder_ + "/captures";
  }
  void TearDown() override { RemoveTree(folder_); }
  std::vector<std::string> Args() {
    return {"--socket", socket_, absl::StrCat("--output_root=", out_)};
  }
  void Connect() {
    channel_ = grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials());
    control_ = nrtprof::Control::NewStub(channel_);
    collector_ = nrtprof::Collector::NewStub(channel_);
  }
  std::string folder_, socket_, out_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<nrtprof::Control::Stub> control_;
  std::unique_ptr<nrtprof::Collector::Stub> collector_;
};

TEST_F(NrtprofdTest, ListensWritesACaptureAndStopsOnSigterm) {
  DaemonRun nrtprofd = Start(Args());
  ASSERT_TRUE(nrtprofd.ready);
  EXPECT_EQ(Mode(folder_ + "/sock"), 0770u);
  EXPECT_EQ(Mode(socket_), 0660u);
  Connect();

  {
    grpc::ClientContext context;
    nrtprof::StatusReply status;
    ASSERT_TRUE(control_->Status(&context, nrtprof::StatusRequest(), &status).ok());
    EXPECT_EQ(status.address(), "unix:" + socket_);
    EXPECT_FALSE(status.daemon_version().empty());
  }
  {
    grpc::ClientContext context;
    nrtprof::StartCaptureRequest request;
    request.set_capture_id("demo");
    nrtprof::StartCaptureReply reply;
    ASSERT_TRUE(control_->StartCapture(&context, request, &reply).ok());
    EXPECT_EQ(reply.output_dir(), out_ + "/demo");
  }
  grpc::ClientContext stream_context;
  auto stream = collector_->Stream(&stream_context);
  nrtprof::DaemonMessage reply;
  ASSERT_TRUE(stream->Write(Hello()));
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_TRUE(reply.control().capturing());
  ASSERT_TRUE(stream->Write(Batch(/*final=*/true)));
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.ack().sequence(), 1u);

  nrtprof::CaptureFiles files;
  {
    grpc::ClientContext context;
    nrtprof::StopCaptureRequest request;
    request.set_capture_id("demo");
    request.set_wait_ms(30'000);
    const grpc::Status s = control_->StopCapture(&context, request, &files);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(files.processes(), 1u);
  EXPECT_EQ(files.events(), 3u);
  for (const char* f : {"trace.pftrace", "summary.txt", "summary.csv", "summary.json"}) {
    EXPECT_NE(std::find(files.files().begin(), files.files().end(), f), files.files().end()) << f;
    EXPECT_TRUE(Exists(out_ + "/demo/" + f)) << f;
  }
  // aten::mul's row carries the execution's 360 us of device time.
  EXPECT_NE(files.summary_text().find("aten::mul"), std::string::npos);
  EXPECT_NE(files.summary_text().find("Self NEURON time total: 360.000us"), std::string::npos)
      << files.summary_text();

  // A capture folder that already holds a trace is not written over.
  {
    grpc::ClientContext context;
    nrtprof::StartCaptureRequest request;
    request.set_capture_id("demo");
    nrtprof::StartCaptureReply again;
    const grpc::Status s = control_->StartCapture(&context, request, &again);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  }

  stream->WritesDone();
  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  EXPECT_EQ(err, "");
  EXPECT_FALSE(Exists(socket_));
}

TEST_F(NrtprofdTest, SigtermWritesTheCaptureInProgress) {
  DaemonRun nrtprofd = Start(Args());
  ASSERT_TRUE(nrtprofd.ready);
  Connect();
  grpc::ClientContext context;
  nrtprof::StartCaptureRequest request;
  request.set_capture_id("cut");
  nrtprof::StartCaptureReply started;
  ASSERT_TRUE(control_->StartCapture(&context, request, &started).ok());
  grpc::ClientContext stream_context;
  auto stream = collector_->Stream(&stream_context);
  nrtprof::DaemonMessage reply;
  ASSERT_TRUE(stream->Write(Hello()));
  ASSERT_TRUE(stream->Read(&reply));
  ASSERT_TRUE(stream->Write(Batch(/*final=*/false)));
  ASSERT_TRUE(stream->Read(&reply));  // acked: stored
  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  EXPECT_TRUE(Exists(out_ + "/cut/summary.txt"));
  EXPECT_TRUE(Exists(out_ + "/cut/trace.pftrace"));
}

TEST_F(NrtprofdTest, RefusesASocketAnotherDaemonAnswersOn) {
  DaemonRun first = Start(Args());
  ASSERT_TRUE(first.ready);
  std::string err;
  EXPECT_EQ(RunToExit({"--socket=unix:" + socket_, "--output_root", out_}, &err), 1);
  EXPECT_EQ(err, "nrtprofd: another nrtprofd is already listening on " + socket_ +
                     "; stop it or choose --socket\n");
  kill(first.pid, SIGINT);
  EXPECT_EQ(Wait(&first), 0);
}

TEST_F(NrtprofdTest, ReplacesAStaleSocket) {
  ASSERT_EQ(mkdir((folder_ + "/sock").c_str(), 0700), 0);
  // A socket file nobody listens on, as a killed daemon leaves it.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strcpy(addr.sun_path, socket_.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  ASSERT_TRUE(Exists(socket_));
  DaemonRun nrtprofd = Start(Args());
  ASSERT_TRUE(nrtprofd.ready);
  kill(nrtprofd.pid, SIGTERM);
  EXPECT_EQ(Wait(&nrtprofd), 0);
}

TEST_F(NrtprofdTest, BadFlagsAndFoldersFailWithOneLine) {
  struct Case {
    std::vector<std::string> args;
    int code;
    const char* message;
  };
  const std::string not_socket = folder_ + "/plain";
  ASSERT_EQ(mkdir(not_socket.c_str(), 0700), 0);
  for (const Case& c : std::vector<Case>{
           {{"--bogus=1"}, 2, "unknown flag --bogus"},
           {{"--socket"}, 2, "--socket needs a value"},
           {{"--max_events_per_process=lots"}, 2, "bad value 'lots' for --max_events_per_process"},
           {{"--max_events_per_process=0"}, 2, "must be at least 1"},
           {{"stray"}, 2, "unexpected argument 'stray'"},
           {{"--socket=localhost:1234"}, 2, "is not a unix socket"},
           {{"--socket", socket_, "--output_root=/proc/nrtprof"},
            1,
            "cannot create output folder /proc/nrtprof"},
           {{"--socket", "/proc/nrtprof/d.sock"}, 1, "cannot create folder /proc/nrtprof"},
           {{"--socket", not_socket, "--output_root", out_}, 1, "is not a socket"},
       }) {
    std::string err;
    EXPECT_EQ(RunToExit(c.args, &err), c.code) << c.args[0];
    EXPECT_NE(err.find(c.message), std::string::npos) << c.args[0] << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(err.rfind("nrtprofd: ", 0), 0u) << err;
  }
}

}  // namespace
