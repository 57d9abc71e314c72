"""Repository rule that exposes Debian's system libraries to Bazel through pkg-config.

Each entry of `libs` becomes a cc_library named after it whose linkopts are what
`pkg-config --libs` prints for its modules (headers live in /usr/include, which the
default toolchain already searches). Runs at fetch time, offline.
"""

def _pkg_config(ctx, flag, modules):
    result = ctx.execute(["pkg-config", flag] + modules)
    if result.return_code != 0:
        fail("pkg-config %s %s failed: %s\nInstall the Debian -dev packages named in README." %
             (flag, " ".join(modules), result.stderr))
    return [opt for opt in result.stdout.strip().split(" ") if opt]

def _system_libs_impl(ctx):
    build = ['package(default_visibility = ["//visibility:public"])', ""]
    for name, modules in ctx.attr.libs.items():
        linkopts = _pkg_config(ctx, "--libs", modules.split(" "))
        defines = [f[2:] for f in _pkg_config(ctx, "--cflags", modules.split(" ")) if f.startswith("-D")]
        build.append("cc_library(")
        build.append("    name = %r," % name)
        build.append("    linkopts = %r," % linkopts)
        build.append("    defines = %r," % defines)
        build.append(")")
        build.append("")
    ctx.file("WORKSPACE", "")
    ctx.file("BUILD", "\n".join(build))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    attrs = {"libs": attr.string_dict(doc = "target name -> space-separated pkg-config modules")},
    local = True,
)
