"""The load test at a given load (tests/load_test.cc reads NRTPROF_LOAD="P,T,R,S")."""

load("//common:copts.bzl", "NRTPROF_COPTS")

def load_test(name, processes_threads_rate_seconds, mode = "best_effort", flush_ms = "", size = "medium", tags = []):
    native.cc_test(
        name = name,
        size = size,
        srcs = ["load_test.cc"],
        copts = NRTPROF_COPTS,
        env = {
            "NRTPROF_LOAD": processes_threads_rate_seconds,
            "NRTPROF_LOAD_MODE": mode,
            "NRTPROF_LOAD_FLUSH_MS": flush_ms,
        },
        tags = tags,
        data = [
            ":fault_client",
            "//client:nrtprof",
            "//daemon:nrtprofd",
            "//shim:libnrtprof_shim.so",
            "//sim:libnrt.so.1",
            "//sim:nrt_model_compile",
        ],
        deps = [
            ":processes",
            ":subprocess",
            "@system//:absl",
            "@system//:gtest_main",
            "@system//:protobuf",
        ],
    )
