// A preload for tests: refuses the first pthread_create called from the shim's backend
// (libnrtprof_shim_backend.so) with EAGAIN, as a process at its thread or memory limit would,
// and says so on stderr; every other call goes through. The backend's first thread is the
// short-lived one Flusher::Start makes its other threads from, so that the fallback (making
// them from the calling thread) can be tested.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

static atomic_int refused;

int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                   void* arg) {
  static create_fn real;
  if (real == NULL) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
  Dl_info info;
  if (dladdr(__builtin_return_address(0), &info) != 0 && info.dli_fname != NULL &&
      strstr(info.dli_fname, "libnrtprof_shim_backend") != NULL &&
      atomic_exchange(&refused, 1) == 0) {
    static const char line[] = "refuse_backend_thread: refused the backend's first thread\n";
    ssize_t ignored = write(STDERR_FILENO, line, sizeof(line) - 1);
    (void)ignored;
    return EAGAIN;
  }
  return real(thread, attr, start, arg);
}
