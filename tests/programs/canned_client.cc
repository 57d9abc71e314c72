// A small program on the stand-in runtime (canned_nrt.cc): loads a model, then three steps,
// each a host-to-device write and an execution under framework ranges. Prints "canned client:
// ok" when every call succeeded.
#include <cstdio>

#include "nrt/nrt.h"
#include "nrtprof/annotate.h"

int main() {
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return 1;
  const char model_file[] = "a model file the stand-in runtime does not read";
  nrt_model_t* model = nullptr;
  if (nrt_load(model_file, sizeof(model_file), 0, -1, &model) != NRT_SUCCESS) return 1;
  nrt_tensor_t* x = nullptr;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "x", &x) != NRT_SUCCESS) return 1;
  nrt_tensor_set_t *in = nullptr, *out = nullptr;
  if (nrt_allocate_tensor_set(&in) != NRT_SUCCESS || nrt_allocate_tensor_set(&out) != NRT_SUCCESS ||
      nrt_add_tensor_to_tensor_set(in, "x", x) != NRT_SUCCESS) {
    return 1;
  }
  char bytes[4096] = {};
  int ok = 0;
  for (int step = 0; step < 3; ++step) {
    nrtprof::ScopedRange range("step");
    {
      nrtprof::ScopedRange copy("aten::copy_");
      ok += nrt_tensor_write(x, bytes, 0, sizeof(bytes)) == NRT_SUCCESS;
    }
    {
      nrtprof::ScopedRange op("aten::mul");
      ok += nrt_execute(model, in, out) == NRT_SUCCESS;
    }
  }
  nrt_tensor_free(&x);
  nrt_close();
  if (ok != 6) return 1;
  printf("canned client: ok\n");
  return 0;
}
