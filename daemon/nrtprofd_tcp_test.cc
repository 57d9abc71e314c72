// nrtprofd's TCP listener as a remote shim or CLI meets it: the real binary with --listen on
// 127.0.0.1 (port 0), certificates and tokens made with openssl for the test, real TLS clients.
// As root (CI), the daemon must drop to --user=nobody, which the sandbox's user namespace
// forbids: the target runs unsandboxed (BUILD).
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/testing/nrtprofd_harness.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.grpc.pb.h"
#include "tests/testing/tls_certs.h"

namespace nrtprof::testing {
namespace {

constexpr char kExecutable[] = "/bin/remote_app";

nrtprof::ShimMessage Hello() { return ShimHello(4242, kExecutable); }

// One range and one call.
nrtprof::ShimMessage Batch(bool final) {
  nrtprof::ShimMessage m = NewBatch(1, final, {"aten::mul", "nrt_execute"});
  AddRangeAroundCall(1'000'000, 600'000, /*correlation_id=*/1, m.mutable_batch());
  return m;
}

// The stderr of a daemon that did not become ready (it has exited).
std::string WhyNotReady(DaemonRun* run) {
  std::string err;
  Wait(run, &err);
  return err;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// A TLS channel to 127.0.0.1:port that trusts `ca`, sends `token` (if any) as
// "authorization: Bearer TOKEN" and presents a client certificate (if any).
std::shared_ptr<grpc::Channel> TlsChannel(int port, const std::string& ca, const std::string& token,
                                          const std::string& cert = "",
                                          const std::string& key = "") {
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = ReadPem(ca);
  if (!cert.empty()) {
    tls.pem_cert_chain = ReadPem(cert);
    tls.pem_private_key = ReadPem(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(tls);
  if (!token.empty()) {
    credentials =
        grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token));
  }
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), credentials);
}

grpc::Status CallStatus(const std::shared_ptr<grpc::Channel>& channel,
                        nrtprof::StatusReply* reply = nullptr) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  nrtprof::StatusReply ignored;
  return nrtprof::Control::NewStub(channel)->Status(&context, nrtprof::StatusRequest(),
                                                    reply != nullptr ? reply : &ignored);
}

class NrtprofdTcpTest : public DaemonTest {
 protected:
  NrtprofdTcpTest() : DaemonTest("nrtprofd-tcp") {}
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    const std::string certs = folder_ + "/certs";
    ASSERT_EQ(mkdir(certs.c_str(), 0700), 0);
    std::string error;
    ASSERT_TRUE(MakeTlsFiles(certs, &tls_, &error)) << error;
    // As root the daemon runs as nobody, which must be able to make the socket and captures.
    if (geteuid() == 0) {
      ASSERT_EQ(chmod(folder_.c_str(), 0777), 0);
    }
  }
  // Listening on 127.0.0.1, any port, checking `token_file` (if any); as nobody when root.
  std::vector<std::string> TcpArgs(const std::string& token_file) {
    std::vector<std::string> args = Args();
    for (const std::string& a :
         {std::string("--listen=127.0.0.1:0"), "--tls_cert=" + tls_.server_cert,
          "--tls_key=" + tls_.server_key}) {
      args.push_back(a);
    }
    if (!token_file.empty()) args.push_back("--token_file=" + token_file);
    if (geteuid() == 0) args.push_back("--user=nobody");
    return args;
  }
  // The port from "ready 127.0.0.1:PORT\n"; 0 if the line is not that.
  static int PortOf(const DaemonRun& run) {
    const std::string prefix = "ready 127.0.0.1:";
    if (run.ready_line.rfind(prefix, 0) != 0) return 0;
    return atoi(run.ready_line.c_str() + prefix.size());
  }
  void Connect() {
    channel_ = grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials());
  }
  std::shared_ptr<grpc::Channel> channel_;
  TlsFiles tls_;
};

TEST_F(NrtprofdTcpTest, ListenWithoutTlsOrACallerCheckIsRefusedBeforeListening) {
  struct Case {
    std::vector<std::string> extra;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--listen=127.0.0.1:0"}, "--listen needs TLS: give --tls_cert=PEM and --tls_key=PEM"},
           {{"--listen=127.0.0.1:0", "--tls_cert=" + tls_.server_cert}, "--listen needs TLS"},
           {{"--listen=127.0.0.1:0", "--tls_cert=" + tls_.server_cert,
             "--tls_key=" + tls_.server_key},
            "--listen needs a way to check callers"},
           {{"--listen=7878", "--tls_cert=" + tls_.server_cert, "--tls_key=" + tls_.server_key,
             "--token_file=" + tls_.token_file},
            "--listen '7878' is not HOST:PORT"},
           {{"--token_file=" + tls_.token_file},
            "--tls_cert, --tls_key, --token_file and --tls_client_ca are for --listen"},
       }) {
    std::vector<std::string> args = Args();
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    std::string err;
    EXPECT_EQ(RunToExit(args, &err), 2) << c.extra[0];
    EXPECT_EQ(Lines(err).size(), 1u) << err;
    EXPECT_EQ(err.rfind(std::string("nrtprofd: ") + c.message, 0), 0u) << err;
    EXPECT_FALSE(Exists(socket_)) << "nothing may listen: " << c.extra[0];
  }
}

TEST_F(NrtprofdTcpTest, ATokenFileOthersCanReadIsRefused) {
  ASSERT_EQ(chmod(tls_.token_file.c_str(), 0644), 0);
  std::string err;
  EXPECT_EQ(RunToExit(TcpArgs(tls_.token_file), &err), 1);
  EXPECT_EQ(err, "nrtprofd: --token_file: " + tls_.token_file +
                     " is accessible by group or others (mode 0644); a token must be private: "
                     "chmod 600 " +
                     tls_.token_file + "\n");
  EXPECT_EQ(err.find(tls_.token), std::string::npos);
  EXPECT_FALSE(Exists(socket_));
}

TEST_F(NrtprofdTcpTest, RootMustNameAnotherUserToListenOnTcp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  std::vector<std::string> args = TcpArgs(tls_.token_file);
  args.pop_back();  // --user=nobody
  std::string err;
  EXPECT_EQ(RunToExit(args, &err), 2);
  EXPECT_EQ(err,
            "nrtprofd: refusing to listen on TCP as root: give --user=NAME, the user to run as "
            "once the sockets are bound\n");
  EXPECT_FALSE(Exists(socket_));
  for (const char* user : {"--user=root", "--user=no-such-user-nrtprof"}) {
    std::vector<std::string> with_user = args;
    with_user.push_back(user);
    EXPECT_EQ(RunToExit(with_user, &err), 2) << user;
    EXPECT_EQ(Lines(err).size(), 1u) << err;
  }
  // The unix socket alone still runs as root.
  DaemonRun unix_only = Start(Args());
  ASSERT_TRUE(unix_only.ready) << WhyNotReady(&unix_only);
  kill(unix_only.pid, SIGTERM);
  EXPECT_EQ(Wait(&unix_only), 0);
}

TEST_F(NrtprofdTcpTest, DropsRootToTheUserBeforeMakingTheSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  DaemonRun nrtprofd = Start(TcpArgs(tls_.token_file));
  ASSERT_TRUE(nrtprofd.ready) << WhyNotReady(&nrtprofd);
  const std::string status = ReadFileText("/proc/" + std::to_string(nrtprofd.pid) + "/status");
  EXPECT_NE(status.find("\nUid:\t65534\t65534\t65534\t65534\n"), std::string::npos) << status;
  EXPECT_NE(status.find("\nGid:\t65534\t65534\t65534\t65534\n"), std::string::npos) << status;
  struct stat st;
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Mode(folder_ + "/sock"), 0700u);
  // It serves as nobody: a capture over TCP is written, by nobody.
  std::shared_ptr<grpc::Channel> channel = TlsChannel(PortOf(nrtprofd), tls_.ca, tls_.token);
  auto control = nrtprof::Control::NewStub(channel);
  ASSERT_TRUE(StartCapture(control.get(), "dropped").ok());
  nrtprof::CaptureFiles files;
  const grpc::Status stopped = StopCapture(control.get(), "dropped", /*wait_ms=*/0, &files);
  ASSERT_TRUE(stopped.ok()) << stopped.error_message();
  ASSERT_EQ(stat((out_ + "/dropped/summary.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  EXPECT_NE(err.find(", as user nobody"), std::string::npos) << err;
  EXPECT_FALSE(Exists(socket_));
}

TEST_F(NrtprofdTcpTest, ServesTcpCallsThatCarryTheToken) {
  DaemonRun nrtprofd = Start(TcpArgs(tls_.token_file));
  ASSERT_TRUE(nrtprofd.ready) << WhyNotReady(&nrtprofd);
  const int port = PortOf(nrtprofd);
  ASSERT_GT(port, 0) << nrtprofd.ready_line;
  std::shared_ptr<grpc::Channel> channel = TlsChannel(port, tls_.ca, tls_.token);
  auto control = nrtprof::Control::NewStub(channel);
  auto collector = nrtprof::Collector::NewStub(channel);

  ASSERT_TRUE(StartCapture(control.get(), "remote").ok());
  ShimStream shim(collector.get(), Hello());
  ASSERT_TRUE(shim.Write(Batch(/*final=*/true)));
  ASSERT_TRUE(shim.AwaitAck(1));  // stored in the capture before it stops
  nrtprof::CaptureFiles files;
  const grpc::Status stopped = StopCapture(control.get(), "remote", 30'000, &files);
  ASSERT_TRUE(stopped.ok()) << stopped.error_message();
  EXPECT_EQ(files.processes(), 1u);
  {  // nrtprof top over TCP: answered (the daemon's flight recorder is on by default)
    grpc::ClientContext context;
    nrtprof::TopReply top;
    const grpc::Status answered = control->Top(&context, nrtprof::TopRequest(), &top);
    EXPECT_TRUE(answered.ok()) << answered.error_message();
    EXPECT_EQ(top.window_ns(), 5'000'000'000u);
  }
  EXPECT_EQ(files.events(), 2u);
  EXPECT_TRUE(Exists(out_ + "/remote/trace.pftrace"));
  uint64_t acked = 0;
  EXPECT_TRUE(shim.Finish(&acked).ok());
  EXPECT_EQ(acked, 1u);

  // The unix socket asks for no token: its permissions guard it.
  Connect();
  nrtprof::StatusReply status;
  ASSERT_TRUE(CallStatus(channel_, &status).ok());
  EXPECT_EQ(status.captures_written(), 1u);

  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  // One line: where it listens and how.
  EXPECT_EQ(Lines(err).size(), 1u) << err;
  EXPECT_NE(err.find("listening on 127.0.0.1:" + std::to_string(port) + " (TLS, bearer token)"),
            std::string::npos)
      << err;
}

TEST_F(NrtprofdTcpTest, RefusesCallsWithAWrongOrNoTokenAndSaysWho) {
  DaemonRun nrtprofd = Start(TcpArgs(tls_.token_file));
  ASSERT_TRUE(nrtprofd.ready) << WhyNotReady(&nrtprofd);
  const int port = PortOf(nrtprofd);

  const grpc::Status wrong = CallStatus(TlsChannel(port, tls_.ca, tls_.wrong_token));
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED) << wrong.error_message();
  EXPECT_EQ(wrong.error_message(), "nrtprofd refused the call: wrong bearer token");
  const grpc::Status none = CallStatus(TlsChannel(port, tls_.ca, ""));
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED) << none.error_message();
  EXPECT_EQ(none.error_message(), "nrtprofd refused the call: no bearer token");
  {  // nrtprof top's call is gated too
    grpc::ClientContext context;
    nrtprof::TopReply top;
    const grpc::Status refused =
        nrtprof::Control::NewStub(TlsChannel(port, tls_.ca, tls_.wrong_token))
            ->Top(&context, nrtprof::TopRequest(), &top);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << refused.error_message();
  }

  // A shim's stream with a wrong token: refused before its Hello is read; nothing is stored.
  {
    auto collector = nrtprof::Collector::NewStub(TlsChannel(port, tls_.ca, tls_.wrong_token));
    grpc::ClientContext context;
    auto stream = collector->Stream(&context);
    stream->Write(Hello());  // may or may not get out before the refusal
    stream->Write(Batch(/*final=*/true));
    nrtprof::DaemonMessage reply;
    EXPECT_FALSE(stream->Read(&reply));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  // The clock `nrtprof capture --hosts` reads: behind the same gate, answered with the token.
  {
    nrtprof::ClockReply clock;
    grpc::ClientContext refused, answered;
    EXPECT_EQ(nrtprof::Control::NewStub(TlsChannel(port, tls_.ca, tls_.wrong_token))
                  ->Clock(&refused, nrtprof::ClockRequest(), &clock)
                  .error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    ASSERT_TRUE(nrtprof::Control::NewStub(TlsChannel(port, tls_.ca, tls_.token))
                    ->Clock(&answered, nrtprof::ClockRequest(), &clock)
                    .ok());
    EXPECT_GT(clock.monotonic_ns(), 0u);
    EXPECT_FALSE(clock.hostname().empty());
  }
  Connect();
  nrtprof::StatusReply status;
  ASSERT_TRUE(CallStatus(channel_, &status).ok());
  EXPECT_EQ(status.processes_size(), 0);
  EXPECT_EQ(status.events_received(), 0u);

  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  std::vector<std::string> refusals;
  for (const std::string& line : Lines(err)) {
    if (line.find("refused") != std::string::npos) refusals.push_back(line);
  }
  ASSERT_EQ(refusals.size(), 5u) << err;  // one line per refused call
  EXPECT_EQ(refusals[0].rfind("nrtprofd: refused /nrtprof.Control/Status from ipv4:127.0.0.1:", 0),
            0u)
      << refusals[0];
  EXPECT_TRUE(absl::EndsWith(refusals[0], ": wrong bearer token")) << refusals[0];
  EXPECT_TRUE(absl::EndsWith(refusals[1], ": no bearer token")) << refusals[1];
  EXPECT_EQ(refusals[2].rfind("nrtprofd: refused /nrtprof.Control/Top from ipv4:127.0.0.1:", 0),
            0u)
      << refusals[2];
  EXPECT_EQ(
      refusals[3].rfind("nrtprofd: refused /nrtprof.Collector/Stream from ipv4:127.0.0.1:", 0), 0u)
      << refusals[3];
  EXPECT_EQ(refusals[4].rfind("nrtprofd: refused /nrtprof.Control/Clock from ipv4:127.0.0.1:", 0),
            0u)
      << refusals[4];
  EXPECT_EQ(err.find(tls_.token), std::string::npos);
  EXPECT_EQ(err.find(tls_.wrong_token), std::string::npos);
}

// A client that keeps calling with a wrong token: the daemon writes a burst of lines, then
// counts the refusals it leaves out, and says how many (at the latest when it stops).
TEST_F(NrtprofdTcpTest, RefusalLinesAreRateLimitedAndTheRestCounted) {
  DaemonRun nrtprofd = Start(TcpArgs(tls_.token_file));
  ASSERT_TRUE(nrtprofd.ready) << WhyNotReady(&nrtprofd);
  constexpr int kCalls = 40;  // twice the burst of lines
  std::shared_ptr<grpc::Channel> wrong = TlsChannel(PortOf(nrtprofd), tls_.ca, tls_.wrong_token);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(CallStatus(wrong).error_code(), grpc::StatusCode::UNAUTHENTICATED) << i;
  }
  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  int written = 0, counted = 0;
  for (const std::string& line : Lines(err)) {
    if (absl::StartsWith(line, "nrtprofd: refused ")) ++written;
    if (!absl::StrContains(line, " not logged in the last ")) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    int n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(words[1], &n)) << line;
    EXPECT_TRUE(absl::StartsWith(line, absl::StrCat("nrtprofd: ", n, " more refusal"))) << line;
    counted += n;
  }
  EXPECT_EQ(written + counted, kCalls) << err;
  EXPECT_GE(written, 20) << err;
  EXPECT_GT(counted, 0) << err;  // unless the calls took 20 s, each gaining a line
}

TEST_F(NrtprofdTcpTest, PlaintextAndUntrustingClientsCannotConnect) {
  DaemonRun nrtprofd = Start(TcpArgs(tls_.token_file));
  ASSERT_TRUE(nrtprofd.ready) << WhyNotReady(&nrtprofd);
  const int port = PortOf(nrtprofd);
  const grpc::Status plaintext = CallStatus(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();
  // A client that trusts another CA does not take the daemon's certificate (nor send it the
  // token).
  const grpc::Status other_ca = CallStatus(TlsChannel(port, tls_.other_ca, tls_.token));
  EXPECT_EQ(other_ca.error_code(), grpc::StatusCode::UNAVAILABLE) << other_ca.error_message();
  // The daemon still serves the right client.
  EXPECT_TRUE(CallStatus(TlsChannel(port, tls_.ca, tls_.token)).ok());
  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  EXPECT_EQ(err.find("refused"), std::string::npos) << err;  // no call got through TLS
}

TEST_F(NrtprofdTcpTest, MutualTlsTakesClientsWithACertificateOfItsCa) {
  std::vector<std::string> args = TcpArgs("");
  args.push_back("--tls_client_ca=" + tls_.ca);
  DaemonRun nrtprofd = Start(args);
  ASSERT_TRUE(nrtprofd.ready) << WhyNotReady(&nrtprofd);
  const int port = PortOf(nrtprofd);
  EXPECT_TRUE(CallStatus(TlsChannel(port, tls_.ca, "", tls_.client_cert, tls_.client_key)).ok());
  EXPECT_FALSE(CallStatus(TlsChannel(port, tls_.ca, "")).ok());  // no client certificate
  kill(nrtprofd.pid, SIGTERM);
  std::string err;
  EXPECT_EQ(Wait(&nrtprofd, &err), 0) << err;
  EXPECT_NE(err.find("(TLS, client certificate)"), std::string::npos) << err;

  // Both: the certificate and the token.
  args.push_back("--token_file=" + tls_.token_file);
  DaemonRun both = Start(args);
  ASSERT_TRUE(both.ready) << WhyNotReady(&both);
  const int both_port = PortOf(both);
  EXPECT_EQ(CallStatus(TlsChannel(both_port, tls_.ca, "", tls_.client_cert, tls_.client_key))
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(
      CallStatus(TlsChannel(both_port, tls_.ca, tls_.token, tls_.client_cert, tls_.client_key))
          .ok());
  kill(both.pid, SIGTERM);
  std::string both_err;
  EXPECT_EQ(Wait(&both, &both_err), 0) << both_err;
}

TEST_F(NrtprofdTcpTest, AKeyThatIsNotTheCertificatesIsOneLine) {
  std::vector<std::string> args = TcpArgs(tls_.token_file);
  for (std::string& a : args) {
    if (a == "--tls_key=" + tls_.server_key) a = "--tls_key=" + tls_.client_key;
  }
  std::string err;
  EXPECT_EQ(RunToExit(args, &err), 1);
  EXPECT_EQ(err,
            "nrtprofd: cannot listen on 127.0.0.1:0: --tls_cert and --tls_key are not a "
            "certificate and its private key\n");
  EXPECT_FALSE(Exists(socket_));
}

TEST_F(NrtprofdTcpTest, RefusesAPortAnotherDaemonListensOn) {
  DaemonRun first = Start(TcpArgs(tls_.token_file));
  ASSERT_TRUE(first.ready) << WhyNotReady(&first);
  const int port = PortOf(first);
  std::vector<std::string> args = TcpArgs(tls_.token_file);
  for (std::string& a : args) {
    if (a == "--listen=127.0.0.1:0") a = absl::StrCat("--listen=127.0.0.1:", port);
    if (a == socket_) a = folder_ + "/second.sock";
  }
  std::string err;
  EXPECT_EQ(RunToExit(args, &err), 1);
  EXPECT_EQ(err, absl::StrCat("nrtprofd: cannot listen on 127.0.0.1:", port,
                              ": Address already in use\n"));
  kill(first.pid, SIGTERM);
  EXPECT_EQ(Wait(&first), 0);
}

}  // namespace

}  // namespace nrtprof::testing
