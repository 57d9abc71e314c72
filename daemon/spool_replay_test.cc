#include "daemon/spool_replay.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/spool_file.h"
#include "gtest/gtest.h"
#include "proto/nrtprof.pb.h"

namespace nrtprof::daemon {
namespace {

std::string TempDir() {
  std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/replayXXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

nrtprof::Hello HelloOf(uint32_t pid) {
  nrtprof::Hello hello;
  hello.set_pid(pid);
  hello.set_process_start_ns(1000 + pid);
  hello.set_boot_id("boot");
  hello.set_executable("/bin/app");
  hello.set_capture_id("cap");
  hello.set_mode(nrtprof::MODE_LOSSLESS);
  return hello;
}

// A batch of `calls` nrt_execute events; the first batch of a stream defines the name.
nrtprof::ShimMessage Batch(uint64_t sequence, int calls, bool define) {
  nrtprof::ShimMessage m;
  nrtprof::EventBatch* b = m.mutable_batch();
  b->set_sequence(sequence);
  if (define) {
    nrtprof::InternedString* s = b->add_strings();
    s->set_iid(1);
    s->set_value("nrt_execute");
  }
  for (int i = 0; i < calls; ++i) {
    nrtprof::Event* e = b->add_events();
    e->set_kind(nrtprof::EVENT_API_CALL);
    e->set_name_iid(1);
    e->set_start_ns(sequence * 1000 + i);
    e->set_duration_ns(5);
    e->set_tid(7);
    e->set_nc_idx(-1);
  }
  return m;
}

// A spool as a shim writes it: its Hello, then batches of two streams (sequences restart, the
// second stream defines the name again).
std::string WriteSpool(const std::string& dir, uint32_t pid) {
  SpoolWriter w;
  std::string error;
  EXPECT_TRUE(w.Open(dir, SpoolFileName("cap", pid, 1000 + pid), 1 << 20, &error)) << error;
  nrtprof::ShimMessage hello;
  *hello.mutable_hello() = HelloOf(pid);
  EXPECT_TRUE(w.Append(hello.SerializeAsString()));
  EXPECT_TRUE(w.Append(Batch(1, 3, true).SerializeAsString()));
  EXPECT_TRUE(w.Append(Batch(2, 4, false).SerializeAsString()));
  EXPECT_TRUE(w.Append(Batch(1, 5, true).SerializeAsString()));  // after a reconnect
  return w.path();
}

ProcessCapture StreamCapture(uint32_t pid, int calls) {
  ProcessIngest in(HelloOf(pid), IngestLimits());
  in.BeginCapture();
  EXPECT_TRUE(in.OnBatch(Batch(1, calls, true).batch()).ok());
  return in.TakeCapture();
}

TEST(SpoolReplayTest, ASpoolReplacesWhatTheStreamsDeliveredAndAddsTheUnseen) {
  const std::string dir = TempDir();
  WriteSpool(dir, 10);
  WriteSpool(dir, 11);  // never reached this daemon
  std::vector<ProcessCapture> processes;
  processes.push_back(StreamCapture(10, 2));  // its stream delivered only part
  processes.push_back(StreamCapture(12, 6));  // best effort: no spool, kept as it is
  std::vector<std::string> problems;
  ApplySpools(dir, "cap", IngestLimits(), &processes, &problems);
  EXPECT_TRUE(problems.empty()) << problems[0];
  ASSERT_EQ(processes.size(), 3u);
  std::map<uint32_t, size_t> events;
  for (const ProcessCapture& p : processes) events[p.hello.pid()] = p.events.size();
  EXPECT_EQ(events[10], 12u) << "3 + 4 + 5 from the spool, not the stream's 2";
  EXPECT_EQ(events[11], 12u);
  EXPECT_EQ(events[12], 6u);
  // Another capture's spools are not touched.
  std::vector<ProcessCapture> other;
  ApplySpools(dir, "cap2", IngestLimits(), &other, &problems);
  EXPECT_TRUE(other.empty());
}

TEST(SpoolReplayTest, ATornOrBadSpoolKeepsWhatCameBeforeAndSaysSo) {
  const std::string dir = TempDir();
  const std::string path = WriteSpool(dir, 20);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  ASSERT_EQ(truncate(path.c_str(), st.st_size - 3), 0);
  std::vector<ProcessCapture> processes;
  std::vector<std::string> problems;
  ApplySpools(dir, "cap", IngestLimits(), &processes, &problems);
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].events.size(), 7u) << "the last batch was cut";
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("ends in a cut record"), std::string::npos) << problems[0];

  // A file that is not a spool is one line and nothing else.
  SpoolWriter w;
  std::string error;
  ASSERT_TRUE(w.Open(dir, SpoolFileName("cap", 21, 1), 1 << 20, &error));
  ASSERT_TRUE(w.Append("not a message"));
  processes.clear();
  problems.clear();
  ApplySpools(dir, "cap", IngestLimits(), &processes, &problems);
  EXPECT_EQ(processes.size(), 1u);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[1].find("does not start with a valid Hello"), std::string::npos) << problems[1];
}

TEST(SpoolReplayTest, ManifestsComeBackAndAreRemovedWithTheSpools) {
  const std::string dir = TempDir();
  ASSERT_TRUE(WriteCaptureManifest(dir, {"cap", "/data/out", 16, std::nullopt}).ok());
  WriteSpool(dir, 30);
  FILE* f = fopen((dir + "/junk.capture").c_str(), "w");
  fputs("nothing\n", f);
  fclose(f);
  std::vector<std::string> skipped;
  std::vector<CaptureManifest> m = ReadCaptureManifests(dir, &skipped);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].capture_id, "cap");
  EXPECT_EQ(m[0].output_dir, "/data/out");
  EXPECT_EQ(m[0].stack_depth, 16u);
  EXPECT_FALSE(m[0].owner.has_value());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("junk.capture is not one"), std::string::npos) << skipped[0];
  RemoveCaptureSpool(dir, "cap");
  EXPECT_TRUE(ReadCaptureManifests(dir, &skipped).empty());
  std::vector<ProcessCapture> processes;
  std::vector<std::string> problems;
  ApplySpools(dir, "cap", IngestLimits(), &processes, &problems);
  EXPECT_TRUE(processes.empty()) << "the spool went with the manifest";
}

// A user's capture on a shared service keeps its user across a restart of the daemon.
TEST(SpoolReplayTest, AUsersManifestKeepsItsOwner) {
  const std::string dir = TempDir();
  ASSERT_TRUE(WriteCaptureManifest(dir, {"mine", "/root/users/1001/mine", 0, 1001u}).ok());
  std::vector<std::string> skipped;
  std::vector<CaptureManifest> m = ReadCaptureManifests(dir, &skipped);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].owner, std::optional<uint32_t>(1001u));
  EXPECT_TRUE(skipped.empty());
}

// Another user's spool file never stands in for the processes of a user's capture.
TEST(SpoolReplayTest, AUsersCaptureTakesOnlyThatUsersSpools) {
  const std::string dir = TempDir();
  WriteSpool(dir, 30);  // ours (this test's uid)
  std::vector<ProcessCapture> processes;
  std::vector<std::string> problems;
  ApplySpools(dir, "cap", IngestLimits(), &processes, &problems, getuid() + 1);
  EXPECT_TRUE(processes.empty());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(absl::StrCat("is not the capture's user's (uid ", getuid() + 1,
                                          "); ignored")),
            std::string::npos)
      << problems[0];
  problems.clear();
  ApplySpools(dir, "cap", IngestLimits(), &processes, &problems, getuid());
  EXPECT_EQ(processes.size(), 1u);
  EXPECT_TRUE(problems.empty()) << problems[0];
}

TEST(SpoolReplayTest, OrphanSpoolsOfGoneProcessesAreRemoved) {
  const std::string dir = TempDir();
  // No manifest for "cap": a spool of a live process (this one) stays, one of a process that
  // cannot exist goes; a capture with a manifest keeps its spools.
  SpoolWriter live, gone, kept;
  std::string error;
  ASSERT_TRUE(live.Open(dir, SpoolFileName("cap", static_cast<uint32_t>(getpid()), 1), 1 << 20, &error));
  ASSERT_TRUE(gone.Open(dir, SpoolFileName("cap", 0x7ffffff0u, 1), 1 << 20, &error));
  ASSERT_TRUE(kept.Open(dir, SpoolFileName("other", 0x7ffffff0u, 1), 1 << 20, &error));
  ASSERT_TRUE(WriteCaptureManifest(dir, {"other", "/out", 0, std::nullopt}).ok());
  const std::vector<std::string> lines = RemoveOrphanSpools(dir);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(SpoolFileName("cap", 0x7ffffff0u, 1)), std::string::npos) << lines[0];
  EXPECT_EQ(access(live.path().c_str(), F_OK), 0);
  EXPECT_NE(access(gone.path().c_str(), F_OK), 0);
  EXPECT_EQ(access(kept.path().c_str(), F_OK), 0);
}

}  // namespace
}  // namespace nrtprof::daemon
