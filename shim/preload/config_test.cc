#include "shim/preload/config.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace nrtprof::shim {
namespace {

std::map<std::string, std::string>* g_env;
std::vector<std::string>* g_lines;

const char* FakeGetenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}
void Collect(const char* line) { g_lines->push_back(line); }

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_env = &env_;
    g_lines = &lines_;
  }
  Config Parse() {
    Config config;
    ParseConfig(&FakeGetenv, &Collect, &config);
    return config;
  }
  std::map<std::string, std::string> env_;
  std::vector<std::string> lines_;
};

TEST_F(ConfigTest, DefaultsWhenNothingIsSet) {
  const Config c = Parse();
  EXPECT_FALSE(c.disabled);
  EXPECT_STREQ(c.addr, "");
  EXPECT_STREQ(c.capture_id, "");
  EXPECT_EQ(c.stack_depth, 0u);
  EXPECT_EQ(c.requested_mode, ShimMode::kBestEffort);
  EXPECT_EQ(c.ring_events, 32768u);
  EXPECT_EQ(c.flush_timeout_ms, 2000u);
  EXPECT_EQ(c.max_model_bytes, 64ull << 20);
  EXPECT_EQ(c.recorder_batch_ms, 500u);
  EXPECT_EQ(c.batch_ms, 500u);
  EXPECT_TRUE(lines_.empty());
}

TEST_F(ConfigTest, ReadsEveryVariable) {
  env_ = {{"NRTPROF_DISABLE", "1"},          {"NRTPROF_ADDR", "unix:/tmp/x.sock"},
          {"NRTPROF_CAPTURE", "cap-1"},      {"NRTPROF_STACKS", "64"},
          {"NRTPROF_MODE", "best_effort"},   {"NRTPROF_RING_EVENTS", "1000"},
          {"NRTPROF_FLUSH_TIMEOUT_MS", "0"}, {"NRTPROF_MAX_MODEL_BYTES", "0"},
          {"NRTPROF_DEVICE_PROFILE", "1"},    {"NRTPROF_DEVICE_PROFILE_PERIOD_MS", "0"},
          {"NRTPROF_RECORDER_BATCH_MS", "3600000"}, {"NRTPROF_BATCH_MS", "25"}};
  const Config c = Parse();
  EXPECT_TRUE(c.disabled);
  EXPECT_TRUE(c.device_profile);
  EXPECT_EQ(c.device_profile_period_ms, 0u);
  EXPECT_STREQ(c.addr, "unix:/tmp/x.sock");
  EXPECT_STREQ(c.capture_id, "cap-1");
  EXPECT_EQ(c.stack_depth, 64u);
  EXPECT_EQ(c.ring_events, 1024u) << "rounded up to a power of two";
  EXPECT_EQ(c.flush_timeout_ms, 0u);
  EXPECT_EQ(c.max_model_bytes, 0u);
  EXPECT_EQ(c.recorder_batch_ms, 3600000u);
  EXPECT_EQ(c.batch_ms, 25u);
  EXPECT_TRUE(lines_.empty());
}

TEST_F(ConfigTest, EachMalformedValueIsOneLineAndTheDefault) {
  env_ = {{"NRTPROF_DISABLE", "yes"},          {"NRTPROF_STACKS", "65"},
          {"NRTPROF_MODE", "fast"},            {"NRTPROF_RING_EVENTS", "8"},
          {"NRTPROF_FLUSH_TIMEOUT_MS", "-1"},  {"NRTPROF_MAX_MODEL_BYTES", "1e6"},
          {"NRTPROF_DEVICE_PROFILE", "on"},    {"NRTPROF_DEVICE_PROFILE_PERIOD_MS", "1s"},
          {"NRTPROF_RECORDER_BATCH_MS", "0"}, {"NRTPROF_BATCH_MS", "0.1"}};
  const Config c = Parse();
  EXPECT_FALSE(c.disabled);
  EXPECT_FALSE(c.device_profile) << "off by default, and on only for 1";
  EXPECT_EQ(c.device_profile_period_ms, 1000u);
  EXPECT_EQ(c.stack_depth, 0u);
  EXPECT_EQ(c.ring_events, 32768u);
  EXPECT_EQ(c.flush_timeout_ms, 2000u);
  EXPECT_EQ(c.max_model_bytes, 64ull << 20);
  EXPECT_EQ(c.recorder_batch_ms, 500u);
  EXPECT_EQ(c.batch_ms, 500u);
  ASSERT_EQ(lines_.size(), 10u);
  EXPECT_EQ(lines_[0], "nrtprof: NRTPROF_DISABLE='yes' is not 1 or 0; using 0 (profiling on)\n");
  EXPECT_EQ(lines_[1],
            "nrtprof: NRTPROF_DEVICE_PROFILE='on' is not 1 or 0; using 0 (no device profiles)\n");
  EXPECT_EQ(lines_[2],
            "nrtprof: NRTPROF_DEVICE_PROFILE_PERIOD_MS='1s' is not milliseconds from 0 to 3600000; "
            "using 1000\n");
  lines_.erase(lines_.begin() + 1, lines_.begin() + 3);
  EXPECT_EQ(lines_[1], "nrtprof: NRTPROF_STACKS='65' is not a depth from 0 to 64; using 0 (no stacks)\n");
  EXPECT_EQ(lines_[2], "nrtprof: NRTPROF_MODE='fast' is not best_effort or lossless; using best_effort\n");
  EXPECT_EQ(lines_[3], "nrtprof: NRTPROF_RING_EVENTS='8' is not a count from 64 to 4194304; using 32768\n");
  EXPECT_EQ(lines_[4], "nrtprof: NRTPROF_FLUSH_TIMEOUT_MS='-1' is not milliseconds from 0 to 600000; using 2000\n");
  EXPECT_EQ(lines_[5], "nrtprof: NRTPROF_RECORDER_BATCH_MS='0' is not milliseconds from 1 to 3600000; using 500\n");
  EXPECT_EQ(lines_[6], "nrtprof: NRTPROF_BATCH_MS='0.1' is not milliseconds from 1 to 3600000; using 500\n");
  EXPECT_EQ(lines_[7], "nrtprof: NRTPROF_MAX_MODEL_BYTES='1e6' is not bytes from 0 to 1073741824; using 67108864\n");
}

TEST_F(ConfigTest, NumbersMustBeWholeAndInRange) {
  for (const char* bad : {"", " 5", "5 ", "+5", "0x10", "99999999999999999999999"}) {
    env_ = {{"NRTPROF_STACKS", bad}};
    lines_.clear();
    EXPECT_EQ(Parse().stack_depth, 0u) << bad;
    EXPECT_EQ(lines_.size(), bad[0] == '\0' ? 0u : 1u) << "'" << bad << "'";
  }
}

TEST_F(ConfigTest, LosslessNeedsACapture) {
  env_ = {{"NRTPROF_MODE", "lossless"}, {"NRTPROF_CAPTURE", "cap-1"}};
  EXPECT_EQ(Parse().requested_mode, ShimMode::kLossless);
  EXPECT_TRUE(lines_.empty());
  env_ = {{"NRTPROF_MODE", "lossless"}};
  EXPECT_EQ(Parse().requested_mode, ShimMode::kBestEffort);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "nrtprof: NRTPROF_MODE=lossless needs NRTPROF_CAPTURE (nrtprof run sets it); running "
            "best_effort\n");
}

TEST_F(ConfigTest, TheSpoolFolderIsAbsoluteAndItsBoundInRange) {
  env_ = {{"NRTPROF_SPOOL_DIR", "/var/spool/x"}, {"NRTPROF_SPOOL_MAX_BYTES", "1048576"}};
  Config c = Parse();
  EXPECT_STREQ(c.spool_dir, "/var/spool/x");
  EXPECT_EQ(c.spool_max_bytes, 1048576u);
  EXPECT_TRUE(lines_.empty());
  env_ = {{"NRTPROF_SPOOL_DIR", "relative/x"}, {"NRTPROF_SPOOL_MAX_BYTES", "100"}};
  c = Parse();
  EXPECT_STREQ(c.spool_dir, "");
  EXPECT_EQ(c.spool_max_bytes, 1ull << 30);
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[0], "nrtprof: NRTPROF_SPOOL_DIR='relative/x' is not an absolute path under 512 bytes; using the default spool folder\n");
  EXPECT_EQ(lines_[1], "nrtprof: NRTPROF_SPOOL_MAX_BYTES='100' is not bytes from 65536 to 2^40; using 1073741824\n");
}

TEST_F(ConfigTest, TheClockIsAutoTscOrMonotonic) {
  EXPECT_EQ(Parse().clock, ClockChoice::kAuto);
  env_ = {{"NRTPROF_CLOCK", "tsc"}};
  EXPECT_EQ(Parse().clock, ClockChoice::kTsc);
  env_ = {{"NRTPROF_CLOCK", "monotonic"}};
  EXPECT_EQ(Parse().clock, ClockChoice::kMonotonic);
  env_ = {{"NRTPROF_CLOCK", "hpet"}};
  EXPECT_EQ(Parse().clock, ClockChoice::kAuto);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0], "nrtprof: NRTPROF_CLOCK='hpet' is not auto, tsc or monotonic; using auto\n");
}

TEST_F(ConfigTest, OverlongStringsAreRejected) {
  env_ = {{"NRTPROF_ADDR", std::string(600, 'a')}, {"NRTPROF_CAPTURE", std::string(300, 'c')}};
  const Config c = Parse();
  EXPECT_STREQ(c.addr, "");
  EXPECT_STREQ(c.capture_id, "");
  EXPECT_EQ(lines_.size(), 2u);
}

TEST_F(ConfigTest, ReadsTheTlsPaths) {
  env_ = {{"NRTPROF_ADDR", "collector.example:7878"},
          {"NRTPROF_TLS_CA", "/etc/nrtprof/ca.pem"},
          {"NRTPROF_TOKEN_FILE", "/home/u/.nrtprof/token"},
          {"NRTPROF_TLS_CERT", "/etc/nrtprof/client.pem"},
          {"NRTPROF_TLS_KEY", "/etc/nrtprof/client.key"}};
  const Config c = Parse();
  EXPECT_STREQ(c.addr, "collector.example:7878");
  EXPECT_STREQ(c.tls_ca, "/etc/nrtprof/ca.pem");
  EXPECT_STREQ(c.token_file, "/home/u/.nrtprof/token");
  EXPECT_STREQ(c.tls_cert, "/etc/nrtprof/client.pem");
  EXPECT_STREQ(c.tls_key, "/etc/nrtprof/client.key");
  EXPECT_TRUE(lines_.empty());
}

TEST_F(ConfigTest, ReadsTheServiceUser) {
  env_ = {{"NRTPROF_SERVICE_USER", "nrtprof"}};
  EXPECT_STREQ(Parse().service_user, "nrtprof");
  EXPECT_TRUE(lines_.empty());
  const std::string long_name(300, 'u');
  env_ = {{"NRTPROF_SERVICE_USER", long_name}};
  EXPECT_STREQ(Parse().service_user, "");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("NRTPROF_SERVICE_USER"), std::string::npos) << lines_[0];
}

TEST_F(ConfigTest, ATlsPathTooLongIsReportedAndUnset) {
  env_ = {{"NRTPROF_TOKEN_FILE", "/" + std::string(600, 'a')}};
  const Config c = Parse();
  EXPECT_STREQ(c.token_file, "");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].rfind("nrtprof: NRTPROF_TOKEN_FILE='/aaa", 0), 0u) << lines_[0];
  EXPECT_NE(lines_[0].find("is not a path under 512 bytes; using none\n"), std::string::npos)
      << lines_[0];
}

// The job (Hello.job): the operator's label before the runtime's collective root; a value that
// is not 1 to 255 printable ASCII characters is one line and no job, never the program's end.
TEST_F(ConfigTest, TheJobIsTheLabelElseTheRuntimesRoot) {
  EXPECT_STREQ(Parse().job, "");
  env_ = {{"NEURON_RT_ROOT_COMM_ID", "10.0.0.7:62182"}};
  EXPECT_STREQ(Parse().job, "10.0.0.7:62182");
  env_ = {{"NEURON_RT_ROOT_COMM_ID", "10.0.0.7:62182"}, {"NRTPROF_JOB", "llama-70b run 3"}};
  EXPECT_STREQ(Parse().job, "llama-70b run 3");
  env_ = {{"NEURON_RT_ROOT_COMM_ID", "10.0.0.7:62182"}, {"NRTPROF_JOB", ""}};
  EXPECT_STREQ(Parse().job, "10.0.0.7:62182") << "an empty label is no label";
  env_ = {{"NRTPROF_JOB", std::string(255, 'j')}};
  EXPECT_EQ(std::string(Parse().job), std::string(255, 'j'));
  EXPECT_TRUE(lines_.empty());

  env_ = {{"NRTPROF_JOB", std::string(256, 'j')}};
  EXPECT_STREQ(Parse().job, "");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0], "nrtprof: NRTPROF_JOB='" + std::string(64, 'j') +
                           "' is not a job of 1 to 255 printable ASCII characters; using no "
                           "job\n");
  lines_.clear();
  env_ = {{"NRTPROF_JOB", "a\tb"}, {"NEURON_RT_ROOT_COMM_ID", "10.0.0.7:62182"}};
  EXPECT_STREQ(Parse().job, "") << "the label refused: no job, not the root";
  env_ = {{"NEURON_RT_ROOT_COMM_ID", "h\xc3\xa9:1"}};
  EXPECT_STREQ(Parse().job, "");
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[0].rfind("nrtprof: NRTPROF_JOB='a\tb' is not a job", 0), 0u) << lines_[0];
  EXPECT_EQ(lines_[1].rfind("nrtprof: NEURON_RT_ROOT_COMM_ID='h", 0), 0u) << lines_[1];
}

// The rank (Hello.rank): RANK as torchrun sets it; anything else one line and no rank.
TEST_F(ConfigTest, TheRankIsTorchrunsRank) {
  EXPECT_EQ(Parse().rank, -1);
  env_ = {{"RANK", "0"}};
  EXPECT_EQ(Parse().rank, 0);
  env_ = {{"RANK", "2147483647"}};
  EXPECT_EQ(Parse().rank, 2147483647);
  env_ = {{"RANK", ""}};
  EXPECT_EQ(Parse().rank, -1);
  EXPECT_TRUE(lines_.empty());
  for (const char* bad : {"-1", "2147483648", "3x", "rank0"}) {
    lines_.clear();
    env_ = {{"RANK", bad}};
    EXPECT_EQ(Parse().rank, -1) << bad;
    ASSERT_EQ(lines_.size(), 1u) << bad;
    EXPECT_EQ(lines_[0], std::string("nrtprof: RANK='") + bad +
                             "' is not a rank from 0 to 2147483647; using none\n");
  }
}

// Launchers other than torchrun: JAX on Neuron, MPI and Slurm. RANK comes first; the first
// variable set decides, and a bad one is not passed over for the next.
TEST_F(ConfigTest, TheRankOfOtherLaunchers) {
  env_ = {{"NEURON_PJRT_PROCESS_INDEX", "3"}};
  EXPECT_EQ(Parse().rank, 3);
  env_ = {{"OMPI_COMM_WORLD_RANK", "12"}};
  EXPECT_EQ(Parse().rank, 12);
  env_ = {{"PMI_RANK", "7"}};
  EXPECT_EQ(Parse().rank, 7);
  env_ = {{"SLURM_PROCID", "31"}};
  EXPECT_EQ(Parse().rank, 31);
  // torchrun under srun: each worker's RANK, not the node's task number.
  env_ = {{"SLURM_PROCID", "1"}, {"RANK", "9"}};
  EXPECT_EQ(Parse().rank, 9);
  env_ = {{"SLURM_PROCID", "1"}, {"OMPI_COMM_WORLD_RANK", "4"}, {"NEURON_PJRT_PROCESS_INDEX", "2"}};
  EXPECT_EQ(Parse().rank, 2);
  env_ = {{"RANK", ""}, {"PMI_RANK", "5"}};
  EXPECT_EQ(Parse().rank, 5) << "an empty variable is unset";
  EXPECT_TRUE(lines_.empty());
  env_ = {{"NEURON_PJRT_PROCESS_INDEX", "x"}, {"SLURM_PROCID", "1"}};
  EXPECT_EQ(Parse().rank, -1);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0], "nrtprof: NEURON_PJRT_PROCESS_INDEX='x' is not a rank from 0 to "
                       "2147483647; using none\n");
}

}  // namespace
}  // namespace nrtprof::shim
