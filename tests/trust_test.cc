// Another local user must not receive a user's traces (issue 12): the real nrtprof, nrtprofd
// and shim, run as a user "alice" (an unused uid) while "mallory" (nobody) squats her default
// socket folder, plants a symlink or a socket in a folder others can write, or runs a daemon she
// is pointed at; and a shared daemon of another user that alice trusts by NRTPROF_SERVICE_USER,
// which must keep working. Root only (it acts as other users), so unsandboxed; the binaries are
// copied where alice can run them (bazel's output tree is under root's 0700 home).
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <dirent.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/testing/processes.h"
#include "tests/testing/subprocess.h"

namespace nrtprof {
namespace {

using testing::ReadFile;
using testing::Result;
using testing::Runfile;

constexpr uid_t kMallory = 65534;  // nobody
constexpr gid_t kMalloryGroup = 65534;

size_t Entries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  size_t n = 0;
  while (dirent* e = readdir(d)) n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  closedir(d);
  return n;
}

size_t CountLines(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) n += absl::StrContains(line, part);
  return n;
}

class TrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: it runs programs as two other users";
    alice_ = 40000 + getpid() % 20000;
    default_dir_ = "/tmp/nrtprof-" + std::to_string(alice_);
    ASSERT_NE(access(default_dir_.c_str(), F_OK), 0) << default_dir_ << " already exists";
    char root[] = "/tmp/nrtprof-trust-XXXXXX";
    ASSERT_NE(mkdtemp(root), nullptr);
    root_ = root;
    ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
    bin_ = root_ + "/bin";
    home_ = root_ + "/alice";
    logs_ = root_ + "/logs";
    attacker_ = root_ + "/mallory";
    for (const std::string& d : {bin_, home_, logs_, attacker_}) {
      ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
    }
    ASSERT_EQ(chown(home_.c_str(), alice_, alice_), 0);
    ASSERT_EQ(chown(attacker_.c_str(), kMallory, kMalloryGroup), 0);
    // Side by side, as installed: nrtprof finds nrtprofd and the shim beside itself.
    for (const char* f :
         {"client/nrtprof", "daemon/nrtprofd", "shim/libnrtprof_shim.so",
          "shim/libnrtprof_shim_backend.so", "examples/rmsnorm", "sim/libnrt.so.1",
          "tests/abrupt_end"}) {
      ASSERT_EQ(testing::RunProcess({"/bin/cp", "-L", Runfile(f), bin_ + "/"}).exit_code, 0) << f;
    }
    ASSERT_EQ(testing::RunProcess({"/bin/chmod", "-R", "a+rX", bin_}).exit_code, 0);
  }

  void TearDown() override {
    for (pid_t pid : daemons_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (!root_.empty()) testing::RunProcess({"/bin/rm", "-rf", root_, default_dir_});
  }

  // argv as `uid` (group `gid`, supplementary `groups`) in alice's home, with a clean
  // environment plus `env`.
  Result RunAs(uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
               const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {}) {
    std::string out, err;
    const pid_t pid = SpawnAs(uid, gid, groups, argv, env, &out, &err);
    return WaitFor(pid, out, err);
  }

  // RunAs's start: the child's pid, and where its stdout and stderr go.
  pid_t SpawnAs(uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
                const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                std::string* out_path, std::string* err_path) {
    const std::string out = absl::StrCat(logs_, "/", runs_, ".out");
    const std::string err = absl::StrCat(logs_, "/", runs_++, ".err");
    *out_path = out;
    *err_path = err;
    std::map<std::string, std::string> all = {{"PATH", "/usr/bin:/bin"},
                                              {"HOME", home_},
                                              {"NRT_SIM_TIME_SCALE", "0"},
                                              {"LD_LIBRARY_PATH", bin_}};
    for (const auto& [k, v] : env) all[k] = v;
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : all) env_strings.push_back(k + "=" + v);
    const pid_t pid = fork();
    if (pid == 0) {
      const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, STDOUT_FILENO);
      dup2(e, STDERR_FILENO);
      if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0 ||
          chdir(home_.c_str()) != 0) {
        _exit(126);
      }
      std::vector<char*> args, envp;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      for (std::string& s : env_strings) envp.push_back(s.data());
      envp.push_back(nullptr);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    return pid;
  }

  Result WaitFor(pid_t pid, const std::string& out, const std::string& err) {
    int status = 0;
    waitpid(pid, &status, 0);
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  Result Alice(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {}) {
    return RunAs(alice_, alice_, {}, argv, env);
  }

  std::vector<std::string> Rmsnorm() const {
    return {bin_ + "/rmsnorm", "--variant", "fused", "--iters", "3"};
  }

  // nrtprofd as nobody (root drops to it before making anything) on `socket`.
  void StartDaemonAsNobody(const std::string& socket, const std::string& output_root,
                           const std::vector<std::string>& flags = {}) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    std::vector<std::string> args = {bin_ + "/nrtprofd", "--socket=" + socket,
                                     "--output_root=" + output_root, "--user=nobody",
                                     absl::StrCat("--ready_fd=", ready[1])};
    args.insert(args.end(), flags.begin(), flags.end());
    const std::string log = absl::StrCat(logs_, "/daemon", daemons_.size(), ".err");
    const pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      const int e = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(e, STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    daemons_.push_back(pid);
    mallory_socket_ = socket;
    close(ready[1]);
    char buf[64] = {};
    pollfd pfd{ready[0], POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 20000), 1);
    ASSERT_GT(read(ready[0], buf, sizeof(buf) - 1), 0) << ReadFile(log);
    close(ready[0]);
  }

  // What mallory could see of alice: nothing in her daemon's output root, and no event nor
  // process ever reached it (asked as root, trusting nobody's daemon for this, through a hard
  // link to its socket in a folder of root's: the CLI trusts none of mallory's folders).
  void ExpectNothingReachedMallory() {
    EXPECT_EQ(Entries(attacker_ + "/caps"), 0u) << "the impostor's output root is not empty";
    const std::string probe = root_ + "/probe";
    mkdir(probe.c_str(), 0755);
    unlink((probe + "/nrtprofd.sock").c_str());
    ASSERT_EQ(link(mallory_socket_.c_str(), (probe + "/nrtprofd.sock").c_str()), 0);
    const Result status = RunAs(0, 0, {}, {bin_ + "/nrtprof", "status"},
                                {{"NRTPROF_ADDR", probe + "/nrtprofd.sock"},
                                 {"NRTPROF_SERVICE_USER", "nobody"}});
    ASSERT_EQ(status.exit_code, 0) << status.err;
    EXPECT_TRUE(absl::StrContains(status.out, "\nevents received:     0\n")) << status.out;
    EXPECT_TRUE(absl::StrContains(status.out, "\nconnected processes: 0\n")) << status.out;
  }

  // Alice's program, profiled by `nrtprof run` and by the shim alone, gives exactly its own
  // output, and says `reason` once, on stderr; nrtprof status refuses with it.
  void ExpectRefused(const std::string& reason) {
    const Result plain = Alice(Rmsnorm());
    ASSERT_EQ(plain.exit_code, 0) << plain.err;

    const std::string out = home_ + "/alice-cap";
    std::vector<std::string> argv = {bin_ + "/nrtprof", "run", "--out", out, "--"};
    for (const std::string& a : Rmsnorm()) argv.push_back(a);
    const Result profiled = Alice(argv);
    EXPECT_EQ(profiled.exit_code, 0) << profiled.err;
    EXPECT_EQ(profiled.out, plain.out);
    EXPECT_EQ(CountLines(profiled.err, reason), 1u) << profiled.err;
    EXPECT_EQ(CountLines(profiled.err, "starting a private daemon for this run"), 1u)
        << profiled.err;
    // The capture still happened, with alice's own private daemon, in her folder.
    const auto calls = testing::CallsByName(out);
    EXPECT_EQ(calls.count("nrt_load") ? calls.at("nrt_load") : 0, 1) << profiled.err;

    const Result preloaded = Alice(Rmsnorm(), {{"LD_PRELOAD", bin_ + "/libnrtprof_shim.so"}});
    EXPECT_EQ(preloaded.exit_code, 0) << preloaded.err;
    EXPECT_EQ(preloaded.out, plain.out);
    EXPECT_TRUE(absl::StartsWith(preloaded.err, "nrtprof: not trusting the daemon at unix:" +
                                                    default_dir_ + "/nrtprofd.sock: " + reason))
        << preloaded.err;
    EXPECT_TRUE(absl::EndsWith(preloaded.err, "; not profiling this process\n")) << preloaded.err;
    EXPECT_EQ(std::count(preloaded.err.begin(), preloaded.err.end(), '\n'), 1) << preloaded.err;

    const Result status = Alice({bin_ + "/nrtprof", "status"});
    EXPECT_NE(status.exit_code, 0);
    EXPECT_EQ(status.out, "");
    EXPECT_TRUE(absl::StrContains(status.err, reason)) << status.err;
    ExpectNothingReachedMallory();
  }

  uid_t alice_ = 0;
  std::string default_dir_, root_, bin_, home_, logs_, attacker_;
  std::vector<pid_t> daemons_;
  std::string mallory_socket_;  // the last daemon started
  int runs_ = 0;
};

// The issue's report: mallory makes alice's default folder first, open to all, and listens.
TEST_F(TrustTest, SquattedDefaultFolderGetsNothing) {
  ASSERT_EQ(mkdir(default_dir_.c_str(), 0777), 0);
  ASSERT_EQ(chmod(default_dir_.c_str(), 0777), 0);
  ASSERT_EQ(chown(default_dir_.c_str(), kMallory, kMalloryGroup), 0);
  ASSERT_NO_FATAL_FAILURE(
      StartDaemonAsNobody(default_dir_ + "/nrtprofd.sock", attacker_ + "/caps"));
  ASSERT_EQ(chmod((default_dir_ + "/nrtprofd.sock").c_str(), 0666), 0);
  ExpectRefused("socket folder " + default_dir_ + " belongs to uid 65534 (nobody), not to you (uid " +
                std::to_string(alice_) + ") or root");
}

// Mallory's folder, behind a symlink at alice's default path.
TEST_F(TrustTest, SymlinkedSocketFolderGetsNothing) {
  const std::string target = attacker_ + "/sock";
  ASSERT_NO_FATAL_FAILURE(StartDaemonAsNobody(target + "/nrtprofd.sock", attacker_ + "/caps"));
  ASSERT_EQ(chmod(target.c_str(), 0777), 0);
  ASSERT_EQ(chmod((target + "/nrtprofd.sock").c_str(), 0666), 0);
  ASSERT_EQ(symlink(target.c_str(), default_dir_.c_str()), 0);
  ASSERT_EQ(lchown(default_dir_.c_str(), kMallory, kMalloryGroup), 0);
  ExpectRefused("socket folder " + default_dir_ + " is a symlink (to " + target +
                ", made by uid 65534 (nobody)), not a folder");
}

// Alice's own folder, but her group (mallory's too) can write it: mallory's socket is in it.
TEST_F(TrustTest, GroupWritableSocketFolderGetsNothing) {
  ASSERT_EQ(mkdir(default_dir_.c_str(), 0770), 0);
  ASSERT_EQ(chown(default_dir_.c_str(), alice_, kMalloryGroup), 0);
  ASSERT_EQ(chmod(default_dir_.c_str(), 0770), 0);
  ASSERT_NO_FATAL_FAILURE(
      StartDaemonAsNobody(default_dir_ + "/nrtprofd.sock", attacker_ + "/caps"));
  ASSERT_EQ(chmod((default_dir_ + "/nrtprofd.sock").c_str(), 0666), 0);
  ExpectRefused("socket folder " + default_dir_ + " (of uid " + std::to_string(alice_) +
                ") is writable by its group (mode 0770)");
}

// A daemon of another user, at an address alice was given, in a folder like /tmp (root's,
// sticky: only the listener's credentials tell): refused, unless that user is the configured
// service user.
TEST_F(TrustTest, DaemonOfAnotherUserAtAnExplicitAddress) {
  const std::string shared = root_ + "/shared";
  ASSERT_EQ(mkdir(shared.c_str(), 01777), 0);
  ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
  const std::string socket = shared + "/nrtprofd.sock";
  ASSERT_NO_FATAL_FAILURE(StartDaemonAsNobody(socket, attacker_ + "/caps"));
  ASSERT_EQ(chmod(socket.c_str(), 0666), 0);
  const std::string reason = "the daemon on " + socket + " runs as uid 65534 (nobody)";
  std::vector<std::string> argv = {bin_ + "/nrtprof", "run", "--"};
  for (const std::string& a : Rmsnorm()) argv.push_back(a);

  const Result run = Alice(argv, {{"NRTPROF_ADDR", "unix:" + socket}});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_EQ(run.out, "");  // the program never ran: its capture would have gone there
  EXPECT_EQ(CountLines(run.err, reason), 1u) << run.err;
  const Result preloaded = Alice(
      Rmsnorm(), {{"NRTPROF_ADDR", socket}, {"LD_PRELOAD", bin_ + "/libnrtprof_shim.so"}});
  EXPECT_EQ(preloaded.exit_code, 0);
  EXPECT_EQ(CountLines(preloaded.err, reason), 1u) << preloaded.err;
  EXPECT_EQ(std::count(preloaded.err.begin(), preloaded.err.end(), '\n'), 1) << preloaded.err;
  const Result status = Alice({bin_ + "/nrtprof", "status"}, {{"NRTPROF_ADDR", socket}});
  EXPECT_NE(status.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(status.err, reason)) << status.err;
  ExpectNothingReachedMallory();

  // Named as the service user, the same daemon would be alice's collector; but it is no shared
  // service (no --socket_group), so it admits only its own user, whatever its socket's mode,
  // and says so.
  const Result trusted = Alice({bin_ + "/nrtprof", "status"},
                               {{"NRTPROF_ADDR", socket}, {"NRTPROF_SERVICE_USER", "nobody"}});
  EXPECT_EQ(trusted.exit_code, 1) << trusted.err;
  EXPECT_TRUE(absl::StrContains(
      trusted.err, absl::StrCat("nrtprofd refused the connection: uid ", alice_,
                                " is not this daemon's user (uid 65534) and no --socket_group "
                                "is given")))
      << trusted.err;
}

// With XDG_RUNTIME_DIR set (a 0700 folder of the user's, as systemd's /run/user/UID), the
// daemon, the CLI and the shim meet there: a squatted /tmp/nrtprof-UID plays no part.
TEST_F(TrustTest, TheRuntimeDirIsTheDefaultWhenSet) {
  ASSERT_EQ(mkdir(default_dir_.c_str(), 0777), 0);
  ASSERT_EQ(chmod(default_dir_.c_str(), 0777), 0);
  ASSERT_EQ(chown(default_dir_.c_str(), kMallory, kMalloryGroup), 0);
  const std::string run = home_ + "/run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chown(run.c_str(), alice_, alice_), 0);
  const std::map<std::string, std::string> env = {{"XDG_RUNTIME_DIR", run}};
  std::string out, err;
  const pid_t daemon = SpawnAs(alice_, alice_, {}, {bin_ + "/nrtprofd"}, env, &out, &err);
  daemons_.push_back(daemon);
  const std::string socket = run + "/nrtprof/nrtprofd.sock";
  struct stat st;
  for (int i = 0; i < 200 && stat(socket.c_str(), &st) != 0; ++i) usleep(50'000);
  ASSERT_EQ(stat(socket.c_str(), &st), 0) << ReadFile(err);
  EXPECT_EQ(st.st_uid, alice_);

  const Result status = Alice({bin_ + "/nrtprof", "status"}, env);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(absl::StrContains(status.out, "daemon:              unix:" + socket)) << status.out;
  // A program preloaded by hand streams to it; nrtprof run uses it (no private daemon).
  std::vector<std::string> argv = {bin_ + "/nrtprof", "run", "--out", home_ + "/cap", "--"};
  for (const std::string& a : Rmsnorm()) argv.push_back(a);
  const Result profiled = Alice(argv, env);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  EXPECT_TRUE(absl::StrContains(profiled.err, "(daemon unix:" + socket + ")")) << profiled.err;
  EXPECT_FALSE(absl::StrContains(profiled.err, "not trusting")) << profiled.err;
  const auto calls = testing::CallsByName(home_ + "/cap");
  EXPECT_EQ(calls.count("nrt_load") ? calls.at("nrt_load") : 0, 1) << profiled.err;
  EXPECT_EQ(Entries(default_dir_), 0u);
}

// The shared service that must keep working: nrtprofd as its own user (nobody here), its
// socket open to a group alice is in (--socket_group), trusted by NRTPROF_SERVICE_USER.
TEST_F(TrustTest, SharedServiceOfTheConfiguredUserWorks) {
  const std::string service = root_ + "/service";
  ASSERT_EQ(mkdir(service.c_str(), 0755), 0);
  ASSERT_EQ(chown(service.c_str(), kMallory, kMalloryGroup), 0);
  const std::string socket = service + "/run/nrtprofd.sock";
  ASSERT_NO_FATAL_FAILURE(StartDaemonAsNobody(
      socket, service + "/captures", {absl::StrCat("--socket_group=", kMalloryGroup)}));
  struct stat st;
  ASSERT_EQ(stat((service + "/run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_gid, kMalloryGroup);
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(st.st_gid, kMalloryGroup);

  const std::map<std::string, std::string> env = {{"NRTPROF_ADDR", "unix:" + socket},
                                                  {"NRTPROF_SERVICE_USER", "nobody"}};
  std::vector<std::string> argv = {bin_ + "/nrtprof", "run", "--"};
  for (const std::string& a : Rmsnorm()) argv.push_back(a);
  // Bob, another member of the group, has a program recording on the same service meanwhile.
  const uid_t bob = alice_ + 1;
  std::string bob_out, bob_err;
  const pid_t bob_program = SpawnAs(
      bob, bob, {kMalloryGroup},
      {bin_ + "/abrupt_end", "busy", "10"},
      {{"NRTPROF_ADDR", "unix:" + socket},
       {"NRTPROF_SERVICE_USER", "nobody"},
       {"LD_PRELOAD", bin_ + "/libnrtprof_shim.so"}},
      &bob_out, &bob_err);
  bool bob_connected = false;
  for (int i = 0; i < 200 && !bob_connected; ++i) {
    const Result status = RunAs(0, 0, {}, {bin_ + "/nrtprof", "status"}, env);
    bob_connected = absl::StrContains(status.out, "\nconnected processes: 1\n");
    if (!bob_connected) usleep(50'000);
  }
  ASSERT_TRUE(bob_connected) << ReadFile(bob_err);
  // What each user sees of the service: alice not bob's program, the operator (root) all.
  const Result alice_status = RunAs(alice_, alice_, {kMalloryGroup}, {bin_ + "/nrtprof", "status"}, env);
  EXPECT_TRUE(absl::StrContains(alice_status.out, "\nconnected processes: 0\n")) << alice_status.out;

  const Result plain = Alice(Rmsnorm());
  const Result run = RunAs(alice_, alice_, {kMalloryGroup}, argv, env);
  kill(bob_program, SIGKILL);
  WaitFor(bob_program, bob_out, bob_err);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, plain.out);
  EXPECT_FALSE(absl::StrContains(run.err, "not trusting")) << run.err;
  EXPECT_FALSE(absl::StrContains(run.err, "private")) << run.err;
  // Only alice's program is in her capture, although bob's was recording all along.
  EXPECT_TRUE(absl::StrContains(run.err, "from 1 process,")) << run.err;
  // Her capture is hers: fetched into her folder, written by her; the service kept no copy.
  ASSERT_EQ(Entries(home_ + "/nrtprof-captures"), 1u) << run.err;
  DIR* d = opendir((home_ + "/nrtprof-captures").c_str());
  std::string id;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') id = e->d_name;
  }
  closedir(d);
  const std::string capture = home_ + "/nrtprof-captures/" + id;
  EXPECT_TRUE(absl::StrContains(run.err, "files in " + capture + ":")) << run.err;
  for (const char* f : {"", "/trace.pftrace", "/summary.txt"}) {
    ASSERT_EQ(stat((capture + f).c_str(), &st), 0) << capture << f;
    EXPECT_EQ(st.st_uid, alice_) << capture << f;
  }
  const auto calls = testing::CallsByName(capture);
  EXPECT_EQ(calls.count("nrt_load") ? calls.at("nrt_load") : 0, 1) << run.err;
  EXPECT_EQ(Entries(service + "/captures/users/" + std::to_string(alice_)), 0u);
  ASSERT_EQ(stat((service + "/captures/users").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  // Asked to write where only the service could, alice's capture goes nowhere: the service
  // writes no user's capture where that user asks, and her own writing is refused.
  const std::string not_hers = service + "/captures/planted";
  std::vector<std::string> planting = {bin_ + "/nrtprof", "run", "--out", not_hers, "--"};
  for (const std::string& a : Rmsnorm()) planting.push_back(a);
  const Result planted = RunAs(alice_, alice_, {kMalloryGroup}, planting, env);
  EXPECT_EQ(planted.exit_code, 0) << planted.err;
  EXPECT_EQ(planted.out, plain.out);
  EXPECT_EQ(CountLines(planted.err, "nrtprof run: the capture could not be fetched into " +
                                        not_hers + ": cannot create folder " + not_hers +
                                        ": Permission denied"),
            1u)
      << planted.err;
  EXPECT_NE(access(not_hers.c_str(), F_OK), 0) << "the service wrote where alice asked";

  // Without NRTPROF_SERVICE_USER the same daemon is someone else's.
  const Result untrusted =
      RunAs(alice_, alice_, {kMalloryGroup}, argv, {{"NRTPROF_ADDR", "unix:" + socket}});
  EXPECT_NE(untrusted.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(untrusted.err, "not trusting the daemon at unix:" + socket))
      << untrusted.err;
}

}  // namespace
}  // namespace nrtprof
