"""CUDA sources compiled by /usr/local/cuda/bin/nvcc into a cc_library.

Each .cu file becomes one position-independent object (a genrule named
`<name>_<file>`); the objects are `srcs` of a cc_library that links cudart
and cuBLAS. Built with `--config=nocuda` (`--define=cuda=off`) the library
holds `nocuda_srcs` instead and never touches the toolkit.
"""

CUDA_ARCH_FLAGS = [
    # Ampere and Hopper machine code, plus PTX that newer GPUs can JIT.
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def cuda_library(name, srcs, hdrs = [], textual_hdrs = [], nvcc_flags = [], nocuda_srcs = [], deps = [], visibility = None, **kwargs):
    """Declares `name`: a cc_library of nvcc-compiled objects.

    Args:
      name: target name.
      srcs: .cu files. They may include only `hdrs`, `textual_hdrs` and CUDA
        headers: nvcc runs as a genrule and sees no cc_library headers.
      hdrs: public headers of the library (also visible to nvcc).
      textual_hdrs: private headers the .cu files include.
      nvcc_flags: extra nvcc flags.
      nocuda_srcs: C++ sources compiled instead of the objects when CUDA is
        off (typically a backend that reports UNIMPLEMENTED).
      deps: cc_library deps of the C++ side.
      visibility: visibility of the cc_library.
      **kwargs: passed to the cc_library (copts, defines, ...).
    """
    objs = []
    for src in srcs:
        stem = src[:-len(".cu")].replace("/", "_")
        out = "_cuda_objs/%s/%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + textual_hdrs + ["@cuda//:cuda_headers"],
            outs = [out],
            cmd = " ".join([
                "/usr/local/cuda/bin/nvcc -c -O3 -std=c++20",
                "-Xcompiler=-fPIC,-Wall",
                "--expt-relaxed-constexpr",
                "-I. -I$(GENDIR)",
            ] + CUDA_ARCH_FLAGS + nvcc_flags + [
                "-o $@ $(location %s)" % src,
            ]),
            message = "nvcc " + src,
            # Built only through the cc_library below, so --config=nocuda
            # (which drops them from its srcs) never runs nvcc.
            tags = ["manual"],
        )
        objs.append(out)

    native.cc_library(
        name = name,
        srcs = select({
            "//tools/bazel:cuda_disabled": nocuda_srcs,
            "//conditions:default": objs,
        }),
        hdrs = hdrs,
        textual_hdrs = textual_hdrs,
        deps = deps + select({
            "//tools/bazel:cuda_disabled": [],
            "//conditions:default": ["@cuda//:cudart_cublas"],
        }),
        visibility = visibility,
        **kwargs
    )
