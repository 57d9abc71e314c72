// The gRPC adapters end to end: a real server on a unix socket, real client stubs.
#include "daemon/collector_service.h"

#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/control_service.h"
#include "grpcpp/grpcpp.h"
#include "daemon/testing/hello_answer.h"
#include "gtest/gtest.h"

namespace nrtprof::daemon {
namespace {

using testing::ReadHelloAnswer;


// rm -r, for the folders a test made outside TEST_TMPDIR.
void RemoveTree(const std::string& path) {
  nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return remove(p); },
      16, FTW_DEPTH | FTW_PHYS);
}

constexpr int kTestMaxMessageBytes = 1 << 20;
// Fewer fields than the daemon's bound, so that the test's messages stay small.
constexpr uint64_t kTestMaxElements = 1000;

class FakeSink : public TraceSink {
 public:
  absl::Status Write(const Trace& trace, const Summary& summary, const std::string& output_dir,
                     std::vector<std::string>* files) override {
    std::lock_guard<std::mutex> lock(mu);
    traces.push_back(trace);
    files->push_back("fake.trace");
    return absl::OkStatus();
  }
  std::mutex mu;
  std::vector<Trace> traces;
};

// A folder for the socket, removed after the test: in TEST_TMPDIR when its path leaves room
// (a unix socket path has at most 107 bytes), else in /tmp.
std::string SocketFolder() {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string templ = tmp != nullptr && strlen(tmp) < 70 ? std::string(tmp) : "/tmp";
  templ += "/nrtprofd-test-XXXXXX";
  return mkdtemp(templ.data());
}

nrtprof::ShimMessage HelloMessage(uint32_t pid) {
  nrtprof::ShimMessage m;
  m.mutable_hello()->set_pid(pid);
  m.mutable_hello()->set_executable("/bin/app");
  return m;
}

nrtprof::ShimMessage BatchMessage(uint64_t sequence, bool final = false) {
  nrtprof::ShimMessage m;
  nrtprof::EventBatch* b = m.mutable_batch();
  b->set_sequence(sequence);
  b->set_final(final);
  nrtprof::InternedString* s = b->add_strings();
  s->set_iid(1);
  s->set_value("nrt_execute");
  nrtprof::Event* e = b->add_events();
  e->set_kind(nrtprof::EVENT_API_CALL);
  e->set_name_iid(1);
  e->set_tid(1);
  e->set_start_ns(sequence * 1000);
  e->set_duration_ns(100);
  e->set_nc_idx(-1);
  return m;
}

// Each test runs twice: without the flight recorder, where the service parses every message
// with protobuf, and with it, where a batch's events are read from its bytes as records
// (wire_events.h).
class CollectorServiceTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    folder_ = SocketFolder();
    socket_ = folder_ + "/nrtprofd.sock";
    CollectorOptions options;
    options.address = "unix:" + socket_;
    options.output_root = folder_ + "/captures";
    options.flight_recorder = GetParam();
    core_ = std::make_unique<CollectorCore>(options, &sink_, SystemClock());
    CollectorServiceOptions service_options;
    service_options.max_message_elements = kTestMaxElements;
    collector_ = std::make_unique<CollectorService>(core_.get(), service_options);
    control_ = std::make_unique<ControlService>(core_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterCallbackGenericService(collector_.get());
    builder.RegisterService(control_.get());
    builder.SetMaxReceiveMessageSize(kTestMaxMessageBytes);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials());
    collector_stub_ = nrtprof::Collector::NewStub(channel_);
    control_stub_ = nrtprof::Control::NewStub(channel_);
  }

  void TearDown() override {
    server_->Shutdown();
    server_.reset();
    RemoveTree(folder_);
  }

  // A shim's stream that said Hello as `pid` and read the daemon's answer to it (its capture
  // control in *reply); the context lives as long as the stream.
  struct ShimStream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<nrtprof::ShimMessage, nrtprof::DaemonMessage>> stream;
    grpc::ClientReaderWriter<nrtprof::ShimMessage, nrtprof::DaemonMessage>* operator->() {
      return stream.get();
    }
  };
  void Connect(uint32_t pid, ShimStream* s, nrtprof::DaemonMessage* reply) {
    s->stream = collector_stub_->Stream(&s->context);
    ASSERT_TRUE(s->stream->Write(HelloMessage(pid)));
    ReadHelloAnswer(s->stream.get(), reply);
  }

  std::string folder_, socket_;
  FakeSink sink_;
  std::unique_ptr<CollectorCore> core_;
  std::unique_ptr<CollectorService> collector_;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<nrtprof::Collector::Stub> collector_stub_;
  std::unique_ptr<nrtprof::Control::Stub> control_stub_;
};

TEST_P(CollectorServiceTest, StreamsAcksAndCaptureOverGrpc) {
  {
    grpc::ClientContext context;
    nrtprof::StartCaptureRequest request;
    request.set_capture_id("cap");
    nrtprof::StartCaptureReply reply;
    ASSERT_TRUE(control_stub_->StartCapture(&context, request, &reply).ok());
    EXPECT_EQ(reply.output_dir(), folder_ + "/captures/cap");
  }

  nrtprof::DaemonMessage reply;
  ShimStream good;
  ASSERT_NO_FATAL_FAILURE(Connect(11, &good, &reply));
  ASSERT_TRUE(reply.has_control());
  EXPECT_TRUE(reply.control().capturing());
  EXPECT_EQ(reply.control().capture_id(), "cap");
  ASSERT_TRUE(good->Write(BatchMessage(1)));
  ASSERT_TRUE(good->Read(&reply));
  EXPECT_EQ(reply.ack().sequence(), 1u);

  // A stream that skips its Hello is refused...
  grpc::ClientContext bad_context;
  auto bad = collector_stub_->Stream(&bad_context);
  bad->Write(BatchMessage(1));
  EXPECT_FALSE(bad->Read(&reply));
  const grpc::Status refused = bad->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("must be a Hello"), std::string::npos);

  // ...and one sending more than the size limit is cut off by gRPC...
  ShimStream big;
  ASSERT_NO_FATAL_FAILURE(Connect(12, &big, &reply));
  nrtprof::ShimMessage huge = BatchMessage(1);
  huge.mutable_batch()->mutable_strings(0)->set_value(std::string(2 * kTestMaxMessageBytes, 'x'));
  big->Write(huge);
  EXPECT_FALSE(big->Read(&reply));
  EXPECT_EQ(big->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // ...while the good stream goes on: a duplicate is acked again, then the final batch.
  ASSERT_TRUE(good->Write(BatchMessage(1)));
  ASSERT_TRUE(good->Read(&reply));
  EXPECT_EQ(reply.ack().sequence(), 1u);
  ASSERT_TRUE(good->Write(BatchMessage(2, /*final=*/true)));
  ASSERT_TRUE(good->Read(&reply));
  EXPECT_EQ(reply.ack().sequence(), 2u);

  {
    grpc::ClientContext context;
    nrtprof::StatusReply status;
    ASSERT_TRUE(control_stub_->Status(&context, nrtprof::StatusRequest(), &status).ok());
    EXPECT_EQ(status.address(), "unix:" + socket_);
    EXPECT_EQ(status.events_received(), 2u);
  }
  {
    grpc::ClientContext context;
    nrtprof::StopCaptureRequest request;
    request.set_capture_id("cap");
    request.set_wait_ms(60'000);  // returns at once: the only process sent its final batch
    nrtprof::CaptureFiles files;
    const grpc::Status stopped = control_stub_->StopCapture(&context, request, &files);
    ASSERT_TRUE(stopped.ok()) << stopped.error_message();
    // Both processes that joined: the good one, and the one cut off (with nothing kept).
    EXPECT_EQ(files.processes(), 2u);
    EXPECT_EQ(files.events(), 2u);
    EXPECT_EQ(files.output_dir(), folder_ + "/captures/cap");
    EXPECT_NE(files.summary_text().find("nrt_execute"), std::string::npos);
  }
  ASSERT_TRUE(good->Read(&reply));  // told the capture ended: to stop recording, unless the
  EXPECT_EQ(reply.control().capturing(), GetParam());  // flight recorder wants every event
  good->WritesDone();
  EXPECT_FALSE(good->Read(&reply));
  EXPECT_TRUE(good->Finish().ok());
  ASSERT_EQ(sink_.traces.size(), 1u);
  ASSERT_EQ(sink_.traces[0].processes.size(), 2u);
  EXPECT_EQ(sink_.traces[0].processes[0].pid, 11u);
  EXPECT_EQ(sink_.traces[0].processes[0].calls.size(), 2u);
  EXPECT_EQ(sink_.traces[0].processes[1].pid, 12u);
  EXPECT_TRUE(sink_.traces[0].processes[1].calls.empty());
}

TEST_P(CollectorServiceTest, MalformedBatchClosesOnlyThatStream) {
  nrtprof::DaemonMessage reply;
  ShimStream stream;
  ASSERT_NO_FATAL_FAILURE(Connect(11, &stream, &reply));
  nrtprof::ShimMessage bad = BatchMessage(1);
  bad.mutable_batch()->mutable_events(0)->set_name_iid(99);
  stream->Write(bad);
  EXPECT_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("unknown string id 99"), std::string::npos)
      << status.error_message();

  // A second Hello on a stream is refused too.
  ShimStream twice;
  ASSERT_NO_FATAL_FAILURE(Connect(12, &twice, &reply));
  twice->Write(HelloMessage(12));
  EXPECT_FALSE(twice->Read(&reply));
  EXPECT_EQ(twice->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext status_context;
  nrtprof::StatusReply daemon;
  ASSERT_TRUE(control_stub_->Status(&status_context, nrtprof::StatusRequest(), &daemon).ok());
  EXPECT_EQ(daemon.processes_size(), 0);  // both closed and forgotten
}

// A message of more fields than the bound (here the test's; empty events, two bytes each on
// the wire, a record or message of a hundred bytes or more once read) is refused before it is
// read, and ends only its stream.
TEST_P(CollectorServiceTest, AMessageOfTooManyFieldsIsRefusedUnread) {
  nrtprof::DaemonMessage reply;
  ShimStream stream;
  ASSERT_NO_FATAL_FAILURE(Connect(11, &stream, &reply));
  nrtprof::ShimMessage flood = BatchMessage(1);  // a sequence, a string, an event
  for (uint64_t i = 0; i < kTestMaxElements; ++i) flood.mutable_batch()->add_events();
  stream->Write(flood);
  EXPECT_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(),
            absl::StrCat("message 2 of the stream holds ", kTestMaxElements + 3,
                         " events, strings and other elements (at most ", kTestMaxElements,
                         ")"));

  // As many as the bound allows are read: then ingest refuses these events, kind by kind.
  ShimStream read;
  ASSERT_NO_FATAL_FAILURE(Connect(12, &read, &reply));
  nrtprof::ShimMessage most = BatchMessage(1);
  for (uint64_t i = 0; i + 3 < kTestMaxElements; ++i) most.mutable_batch()->add_events();
  read->Write(most);
  EXPECT_FALSE(read->Read(&reply));
  const grpc::Status refused = read->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message(), "batch 1: event 1: unknown kind 0") << refused.error_message();
}

// A message that does not parse (here: a string field that is not UTF-8, which proto3 refuses)
// ends that stream with an error saying so; the daemon keeps nothing of it and other streams
// go on. (It used to end with OK: a typed gRPC service sees a failed parse as the stream's end.)
TEST_P(CollectorServiceTest, UnparsableMessageEndsOnlyThatStream) {
  nrtprof::DaemonMessage reply;
  ShimStream good;
  ASSERT_NO_FATAL_FAILURE(Connect(11, &good, &reply));

  ShimStream stream;
  ASSERT_NO_FATAL_FAILURE(Connect(12, &stream, &reply));
  nrtprof::ShimMessage bad = BatchMessage(1);
  bad.mutable_batch()->mutable_strings(0)->set_value("nrt_\xff\xfe");
  stream->Write(bad);
  EXPECT_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "message 2 of the stream is not a ShimMessage (malformed, or a string field that is "
            "not UTF-8)");

  ASSERT_TRUE(good->Write(BatchMessage(1)));
  ASSERT_TRUE(good->Read(&reply));
  EXPECT_EQ(reply.ack().sequence(), 1u);
  grpc::ClientContext status_context;
  nrtprof::StatusReply daemon;
  ASSERT_TRUE(control_stub_->Status(&status_context, nrtprof::StatusRequest(), &daemon).ok());
  EXPECT_EQ(daemon.processes_size(), 1);
  EXPECT_EQ(daemon.events_received(), 1u);
  good->WritesDone();
  EXPECT_FALSE(good->Read(&reply));
  EXPECT_TRUE(good->Finish().ok());
}

// Acks of batches in a row may go as one, but every batch is acked: one waiting for company
// when the shim half-closes, and a run of them, however long, before the shim's bound of
// unacknowledged batches.
TEST_P(CollectorServiceTest, EveryBatchIsAcked) {
  nrtprof::DaemonMessage reply;
  ShimStream stream;
  ASSERT_NO_FATAL_FAILURE(Connect(11, &stream, &reply));
  for (uint64_t sequence = 1; sequence <= 40; ++sequence) {
    ASSERT_TRUE(stream->Write(BatchMessage(sequence)));
  }
  uint64_t acked = 0;
  while (acked < 40) {
    ASSERT_TRUE(stream->Read(&reply));
    ASSERT_TRUE(reply.has_ack());
    EXPECT_GT(reply.ack().sequence(), acked);
    acked = reply.ack().sequence();
  }
  EXPECT_EQ(acked, 40u);

  ASSERT_TRUE(stream->Write(BatchMessage(41)));
  stream->WritesDone();
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.ack().sequence(), 41u);
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_P(CollectorServiceTest, ControlErrorsKeepCodeAndMessage) {
  grpc::ClientContext context;
  nrtprof::StopCaptureRequest request;
  request.set_capture_id("nope");
  nrtprof::CaptureFiles files;
  const grpc::Status status = control_stub_->StopCapture(&context, request, &files);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "no capture 'nope' in progress");
}

INSTANTIATE_TEST_SUITE_P(Batches, CollectorServiceTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ReadAsRecords" : "ParsedByProtobuf";
                         });

}  // namespace
}  // namespace nrtprof::daemon
