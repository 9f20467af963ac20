"""The @cuda repository: /usr/local/cuda when it is there, else a stand-in
whose targets stop the build with a message that says what to do."""

_MISSING_BUILD = """
load(":missing.bzl", "cuda_missing")

package(default_visibility = ["//visibility:public"])

cuda_missing(name = "cuda_headers")

cuda_missing(name = "cudart_cublas")

cuda_missing(name = "nvcc")
"""

_MISSING_BZL = """
def _cuda_missing_impl(ctx):
    fail("The CUDA toolkit is not installed at {path} (no bin/nvcc there). " +
         "Build without CUDA: bazel build --config=nocuda ... " +
         "(tools/test.sh and tools/demo.sh choose this automatically).")

cuda_missing = rule(implementation = _cuda_missing_impl)
"""

def _cuda_repository_impl(rctx):
    path = rctx.attr.path
    if rctx.path(path + "/bin/nvcc").exists:
        for entry in ["bin", "include", "lib64"]:
            rctx.symlink(path + "/" + entry, entry)
        rctx.symlink(rctx.attr.build_file, "BUILD.bazel")
    else:
        rctx.file("BUILD.bazel", _MISSING_BUILD)
        rctx.file("missing.bzl", _MISSING_BZL.replace("{path}", path))

cuda_repository = repository_rule(
    implementation = _cuda_repository_impl,
    attrs = {
        "path": attr.string(default = "/usr/local/cuda"),
        "build_file": attr.label(allow_single_file = True),
    },
    local = True,
)
