#include "tests/testing/subprocess.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "common/testing/spawn.h"

namespace nrtprof::testing {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

const std::map<std::string, std::string> kIsolatedEnv = {
    {"NRT_SIM_TIME_SCALE", "0"}, {"NRTPROF_ADDR", ""}, {"LD_PRELOAD", ""}};

Result RunProfiled(const std::string& out, const std::vector<std::string>& command,
                   const std::vector<std::string>& flags,
                   const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {Runfile("client/nrtprof"), "run"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"--out", out, "--"});
  argv.insert(argv.end(), command.begin(), command.end());
  return RunProcess(argv, env);
}

Result RunNrtprof(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {Runfile("client/nrtprof")};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, env);
}

std::string Runfile(const std::string& workspace_path) {
  const char* root = getenv("TEST_SRCDIR");
  return std::string(root != nullptr ? root : ".") + "/nrtprof/" + workspace_path;
}

std::string TempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const std::string dir = ScratchRoot() + "/" + name + "." + std::to_string(counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string AddModel() {
  static const std::string path = [] {
    const std::string dir = TempDir("model");
    const std::string txt = dir + "/add.txt", neff = dir + "/add.neff";
    FILE* f = fopen(txt.c_str(), "w");
    fputs("model add4\ninput a fp32 [4]\ninput b fp32 [4]\noutput out fp32 [4]\n"
          "out = add(a, b)\n",
          f);
    fclose(f);
    const Result r = RunProcess({Runfile("sim/nrt_model_compile"), txt, neff});
    if (r.exit_code != 0) fprintf(stderr, "nrt_model_compile failed: %s\n", r.err.c_str());
    return neff;
  }();
  return path;
}

Result RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  SpawnOptions options;
  options.env = EmptyUnsets(env);
  const ProcessResult ran = RunToExit(argv, options, TempDir("run"));
  return {ran.exit_code, ran.out, ran.err};
}

}  // namespace nrtprof::testing
