// The shapes in which real programs load libnrt, each run bare and under `nrtprof run` (real
// daemon, real shim, simulated runtime): the program's output and exit code must not change,
// and every libnrt call must be in the capture, or the one line saying why it cannot be.
//  - a module that links libnrt, dlopen()ed RTLD_LOCAL (Python extension modules, ctypes, C
//    plugin hosts): the real functions are out of reach of dlsym(RTLD_NEXT);
//  - the same module opened RTLD_DEEPBIND, bound lazily or at load: its references bind to
//    libnrt directly, past the preloaded shim;
//  - the module unloaded and loaded again;
//  - dlmopen() into a namespace of its own: not recorded, and said so.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::CallsByName;
using testing::kIsolatedEnv;
using testing::ReadFile;
using testing::Result;
using testing::RunProcess;
using testing::RunProfiled;
using testing::Runfile;
using testing::TempDir;

std::vector<std::string> Host(const std::string& module, const std::string& mode, int n,
                              int rounds) {
  return {Runfile("tests/plugin_host"), Runfile(module), mode, std::to_string(n),
          std::to_string(rounds)};
}

// Runs `command` bare and profiled; the profiled run behaves the same and records
// `round_trips` writes and reads in `rounds` runtime sessions.
void ExpectRecordedAsBare(const std::string& name, const std::vector<std::string>& command,
                          int round_trips, int rounds) {
  SCOPED_TRACE(name);
  const Result bare = RunProcess(command, kIsolatedEnv);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const std::string out = TempDir(name);
  const Result profiled = RunProfiled(out, command);
  EXPECT_EQ(profiled.exit_code, bare.exit_code) << profiled.err;
  EXPECT_EQ(profiled.out, bare.out);
  EXPECT_FALSE(absl::StrContains(profiled.err, "calls to it fail")) << profiled.err;
  const std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_EQ(calls.count("nrt_tensor_write") ? calls.at("nrt_tensor_write") : 0, round_trips)
      << ReadFile(out + "/summary.txt") << profiled.err;
  EXPECT_EQ(calls.count("nrt_tensor_read") ? calls.at("nrt_tensor_read") : 0, round_trips);
  EXPECT_EQ(calls.count("nrt_init") ? calls.at("nrt_init") : 0, rounds);
  EXPECT_EQ(calls.count("nrt_close") ? calls.at("nrt_close") : 0, rounds);
}

TEST(LoadShapes, ModuleOpenedLocal) {
  ExpectRecordedAsBare("local", Host("tests/libnrt_plugin.so", "local", 200, 1), 200, 1);
}

TEST(LoadShapes, ModuleOpenedLocalThroughCtypes) {
  // ctypes.CDLL opens RTLD_LOCAL, as Python does for every extension module.
  ExpectRecordedAsBare(
      "ctypes",
      {"/usr/bin/python3", "-c",
       "import ctypes, sys\n"
       "n = ctypes.CDLL(sys.argv[1]).plugin_round_trips(150)\n"
       "print('ctypes:', n)\n"
       "sys.exit(0 if n == 150 else 1)\n",
       Runfile("tests/libnrt_plugin.so")},
      150, 1);
}

TEST(LoadShapes, ModuleOpenedDeepBind) {
  ExpectRecordedAsBare("deepbind", Host("tests/libnrt_plugin.so", "deepbind", 200, 1), 200, 1);
}

TEST(LoadShapes, LazilyBoundModuleOpenedDeepBind) {
  ExpectRecordedAsBare("deepbind_lazy", Host("tests/libnrt_plugin_lazy.so", "deepbind", 200, 1),
                       200, 1);
}

TEST(LoadShapes, ModuleUnloadedAndLoadedAgain) {
  ExpectRecordedAsBare("reload", Host("tests/libnrt_plugin.so", "local", 100, 3), 300, 3);
  ExpectRecordedAsBare("reload_deepbind", Host("tests/libnrt_plugin_lazy.so", "deepbind", 100, 3),
                       300, 3);
}

TEST(LoadShapes, ModuleInItsOwnNamespaceIsRunAndSaidNotRecorded) {
  const std::vector<std::string> command = Host("tests/libnrt_plugin.so", "dlmopen", 100, 1);
  const Result bare = RunProcess(command, kIsolatedEnv);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const Result profiled = RunProfiled(TempDir("dlmopen"), command);
  // Nothing recorded: nrtprof run's code for an empty capture of a program that exited 0.
  EXPECT_EQ(profiled.exit_code, 3) << profiled.err;
  EXPECT_EQ(profiled.out, bare.out);
  // One line names the library and why its calls are missing.
  const std::vector<std::string> lines = absl::StrSplit(profiled.err, '\n');
  int said = 0;
  for (const std::string& line : lines) {
    if (absl::StrContains(line, "link-map namespace (dlmopen)")) {
      ++said;
      EXPECT_TRUE(absl::StartsWith(line, "nrtprof: ")) << line;
      EXPECT_TRUE(absl::StrContains(line, "libnrt.so.1")) << line;
      EXPECT_TRUE(absl::StrContains(line, "not recorded")) << line;
    }
  }
  EXPECT_EQ(said, 1) << profiled.err;
}

TEST(LoadShapes, CaptureSaysWhatItCouldNotRecord) {
  // A process that uses libnrt both ways: the first module's calls are recorded, the second's
  // (in a namespace of its own) are not, and the capture says so beside the table.
  const std::vector<std::string> command = Host("tests/libnrt_plugin.so", "local,dlmopen", 100, 2);
  const Result bare = RunProcess(command, kIsolatedEnv);
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  const std::string out = TempDir("notices");
  const Result profiled = RunProfiled(out, command);
  EXPECT_EQ(profiled.exit_code, 0) << profiled.err;
  EXPECT_EQ(profiled.out, bare.out);
  const std::map<std::string, int64_t> calls = CallsByName(out);
  EXPECT_EQ(calls.count("nrt_tensor_write") ? calls.at("nrt_tensor_write") : 0, 100);
  const std::string summary = ReadFile(out + "/summary.txt");
  EXPECT_TRUE(absl::StrContains(summary, "Not recorded: pid ")) << summary;
  EXPECT_TRUE(absl::StrContains(summary, "(dlmopen); its libnrt calls there are not recorded"))
      << summary;
  EXPECT_TRUE(absl::StrContains(ReadFile(out + "/summary.json"), "\"notices\": [\"pid "));
}

}  // namespace
}  // namespace nrtprof
