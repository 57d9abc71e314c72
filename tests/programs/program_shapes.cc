// Programs whose shape a profiler must not change, for tests/program_shapes_test.cc. Each
// prints what it computed (a checksum of results read back from the device), so a test can
// compare the output with and without the profiler.
//
//   program_shapes MODEL MODE N [ARGS...]
//     pthread_exit  main() makes N executions, registers an atexit handler (it prints a line),
//                   starts a worker that makes N more, and calls pthread_exit(): the process
//                   ends when the worker does, with exit code 0
//     steady        N executions; ARGS are ignored (a test makes the command line long)
//     eat_fds       nrt_init, then takes every free descriptor at once, makes N executions,
//                   holds the descriptors half a second (the profiler tries to connect meanwhile),
//                   gives them back and makes N more
//     thread_exit   N executions, then a worker makes N, and as it exits N more from a C++
//                   thread_local's destructor and N more from a pthread key's destructor (the
//                   key made after the worker's first call, so after the profiler's own)
//     slices        N executions, then starts a worker of its own (blocked in a pipe read)
//                   and prints, for each of the process's threads, "slice NAME NS": its
//                   scheduler slice (se.slice in /proc/self/task/TID/sched; "slice none" where
//                   the kernel does not show it)
//     threads       N executions, then 8 workers, all alive at once, each making N executions
//                   (one worker at a time, so that the results are the same in any order),
//                   which end together; prints the workers' checksum
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nrt/nrt.h"

namespace {

struct Session {
  nrt_model_t* model = nullptr;
  nrt_tensor_t *a = nullptr, *b = nullptr, *out = nullptr;
  nrt_tensor_set_t *in = nullptr, *outs = nullptr;
};

std::string ReadAll(const char* path) {
  std::string bytes;
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return bytes;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  fclose(f);
  return bytes;
}

bool Load(const std::string& model_bytes, Session* s) {
  return nrt_load(model_bytes.data(), model_bytes.size(), 0, -1, &s->model) == NRT_SUCCESS &&
         nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "a", &s->a) == NRT_SUCCESS &&
         nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "b", &s->b) == NRT_SUCCESS &&
         nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &s->out) == NRT_SUCCESS &&
         nrt_allocate_tensor_set(&s->in) == NRT_SUCCESS &&
         nrt_allocate_tensor_set(&s->outs) == NRT_SUCCESS &&
         nrt_add_tensor_to_tensor_set(s->in, "a", s->a) == NRT_SUCCESS &&
         nrt_add_tensor_to_tensor_set(s->in, "b", s->b) == NRT_SUCCESS &&
         nrt_add_tensor_to_tensor_set(s->outs, "out", s->out) == NRT_SUCCESS;
}

// Execution i computes (i, 2i, 3i, 4i) + (1, 1, 1, 1); the checksum adds up every result.
bool Run(const Session& s, int first, int n, double* checksum) {
  for (int i = first; i < first + n; ++i) {
    const float a[4] = {1.0f * i, 2.0f * i, 3.0f * i, 4.0f * i};
    const float b[4] = {1, 1, 1, 1};
    float out[4] = {};
    if (nrt_tensor_write(s.a, a, 0, sizeof(a)) != NRT_SUCCESS ||
        nrt_tensor_write(s.b, b, 0, sizeof(b)) != NRT_SUCCESS ||
        nrt_execute(s.model, s.in, s.outs) != NRT_SUCCESS ||
        nrt_tensor_read(s.out, out, 0, sizeof(out)) != NRT_SUCCESS) {
      return false;
    }
    for (float v : out) *checksum += v;
  }
  return true;
}

Session g_session;
int g_n = 0;

void SayGoodbye() { printf("atexit handler ran\n"); }

void* Worker(void*) {
  double checksum = 0;
  if (!Run(g_session, g_n, g_n, &checksum)) {
    fprintf(stderr, "program_shapes: worker execution failed\n");
    exit(1);
  }
  printf("worker checksum %.1f\n", checksum);
  return nullptr;
}

// thread_exit: executions made while the worker thread ends, each group's checksum printed
// by main() once the worker is joined.
double g_local_checksum = 0, g_key_checksum = 0;
bool g_exit_calls_failed = false;

struct CallsAtThreadExit {
  bool armed = false;
  ~CallsAtThreadExit() {
    if (armed) g_exit_calls_failed |= !Run(g_session, 2 * g_n, g_n, &g_local_checksum);
  }
};
thread_local CallsAtThreadExit t_calls_at_exit;

void KeyDestructor(void*) { g_exit_calls_failed |= !Run(g_session, 3 * g_n, g_n, &g_key_checksum); }

void* ExitingWorker(void*) {
  Worker(nullptr);
  t_calls_at_exit.armed = true;  // constructed here, destroyed as the thread ends
  pthread_key_t key;
  if (pthread_key_create(&key, &KeyDestructor) != 0 ||
      pthread_setspecific(key, &g_key_checksum) != 0) {
    fprintf(stderr, "program_shapes: pthread_key_create failed\n");
    exit(1);
  }
  return nullptr;
}

// The first line of `path` without its newline, or "".
std::string FirstLine(const std::string& path) {
  char line[256] = "";
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  if (fgets(line, sizeof line, f) == nullptr) line[0] = '\0';
  fclose(f);
  line[strcspn(line, "\n")] = '\0';
  return line;
}

// "slice NAME NS" for each thread of the process, or one "slice none" where se.slice is not
// shown (kernels before 6.6, or without CONFIG_SCHED_DEBUG).
void PrintSlices() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return;
  bool shown = false;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    FILE* f = fopen((task + "/sched").c_str(), "r");
    if (f == nullptr) continue;
    char line[256];
    while (fgets(line, sizeof line, f) != nullptr) {
      if (strncmp(line, "se.slice", 8) != 0) continue;
      const char* colon = strchr(line, ':');
      if (colon == nullptr) continue;
      printf("slice %s %lld\n", FirstLine(task + "/comm").c_str(), atoll(colon + 1));
      shown = true;
    }
    fclose(f);
  }
  closedir(dir);
  if (!shown) printf("slice none\n");
}

int g_pipe[2];

constexpr int kWorkers = 8;
pthread_mutex_t g_run_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_barrier_t g_all_ran;
double g_worker_checksum[kWorkers];
bool g_worker_failed = false;

void* RunningWorker(void* arg) {
  const int i = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  pthread_mutex_lock(&g_run_mu);
  g_worker_failed |= !Run(g_session, (i + 1) * g_n, g_n, &g_worker_checksum[i]);
  pthread_mutex_unlock(&g_run_mu);
  pthread_barrier_wait(&g_all_ran);  // every worker is alive until all have run
  return nullptr;
}

void* BlockedWorker(void*) {
  char c;
  ssize_t n = read(g_pipe[0], &c, 1);
  (void)n;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: program_shapes MODEL MODE N [ARGS...]\n");
    return 2;
  }
  const std::string model_bytes = ReadAll(argv[1]);
  const std::string mode = argv[2];
  g_n = atoi(argv[3]);
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) {
    fprintf(stderr, "program_shapes: nrt_init failed\n");
    return 1;
  }
  std::vector<int> taken;
  if (mode == "eat_fds") {
    // Every free descriptor, right after the first libnrt call (before the profiler has
    // connected to its daemon).
    for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) taken.push_back(fd);
  }
  if (!Load(model_bytes, &g_session)) {
    fprintf(stderr, "program_shapes: load failed\n");
    return 1;
  }
  double checksum = 0;
  if (!Run(g_session, 0, g_n, &checksum)) {
    fprintf(stderr, "program_shapes: execution failed\n");
    return 1;
  }
  printf("checksum %.1f\n", checksum);
  if (mode == "pthread_exit") {
    fflush(stdout);
    atexit(&SayGoodbye);
    pthread_t worker;
    if (pthread_create(&worker, nullptr, &Worker, nullptr) != 0) return 1;
    pthread_exit(nullptr);
  }
  if (mode == "thread_exit") {
    pthread_t worker;
    if (pthread_create(&worker, nullptr, &ExitingWorker, nullptr) != 0 ||
        pthread_join(worker, nullptr) != 0 || g_exit_calls_failed) {
      fprintf(stderr, "program_shapes: the worker's exit failed\n");
      return 1;
    }
    printf("thread_local destructor checksum %.1f\nkey destructor checksum %.1f\n",
           g_local_checksum, g_key_checksum);
  }
  if (mode == "slices") {
    pthread_t worker;
    if (pipe(g_pipe) != 0 || pthread_create(&worker, nullptr, &BlockedWorker, nullptr) != 0) {
      return 1;
    }
    pthread_setname_np(worker, "program-worker");
    PrintSlices();
    ssize_t n = write(g_pipe[1], "x", 1);
    (void)n;
    pthread_join(worker, nullptr);
  }
  if (mode == "threads") {
    pthread_t workers[kWorkers];
    pthread_barrier_init(&g_all_ran, nullptr, kWorkers);
    for (int i = 0; i < kWorkers; ++i) {
      if (pthread_create(&workers[i], nullptr, &RunningWorker,
                         reinterpret_cast<void*>(static_cast<intptr_t>(i))) != 0) {
        return 1;
      }
    }
    double sum = 0;
    for (int i = 0; i < kWorkers; ++i) {
      pthread_join(workers[i], nullptr);
      sum += g_worker_checksum[i];
    }
    if (g_worker_failed) return 1;
    printf("workers' checksum %.1f\n", sum);
  }
  if (mode == "eat_fds") {
    printf("took %s descriptors\n", taken.empty() ? "no" : "all free");
    usleep(500 * 1000);
    for (int fd : taken) close(fd);
    if (!Run(g_session, g_n, g_n, &checksum)) return 1;
    printf("checksum %.1f\n", checksum);
  }
  return 0;
}
