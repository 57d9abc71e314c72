"""Repository rule that exposes Debian's system libraries to Bazel through pkg-config.

Each entry of `libs` becomes a cc_library named after it whose linkopts are what
`pkg-config --libs` prints for its modules (headers live in /usr/include, which the
default toolchain already searches). Each entry of `headers` becomes a header-only
cc_library for modules whose headers sit in their own folders (`pkg-config --cflags-only-I`,
e.g. /usr/include/python3.11): those folders are linked into this repository and put on the
include path of whatever depends on it, and nothing is linked (a Python extension module
must not link libpython: the interpreter that loads it provides the symbols). Runs at fetch
time, offline.
"""

def _pkg_config(ctx, flag, modules):
    result = ctx.execute(["pkg-config", flag] + modules)
    if result.return_code != 0:
        fail("pkg-config %s %s failed: %s\nInstall the Debian -dev packages named in README." %
             (flag, " ".join(modules), result.stderr))
    return [opt for opt in result.stdout.strip().split(" ") if opt]

def _header_library(ctx, name, modules):
    includes = []
    for i, flag in enumerate(_pkg_config(ctx, "--cflags-only-I", modules.split(" "))):
        # Bazel only accepts include folders inside a repository, so each system folder is
        # linked in under a name of its own.
        folder = "%s_include_%d" % (name, i)
        ctx.symlink(flag[2:], folder)
        includes.append(folder)
    return [
        "cc_library(",
        "    name = %r," % name,
        "    hdrs = glob([%s])," % ", ".join(["%r" % (f + "/**/*.h") for f in includes]),
        "    includes = %r," % includes,
        ")",
        "",
    ]

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
    for name, modules in ctx.attr.headers.items():
        build.extend(_header_library(ctx, name, modules))
    ctx.file("WORKSPACE", "")
    ctx.file("BUILD", "\n".join(build))

system_libs = repository_rule(
    implementation = _system_libs_impl,
    attrs = {
        "libs": attr.string_dict(doc = "target name -> space-separated pkg-config modules"),
        "headers": attr.string_dict(
            doc = "target name -> pkg-config modules whose headers only are needed",
        ),
    },
    local = True,
)
