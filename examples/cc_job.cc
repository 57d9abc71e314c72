// cc_job: a data-parallel training job as N rank processes on one host, each on its own
// NeuronCore, that all-reduce their gradients once a step — the shape `nrtprof collectives`
// answers "which rank is slow, and why" for (issue 40).
//
//   cc_job --ranks N --steps S [--slow-rank R --slow-ms MS [--slow-cause host|device]]
//          [--kill-rank R --kill-step K] [--elems E]
//          [--local-ranks LIST --root HOST:PORT] [--rank-program PROGRAM] [--rank-via argv|env]
//
// Run so, it is the launcher, in the spirit of torchrun: it picks a free local port for rank 0's
// listener and starts N copies of itself, each with NEURON_RT_ROOT_COMM_ID=127.0.0.1:PORT,
// NEURON_RT_VISIBLE_CORES=<its rank> (one core each), WORLD_SIZE and RANK in its environment and
// `--rank R` on its command line (as torch.distributed.launch passes --local_rank), then waits
// for them all and exits 0 only if every rank did.
//
// A job across hosts runs one launcher per host, as torchrun's --nnodes/--node_rank: each with
// `--local-ranks 0,1` (the ranks of the N it starts: a comma-separated list, or FIRST-LAST) and
// the same `--root HOST:PORT` (rank 0's listener, on the host that starts rank 0). The rank
// processes inherit the launcher's environment, so a host's NRTPROF_ADDR or NRT_SIM_HOST_ID is
// set on its launcher.
//
// `--rank-program PROGRAM` starts PROGRAM (an executable, e.g. examples/cc_rank_py.py through the
// framework module) as each rank instead of a copy of cc_job, with the same environment and
// the rank's flags: `--rank R --ranks N --steps S [--slow-rank ...]`.
//
// `--rank-via env` starts the ranks as torchrun starts its workers: the rank only in the
// environment (RANK, LOCAL_RANK, WORLD_SIZE), every rank's command line the same (the
// launcher's, or PROGRAM's job flags), so that a tool must read the rank where torchrun puts it.
// (CC_JOB_RANK_PROCESS=1 tells a copy of cc_job that it is a rank, not a launcher.)
//
// Each rank: nrt_init, nrt_cc_global_comm_init, then per step (nrtprof_step() at the top):
//   forward_backward  one device execution (a small model, compiled from text)
//   grad_to_device    its gradient, rank- and step-dependent values, written to the device
//   [the slow rank]   host: "data_loader_stall", MS on the host; device: "extra_forward", device
//                     executions of another model for MS
//   all_reduce        nrta_cc_prepare + nrta_cc_schedule (AllReduce ADD, fp32, collectives
//                     queue 0), polled with nrta_is_completed until done
//   check             the result read back must be the sum of every rank's gradient, exactly
// A rank whose all-reduce fails or gives a wrong sum prints one line and exits 1. With
// --kill-rank R --kill-step K, rank R kills itself (SIGKILL) just before its all-reduce of step
// K: the others' all-reduce fails (after NRT_SIM_CC_TIMEOUT_MS at most) and the job exits 1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "examples/example_util.h"
#include "nrt/nrt.h"
#include "nrt/nrt_async.h"
#include "nrtprof/annotate.h"

namespace {

struct Options {
  int ranks = 0;
  int steps = 0;
  int rank = -1;  // set: this process is a rank; unset: the launcher
  int slow_rank = -1;
  int slow_ms = 0;
  std::string slow_cause = "host";
  int kill_rank = -1;
  int kill_step = -1;
  int elems = 1024;
  std::vector<int> local_ranks;  // empty: all of them
  std::string root;              // HOST:PORT of rank 0's listener; empty: the launcher picks one
  std::string rank_program;      // empty: cc_job itself
  bool rank_via_env = false;     // --rank-via env: the ranks' rank only in RANK
};

void Usage(const char* why) {
  fprintf(stderr,
          "cc_job: %s\nusage: cc_job --ranks N --steps S [--slow-rank R --slow-ms MS "
          "[--slow-cause host|device]] [--kill-rank R --kill-step K] [--elems E] "
          "[--local-ranks LIST --root HOST:PORT] [--rank-program PROGRAM] "
          "[--rank-via argv|env]\n",
          why);
  exit(2);
}

bool ParseInt(const std::string& text, int* out) {
  char* end = nullptr;
  const long v = strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 1000000) return false;
  *out = static_cast<int>(v);
  return true;
}

// "0,1", "2-3", "0,2-5": the ranks a launcher starts; false for anything else.
bool ParseRankList(const std::string& text, std::vector<int>* out) {
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    const size_t dash = item.find('-');
    int first = 0, last = 0;
    if (dash == std::string::npos) {
      if (!ParseInt(item, &first)) return false;
      last = first;
    } else if (!ParseInt(item.substr(0, dash), &first) || !ParseInt(item.substr(dash + 1), &last) ||
               last < first) {
      return false;
    }
    for (int r = first; r <= last; ++r) out->push_back(r);
    at = comma + 1;
  }
  return !out->empty();
}

Options Parse(int argc, char** argv) {
  Options o;
  const std::map<std::string, int*> ints = {
      {"--ranks", &o.ranks},         {"--steps", &o.steps},         {"--rank", &o.rank},
      {"--slow-rank", &o.slow_rank}, {"--slow-ms", &o.slow_ms},     {"--kill-rank", &o.kill_rank},
      {"--kill-step", &o.kill_step}, {"--elems", &o.elems}};
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i], value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      Usage(("missing value for " + name).c_str());
    }
    if (name == "--slow-cause") {
      if (value != "host" && value != "device") Usage("--slow-cause is host or device");
      o.slow_cause = value;
    } else if (name == "--local-ranks") {
      o.local_ranks.clear();
      if (!ParseRankList(value, &o.local_ranks)) {
        Usage(("bad value for --local-ranks: " + value + " (a list such as 0,1 or 2-3)").c_str());
      }
    } else if (name == "--root") {
      const size_t colon = value.rfind(':');
      int port = 0;
      if (colon == std::string::npos || colon == 0 || !ParseInt(value.substr(colon + 1), &port) ||
          port < 1 || port > 65535) {
        Usage(("bad value for --root: " + value + " (HOST:PORT)").c_str());
      }
      o.root = value;
    } else if (name == "--rank-via") {
      if (value != "argv" && value != "env") Usage("--rank-via is argv or env");
      o.rank_via_env = value == "env";
    } else if (name == "--rank-program") {
      if (access(value.c_str(), X_OK) != 0) {
        Usage(("--rank-program " + value + " is not an executable file").c_str());
      }
      o.rank_program = value;
    } else if (auto it = ints.find(name); it != ints.end()) {
      if (!ParseInt(value, it->second)) Usage(("bad value for " + name + ": " + value).c_str());
    } else {
      Usage(("unknown flag " + name).c_str());
    }
  }
  // A rank started with --rank-via env: its rank is the environment's, as torchrun's workers'.
  if (o.rank_via_env && o.rank < 0 && getenv("CC_JOB_RANK_PROCESS") != nullptr) {
    const char* rank = getenv("RANK");
    if (rank == nullptr || !ParseInt(rank, &o.rank)) Usage("a rank started with --rank-via env has no RANK");
  }
  if (o.ranks < 1 || o.ranks > 128) Usage("--ranks must be 1 to 128");
  if (o.steps < 1) Usage("--steps must be at least 1");
  if (o.slow_rank >= o.ranks) Usage("--slow-rank must be below --ranks");
  if (o.kill_rank >= o.ranks) Usage("--kill-rank must be below --ranks");
  if (o.elems < 1) Usage("--elems must be at least 1");
  for (size_t i = 0; i < o.local_ranks.size(); ++i) {
    if (o.local_ranks[i] >= o.ranks) Usage("--local-ranks must be below --ranks");
    for (size_t j = 0; j < i; ++j) {
      if (o.local_ranks[j] == o.local_ranks[i]) Usage("--local-ranks names a rank twice");
    }
  }
  if (!o.local_ranks.empty() && o.root.empty()) {
    Usage("--local-ranks needs --root HOST:PORT, rank 0's listener, the same for every launcher");
  }
  return o;
}

// A local TCP port nobody listens on now (rank 0 listens on it next).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    perror("cc_job: finding a free port");
    exit(1);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int Launch(const Options& o, int argc, char** argv) {
  const std::string root = o.root.empty() ? "127.0.0.1:" + std::to_string(FreePort()) : o.root;
  std::vector<int> local = o.local_ranks;
  if (local.empty()) {
    for (int r = 0; r < o.ranks; ++r) local.push_back(r);
  }
  // Enough simulated cores for one each, unless the machine says otherwise.
  if (getenv("NRT_SIM_NUM_CORES") == nullptr) {
    setenv("NRT_SIM_NUM_CORES", std::to_string(std::max(o.ranks, 2)).c_str(), 1);
  }
  if (o.local_ranks.empty()) {
    printf("cc_job: %d ranks, %d steps, root %s\n", o.ranks, o.steps, root.c_str());
  } else {
    printf("cc_job: %zu of %d ranks here, %d steps, root %s\n", local.size(), o.ranks, o.steps,
           root.c_str());
  }
  fflush(stdout);
  std::map<pid_t, int> rank_of;
  for (const int& r : local) {
    const pid_t pid = fork();
    if (pid < 0) {
      perror("cc_job: fork");
      return 1;
    }
    if (pid == 0) {
      setenv("NEURON_RT_ROOT_COMM_ID", root.c_str(), 1);
      setenv("NEURON_RT_VISIBLE_CORES", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(o.ranks).c_str(), 1);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(&r - local.data()).c_str(), 1);
      std::vector<std::string> args = {argv[0]};
      if (o.rank_via_env) {
        setenv("CC_JOB_RANK_PROCESS", "1", 1);
      } else {
        args.push_back("--rank");
        args.push_back(std::to_string(r));
      }
      if (o.rank_program.empty()) {
        for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
      } else {
        // The rank program gets the job's flags, not the launcher's own.
        args[0] = o.rank_program;
        for (const char* flag : {"--ranks", "--steps", "--slow-rank", "--slow-ms", "--slow-cause",
                                 "--kill-rank", "--kill-step", "--elems"}) {
          for (int i = 1; i + 1 < argc; ++i) {
            if (strcmp(argv[i], flag) == 0) {
              args.push_back(argv[i]);
              args.push_back(argv[i + 1]);
            }
          }
          for (int i = 1; i < argc; ++i) {
            if (strncmp(argv[i], flag, strlen(flag)) == 0 && argv[i][strlen(flag)] == '=') {
              args.push_back(argv[i]);
            }
          }
        }
      }
      std::vector<char*> cargs;
      for (std::string& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv(o.rank_program.empty() ? "/proc/self/exe" : o.rank_program.c_str(), cargs.data());
      perror(("cc_job: exec " + args[0]).c_str());
      _exit(127);
    }
    rank_of[pid] = r;
  }
  int failed = 0;
  for (size_t left = local.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) break;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failed;
    if (WIFSIGNALED(status)) {
      fprintf(stderr, "cc_job: rank %d (pid %d) killed by signal %d\n", rank_of[pid], pid,
              WTERMSIG(status));
    } else {
      fprintf(stderr, "cc_job: rank %d (pid %d) exited with %d\n", rank_of[pid], pid,
              WEXITSTATUS(status));
    }
  }
  if (failed > 0) {
    fprintf(stderr, "cc_job: %d of %zu ranks failed\n", failed, local.size());
    return 1;
  }
  printf("cc_job: %s all-reduce sums were right in all %d steps\n",
         o.local_ranks.empty() ? "every rank's" : "this launcher's ranks'", o.steps);
  return 0;
}

// Rank r's gradient in step s: small integers, so that every sum is exact in float32.
float Gradient(int r, int s, int i) { return static_cast<float>((r + 1) * (i % 7 + 1) + s); }

nrt_tensor_set_t* Set(const char* name, nrt_tensor_t* tensor) {
  nrt_tensor_set_t* set = nullptr;
  examples::Check(nrt_allocate_tensor_set(&set), "nrt_allocate_tensor_set");
  examples::Check(nrt_add_tensor_to_tensor_set(set, name, tensor), "nrt_add_tensor_to_tensor_set");
  return set;
}

int RunRank(const Options& o) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int r = o.rank, n = o.ranks;
  examples::Check(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), "nrt_init");
  examples::Check(nrt_cc_global_comm_init(0, r, n), "nrt_cc_global_comm_init");

  // The step's compute: a model standing for the forward and backward passes, and the slow
  // rank's extra one.
  const std::string shape = "[64,128]";
  nrt_model_t* forward_backward = examples::LoadModelText(
      examples::EagerOpModelText("forward_backward", "mul", "fp32", {shape, shape}, shape), 0);
  nrt_model_t* extra = examples::LoadModelText(
      examples::EagerOpModelText("extra_forward", "add", "fp32", {shape, shape}, shape), 0);
  const size_t act_bytes = 64 * 128 * 4;
  nrt_tensor_t* act = examples::DeviceTensor(0, act_bytes, "activations");
  nrt_tensor_t* act_out = examples::DeviceTensor(0, act_bytes, "activations.out");
  examples::Check(nrt_tensor_memset(act, 0, 0, act_bytes), "nrt_tensor_memset");
  nrt_tensor_set_t* in = nullptr;
  examples::Check(nrt_allocate_tensor_set(&in), "nrt_allocate_tensor_set");
  examples::Check(nrt_add_tensor_to_tensor_set(in, "a", act), "nrt_add_tensor_to_tensor_set");
  examples::Check(nrt_add_tensor_to_tensor_set(in, "b", act), "nrt_add_tensor_to_tensor_set");
  nrt_tensor_set_t* out = Set("out", act_out);

  const size_t grad_bytes = static_cast<size_t>(o.elems) * 4;
  nrt_tensor_t* grad = examples::DeviceTensor(0, grad_bytes, "grad");
  nrt_tensor_t* reduced = examples::DeviceTensor(0, grad_bytes, "grad.reduced");
  uint32_t group_ranks[128];
  for (int i = 0; i < n; ++i) group_ranks[i] = static_cast<uint32_t>(i);
  nrt_cc_comm_t comm{};
  comm.replica_group = group_ranks;
  comm.rank = static_cast<uint32_t>(r);
  comm.rank_n = static_cast<uint32_t>(n);
  comm.ctx_device_id = static_cast<uint32_t>(r);
  comm.ctx_device_count = static_cast<uint32_t>(n);
  comm.vnc = 0;

  std::vector<float> values(o.elems), result(o.elems);
  for (int step = 0; step < o.steps; ++step) {
    nrtprof_step();
    {
      nrtprof::ScopedRange range("forward_backward");
      examples::Check(nrt_execute(forward_backward, in, out), "nrt_execute (forward_backward)");
    }
    {
      nrtprof::ScopedRange range("grad_to_device");
      for (int i = 0; i < o.elems; ++i) values[i] = Gradient(r, step, i);
      examples::Check(nrt_tensor_write(grad, values.data(), 0, grad_bytes), "nrt_tensor_write");
    }
    if (r == o.slow_rank && o.slow_ms > 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.slow_ms);
      if (o.slow_cause == "host") {
        nrtprof::ScopedRange range("data_loader_stall");
        std::this_thread::sleep_until(until);
      } else {
        nrtprof::ScopedRange range("extra_forward");
        do {
          examples::Check(nrt_execute(extra, in, out), "nrt_execute (extra_forward)");
        } while (std::chrono::steady_clock::now() < until);
      }
    }
    if (r == o.kill_rank && step == o.kill_step) {
      printf("rank %d: killing itself before the all-reduce of step %d\n", r, step);
      raise(SIGKILL);
    }
    NRT_STATUS ret = NRT_SUCCESS;
    {
      nrtprof::ScopedRange range("all_reduce");
      nrt_tensor_list_t input{&grad, 1}, output{&reduced, 1};
      nrt_cc_context_t* ctx = nullptr;
      examples::Check(nrta_cc_prepare(&comm, &input, &output, NRT_DTYPE_FLOAT32, NRT_OP_ADD,
                                      NRT_CC_ALLREDUCE, &ctx),
                      "nrta_cc_prepare");
      nrta_seq_t seq = 0;
      examples::Check(nrta_cc_schedule(&ctx, 0, &ret, &seq), "nrta_cc_schedule");
      for (bool done = false; !done;) {
        examples::Check(nrta_is_completed(seq, &done), "nrta_is_completed");
        if (!done) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    if (ret != NRT_SUCCESS) {
      fprintf(stderr, "cc_job: rank %d: the all-reduce of step %d failed: %s\n", r, step,
              nrt_get_status_as_str(ret));
      nrt_close();
      return 1;
    }
    examples::Check(nrt_tensor_read(reduced, result.data(), 0, grad_bytes), "nrt_tensor_read");
    for (int i = 0; i < o.elems; ++i) {
      float want = 0;
      for (int k = 0; k < n; ++k) want += Gradient(k, step, i);
      if (result[i] != want) {
        fprintf(stderr, "cc_job: rank %d: step %d: element %d is %g, the ranks' sum is %g\n", r,
                step, i, result[i], want);
        nrt_close();
        return 1;
      }
    }
  }
  nrtprof_step();  // the last step ends (its range "ProfilerStep#N" is drawn)
  nrt_destroy_tensor_set(&in);
  nrt_destroy_tensor_set(&out);
  nrt_close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  if (o.rank < 0) return Launch(o, argc, argv);
  return RunRank(o);
}
