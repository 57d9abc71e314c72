/*
 * nrtprof annotations: name what a stretch of a program means ("aten::mul", "rmsnorm") so the
 * profiler can draw it on the framework lane and charge device time to it.
 *
 * Without the profiler these calls do nothing: the entry points are weak references that stay
 * null unless libnrtprof_shim.so is loaded, and each call costs one load and one branch.
 * With the profiler preloaded, push/pop record a range on the calling thread. Names must stay
 * valid until the matching pop (string literals are ideal). Ranges nest per thread; an
 * unmatched pop is ignored. Thread-safe; async-signal-unsafe.
 *
 * C:   nrtprof_push("aten::mul"); ... nrtprof_pop();   and once per training step: nrtprof_step();
 * C++: { nrtprof::ScopedRange range("aten::mul"); ... }
 */
#ifndef NRTPROF_ANNOTATE_H_
#define NRTPROF_ANNOTATE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Defined by libnrtprof_shim.so. */
void nrtprof_range_push(const char *name) __attribute__((weak));
void nrtprof_range_pop(void) __attribute__((weak));
void nrtprof_step_mark(void) __attribute__((weak));

static inline void nrtprof_push(const char *name) {
  if (nrtprof_range_push) nrtprof_range_push(name);
}

static inline void nrtprof_pop(void) {
  if (nrtprof_range_pop) nrtprof_range_pop();
}

/* One training step ends and the next begins (as prof.step() in PyTorch): call it once per
 * iteration, at the top of the loop, with no range open. The profiler draws each step as a
 * range "ProfilerStep#N" and captures whole steps (nrtprof capture --iterations N
 * --step-multiple K: processes in step record the same step numbers). */
static inline void nrtprof_step(void) {
  if (nrtprof_step_mark) nrtprof_step_mark();
}

#ifdef __cplusplus
}  // extern "C"

namespace nrtprof {

class ScopedRange {
 public:
  explicit ScopedRange(const char *name) { nrtprof_push(name); }
  ~ScopedRange() { nrtprof_pop(); }
  ScopedRange(const ScopedRange &) = delete;
  ScopedRange &operator=(const ScopedRange &) = delete;
};

}  // namespace nrtprof
#endif

#endif /* NRTPROF_ANNOTATE_H_ */
