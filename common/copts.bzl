"""Compiler options for the project's own code."""

# Our code builds warning-free; generated code and system headers are not held to this.
NRTPROF_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
]
