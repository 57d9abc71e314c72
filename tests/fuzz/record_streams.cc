// Records real shim streams as daemon fuzzer inputs (fuzz_input.h), for the seed corpus: a
// stand-in Collector on a unix socket that tells every process to record (capture "seed"),
// acknowledges every batch, and writes what the streams sent, in arrival order, to one file
// once `--streams N` streams have ended. make_seed_corpus.sh runs programs under the shim
// against it.
//
//   record_streams --socket PATH --out FILE [--streams N] [--stack_depth D] [--models_out DIR]
//
// With --models_out, each model file a process loaded is also written there, as
// DIR/loaded_HASH.neff: real model files for the model file fuzzer's corpus.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "grpcpp/grpcpp.h"
#include "proto/nrtprof.grpc.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace nrtprof::fuzz {
namespace {

class Recorder final : public nrtprof::Collector::Service {
 public:
  Recorder(uint32_t stack_depth, std::string models_out)
      : stack_depth_(stack_depth), models_out_(std::move(models_out)) {}

  grpc::Status Stream(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<nrtprof::DaemonMessage, nrtprof::ShimMessage>* stream) override {
    int index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = started_++ % kStreams;
    }
    size_t last = std::string::npos;  // where this stream's last record starts
    nrtprof::ShimMessage m;
    while (stream->Read(&m)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        last = out_.size();
        AppendRecord(static_cast<uint8_t>(index), m.SerializeAsString(), &out_);
      }
      if (!models_out_.empty()) {
        for (const nrtprof::LoadedModel& model : m.batch().models()) {
          if (model.model_file().empty()) continue;
          // By content: programs load many models under no name or the same one.
          uint64_t fnv = 0xcbf29ce484222325;
          for (char c : model.model_file()) fnv = (fnv ^ static_cast<uint8_t>(c)) * 0x100000001b3;
          char name[32];
          snprintf(name, sizeof(name), "loaded_%016llx", static_cast<unsigned long long>(fnv));
          std::ofstream(models_out_ + "/" + name + ".neff", std::ios::binary)
              << model.model_file();
        }
      }
      nrtprof::DaemonMessage reply;
      if (m.has_hello()) {
        reply.mutable_control()->set_capturing(true);
        reply.mutable_control()->set_capture_id("seed");
        reply.mutable_control()->set_stack_depth(stack_depth_);
        // As nrtprofd says: the shim's batches then carry their events in events_encoded.
        reply.mutable_control()->set_reads_events_encoded(true);
      } else {
        reply.mutable_ack()->set_sequence(m.batch().sequence());
      }
      stream->Write(reply);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (last != std::string::npos) out_[last] = static_cast<char>(out_[last] | kCloseAfter);
    ++ended_;
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // The recording once `streams` streams have ended, or what there is after `timeout`.
  std::string Wait(int streams, std::chrono::seconds timeout, bool* complete) {
    std::unique_lock<std::mutex> lock(mu_);
    *complete = cv_.wait_for(lock, timeout, [&] { return ended_ >= streams; });
    return out_;
  }

 private:
  const uint32_t stack_depth_;
  const std::string models_out_;
  std::mutex mu_;
  std::condition_variable cv_;
  int started_ = 0;
  int ended_ = 0;
  std::string out_;
};

int Main(int argc, char** argv) {
  std::string socket, out, models_out;
  int streams = 1;
  uint32_t stack_depth = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") {
      socket = argv[i + 1];
    } else if (flag == "--out") {
      out = argv[i + 1];
    } else if (flag == "--streams") {
      streams = atoi(argv[i + 1]);
    } else if (flag == "--models_out") {
      models_out = argv[i + 1];
    } else if (flag == "--stack_depth") {
      stack_depth = static_cast<uint32_t>(atoi(argv[i + 1]));
    } else {
      fprintf(stderr, "record_streams: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (socket.empty() || out.empty() || streams < 1) {
    fprintf(stderr,
            "usage: record_streams --socket PATH --out FILE [--streams N] [--stack_depth D]\n");
    return 2;
  }
  Recorder recorder(stack_depth, models_out);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&recorder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    fprintf(stderr, "record_streams: cannot listen on %s\n", socket.c_str());
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  bool complete = false;
  const std::string recording = recorder.Wait(streams, std::chrono::seconds(120), &complete);
  server->Shutdown(std::chrono::system_clock::now());
  if (!complete) {
    fprintf(stderr, "record_streams: fewer than %d streams ended in time\n", streams);
    return 1;
  }
  std::ofstream(out, std::ios::binary) << recording;
  fprintf(stderr, "record_streams: wrote %s (%zu bytes)\n", out.c_str(), recording.size());
  return 0;
}

}  // namespace
}  // namespace nrtprof::fuzz

int main(int argc, char** argv) { return nrtprof::fuzz::Main(argc, argv); }
