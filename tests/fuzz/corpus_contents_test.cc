// What the collector's seed corpus must hold for the fuzzer to start from every path of the
// daemon's ingest: each kind of event, events as objects and as bytes (events_encoded), clock
// syncs, model files and a process's final batch. A corpus made again can lose some of them
// without a word: session 22 found that one had lost every engine op and most DMA events (the
// device profile had become opt-in, and make_seed_corpus.sh did not turn it on). This test
// names what is missing. Its argument: the corpus folder (tests/fuzz/corpus/collector).
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/ingest.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"
#include "tests/fuzz/fuzz_input.h"

namespace nrtprof::fuzz {
namespace {

std::string g_corpus;  // the folder, from argv

struct Tally {
  int files = 0;
  int hellos = 0;
  int batches_with_events = 0;   // events as objects (an older shim, or before the control)
  int batches_with_encoded = 0;  // events_encoded
  int finals = 0;
  int clock_syncs = 0;
  int models = 0;
  std::map<nrtprof::EventKind, int> kinds;
  std::vector<std::string> unreadable;
};

Tally Read(const std::string& folder) {
  Tally tally;
  std::vector<std::string> names;
  if (DIR* d = opendir(folder.c_str()); d != nullptr) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::ifstream in(folder + "/" + name, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const std::string input = bytes.str();
    ++tally.files;
    for (const FuzzRecord& record : SplitRecords(input)) {
      nrtprof::ShimMessage message;
      if (record.truncated ||
          !message.ParseFromArray(record.message.data(), static_cast<int>(record.message.size()))) {
        tally.unreadable.push_back(name);
        continue;
      }
      if (message.has_hello()) ++tally.hellos;
      if (!message.has_batch()) continue;
      const nrtprof::EventBatch& batch = message.batch();
      std::vector<daemon::IngestedEvent> events;
      if (!daemon::RecordsOf(batch, &events)) {
        tally.unreadable.push_back(name);
        continue;
      }
      for (const daemon::IngestedEvent& e : events) ++tally.kinds[e.kind];
      if (batch.events_size() > 0) ++tally.batches_with_events;
      if (!batch.events_encoded().empty()) ++tally.batches_with_encoded;
      if (batch.final()) ++tally.finals;
      tally.clock_syncs += batch.clock_syncs_size();
      tally.models += batch.models_size();
    }
  }
  return tally;
}

TEST(CollectorSeedCorpus, HoldsEveryKindOfEventAndBothEncodings) {
  ASSERT_FALSE(g_corpus.empty()) << "give the corpus folder as the argument";
  const Tally t = Read(g_corpus);
  ASSERT_GT(t.files, 0) << "no seed in " << g_corpus;
  EXPECT_TRUE(t.unreadable.empty())
      << "a seed holds a message the daemon would not read, first in " << t.unreadable[0];
  EXPECT_GT(t.hellos, 0) << "no Hello: no stream starts";
  EXPECT_GT(t.batches_with_encoded, 0) << "no batch carries events_encoded (how the shim sends)";
  EXPECT_GT(t.finals, 0) << "no process's final batch";
  EXPECT_GT(t.clock_syncs, 0) << "no device clock sync: the hardware lane cannot be placed";
  EXPECT_GT(t.models, 0) << "no model file";
  const std::pair<nrtprof::EventKind, const char*> kinds[] = {
      {nrtprof::EVENT_RANGE, "framework ranges"},
      {nrtprof::EVENT_API_CALL, "runtime calls"},
      {nrtprof::EVENT_DEVICE_EXEC, "device executions"},
      {nrtprof::EVENT_DEVICE_OP, "engine ops (is the device profile on?)"},
      {nrtprof::EVENT_DEVICE_DMA, "DMA transfers (is the device profile on?)"},
  };
  for (const auto& [kind, what] : kinds) {
    const auto it = t.kinds.find(kind);
    EXPECT_TRUE(it != t.kinds.end() && it->second > 0) << "the corpus holds no " << what;
  }
}

}  // namespace
}  // namespace nrtprof::fuzz

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) nrtprof::fuzz::g_corpus = argv[1];
  return RUN_ALL_TESTS();
}
