/* fork() in a program that uses libnrt. Usage: fork_client before|after.
 *   before: fork first; parent and child each run the runtime (init ... close) on their own.
 *   after:  the parent initializes and writes a tensor, then forks; the child reads and writes
 *           tensors and exits; the parent waits, then finishes.
 * Prints one line per process and exits 0 when everything behaved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nrt/nrt.h"

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

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  fflush(stdout);
  if (strcmp(argv[1], "before") == 0) {
    const pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) exit(Session("child", "child_tensor"));
    const int rc = Session("parent", "parent_tensor");
    int status = 0;
    waitpid(pid, &status, 0);
    return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
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
