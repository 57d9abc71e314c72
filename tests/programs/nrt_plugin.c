/* A module that links libnrt (DT_NEEDED libnrt.so.1), as a framework's extension module or a
 * runtime plugin does. Programs reach it through dlopen() (C hosts, ctypes) and never link
 * libnrt themselves. */
#include <string.h>

#include "nrt/nrt.h"

/* Initializes the runtime, writes a 64-byte tensor `n` times, reads it back after each write,
 * closes the runtime. Returns how many round trips gave back what was written; negative if
 * the runtime could not start. */
int plugin_round_trips(int n) {
  if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS) return -1;
  nrt_tensor_t* tensor = NULL;
  if (nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "plugin_tensor", &tensor) !=
      NRT_SUCCESS) {
    nrt_close();
    return -2;
  }
  int ok = 0;
  unsigned char in[64], out[64];
  for (int i = 0; i < n; ++i) {
    for (int b = 0; b < 64; ++b) in[b] = (unsigned char)(i + b);
    memset(out, 0, sizeof(out));
    if (nrt_tensor_write(tensor, in, 0, sizeof(in)) == NRT_SUCCESS &&
        nrt_tensor_read(tensor, out, 0, sizeof(out)) == NRT_SUCCESS &&
        memcmp(in, out, sizeof(in)) == 0) {
      ++ok;
    }
  }
  nrt_tensor_free(&tensor);
  nrt_close();
  return ok;
}
