/* fork() in a program that links libnrt. Usage: fork_client before|after|children [MODEL N].
 *   before:   fork first; parent and child each run the runtime (init ... close) on their own.
 *   after:    the parent initializes and writes a tensor, then forks; the child reads and writes
 *             tensors and exits; the parent waits, then finishes.
 *   children MODEL N: the parent executes MODEL (inputs a, b and output out, fp32 [4]) N times,
 *             forks a child that exits at once with 7 and one that execs `true`, waits for both
 *             and executes N times again; prints "children: 7 0".
 * Prints one line per process (children: the parent's only) and exits 0 when everything
 * behaved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nrt/nrt.h"
#include "shim/testing/add_model.h"

static int RoundTrip(nrt_tensor_t* tensor, unsigned char seed) {
  unsigned char in[32], out[32];
  for (int i = 0; i < 32; ++i) in[i] = (unsigned char)(seed + i);
  if (nrt_tensor_write(tensor, in, 0, sizeof(in)) != NRT_SUCCESS) return 0;
  if (nrt_tensor_read(tensor, out, 0, sizeof(out)) != NRT_SUCCESS) return 0;
  return memcmp(in, out, sizeof(in)) == 0;
}

static int Session(const char* who, const char* tensor_name) {
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 32, tensor_name, &tensor) !=
      NRT_SUCCESS) {
    return 1;
  }
  const int ok = RoundTrip(tensor, 7);
  nrt_tensor_free(&tensor);
  nrt_close();
  printf("%s: %s\n", who, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

// Before the fork, each process on its own.
static int Before(void) {
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) exit(Session("child", "child_tensor"));
  const int rc = Session("parent", "parent_tensor");
  int status = 0;
  waitpid(pid, &status, 0);
  return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

// After the parent's start; the child uses the runtime it inherited.
static int After(void) {
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 32, "shared_tensor", &tensor) !=
      NRT_SUCCESS) {
    return 1;
  }
  if (!RoundTrip(tensor, 1)) return 1;
  fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    const int ok = RoundTrip(tensor, 2) && RoundTrip(tensor, 3);
    printf("child: %s\n", ok ? "ok" : "WRONG");
    exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const int ok = RoundTrip(tensor, 4);
  nrt_tensor_free(&tensor);
  nrt_close();
  printf("parent: %s, child exited %d\n", ok ? "ok" : "WRONG",
         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

static int Execute(nrt_model_t* model, nrt_tensor_set_t* in, nrt_tensor_set_t* out, int n) {
  for (int i = 0; i < n; ++i) {
    if (nrt_execute(model, in, out) != NRT_SUCCESS) return 1;
  }
  return 0;
}

// Children that never use the runtime: one exits at once, one execs.
static int Children(const char* model_path, int n) {
  const AddModelApi api = {nrt_load, nrt_tensor_allocate, nrt_tensor_write,
                           nrt_allocate_tensor_set, nrt_add_tensor_to_tensor_set};
  AddModel m;
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS ||
      SetUpAddModel(&api, model_path, &m) != 0) {
    return 1;
  }
  if (Execute(m.model, m.inputs, m.outputs, n) != 0) return 1;
  fflush(stdout);
  const pid_t quick = fork();
  if (quick == 0) _exit(7);
  const pid_t execer = fork();
  if (execer == 0) {
    execlp("true", "true", (char*)NULL);
    _exit(127);
  }
  int s1 = 0, s2 = 0;
  waitpid(quick, &s1, 0);
  waitpid(execer, &s2, 0);
  if (Execute(m.model, m.inputs, m.outputs, n) != 0) return 1;
  printf("children: %d %d\n", WEXITSTATUS(s1), WEXITSTATUS(s2));
  nrt_close();
  return 0;
}

int main(int argc, char** argv) {
  fflush(stdout);
  if (argc == 2 && strcmp(argv[1], "before") == 0) return Before();
  if (argc == 2 && strcmp(argv[1], "after") == 0) return After();
  if (argc == 4 && strcmp(argv[1], "children") == 0) return Children(argv[2], atoi(argv[3]));
  fprintf(stderr, "usage: fork_client before|after|children MODEL N\n");
  return 2;
}
