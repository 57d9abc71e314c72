/* A program that loads a module linking libnrt the ways hosts of plugins do.
 * Usage: plugin_host MODULE MODES N [ROUNDS]
 *   MODES, comma-separated, one per round in turn:
 *     local:    dlopen(RTLD_NOW | RTLD_LOCAL)              (Python's and ctypes' default)
 *     deepbind: dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
 *     dlmopen:  dlmopen(LM_ID_NEWLM, RTLD_NOW)            (a namespace of its own)
 * Each round opens the module, calls plugin_round_trips(N) and closes it again; rounds after
 * the first load libnrt anew. Prints one line per round; exits 0 if every round trip held. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: plugin_host MODULE local|deepbind|dlmopen N [ROUNDS]\n");
    return 2;
  }
  char* modes[16];
  int mode_count = 0;
  for (char* m = strtok(argv[2], ","); m != NULL && mode_count < 16; m = strtok(NULL, ",")) {
    modes[mode_count++] = m;
  }
  if (mode_count == 0) {
    fprintf(stderr, "plugin_host: no mode\n");
    return 2;
  }
  const int n = atoi(argv[3]);
  const int rounds = argc > 4 ? atoi(argv[4]) : 1;
  int failed = 0;
  for (int round = 1; round <= rounds; ++round) {
    const char* mode = modes[(round - 1) % mode_count];
    void* module = NULL;
    if (strcmp(mode, "local") == 0) {
      module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    } else if (strcmp(mode, "deepbind") == 0) {
      module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    } else if (strcmp(mode, "dlmopen") == 0) {
      module = dlmopen(LM_ID_NEWLM, argv[1], RTLD_NOW);
    } else {
      fprintf(stderr, "plugin_host: unknown mode %s\n", mode);
      return 2;
    }
    if (module == NULL) {
      fprintf(stderr, "plugin_host: %s\n", dlerror());
      return 2;
    }
    int (*round_trips)(int) = (int (*)(int))dlsym(module, "plugin_round_trips");
    if (round_trips == NULL) {
      fprintf(stderr, "plugin_host: %s\n", dlerror());
      return 2;
    }
    const int ok = round_trips(n);
    printf("plugin_host: round %d (%s): %d of %d round trips held\n", round, mode, ok, n);
    if (ok != n) failed = 1;
    dlclose(module);
  }
  return failed;
}
