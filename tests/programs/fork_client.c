/* A program that forks: the parent uses libnrt before and after fork(); one child exits at
 * once, another execs `true`. Usage: fork_client LIBNRT_MODEL N. Linked against libnrt. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nrt/nrt.h>

static int Execute(nrt_model_t *model, nrt_tensor_set_t *in, nrt_tensor_set_t *out, int n) {
  for (int i = 0; i < n; ++i) {
    if (nrt_execute(model, in, out) != NRT_SUCCESS) return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  FILE *f = fopen(argv[1], "rb");
  if (f == NULL) return 1;
  static char bytes[1 << 16];
  const size_t size = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);
  const int n = atoi(argv[2]);
  nrt_model_t *model = NULL;
  nrt_tensor_t *a = NULL, *b = NULL, *out = NULL;
  nrt_tensor_set_t *in = NULL, *outs = NULL;
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS ||
      nrt_load(bytes, size, 0, -1, &model) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "a", &a) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "b", &b) != NRT_SUCCESS ||
      nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 16, "out", &out) != NRT_SUCCESS ||
      nrt_allocate_tensor_set(&in) != NRT_SUCCESS || nrt_allocate_tensor_set(&outs) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(in, "a", a) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(in, "b", b) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(outs, "out", out) != NRT_SUCCESS) {
    return 1;
  }
  if (Execute(model, in, outs, n) != 0) return 1;
  fflush(stdout);
  const pid_t quick = fork();
  if (quick == 0) _exit(7);
  const pid_t execer = fork();
  if (execer == 0) {
    execlp("true", "true", (char *)NULL);
    _exit(127);
  }
  int s1 = 0, s2 = 0;
  waitpid(quick, &s1, 0);
  waitpid(execer, &s2, 0);
  if (Execute(model, in, outs, n) != 0) return 1;
  printf("children: %d %d\n", WEXITSTATUS(s1), WEXITSTATUS(s2));
  nrt_close();
  return 0;
}
