"""C++ message and gRPC code from .proto files with the system protoc.

Bazel 4.2.3's native proto rules would fetch protobuf's sources; this macro
runs Debian's /usr/bin/protoc and /usr/bin/grpc_cpp_plugin instead.
"""

def ps_proto_library(name, srcs, visibility = None):
    """Declares `name`: a cc_library with the .pb and .grpc.pb code of srcs.

    Args:
      name: target name of the resulting cc_library.
      srcs: .proto files of this package; imports are relative to the
        workspace root (`import "proto/common.proto";`).
      visibility: visibility of the cc_library.
    """
    stems = [s[:-len(".proto")] for s in srcs]
    hdrs = [s + ".pb.h" for s in stems] + [s + ".grpc.pb.h" for s in stems]
    ccs = [s + ".pb.cc" for s in stems] + [s + ".grpc.pb.cc" for s in stems]
    pkg = native.package_name()
    native.genrule(
        name = name + "_codegen",
        srcs = srcs,
        outs = hdrs + ccs,
        cmd = ("/usr/bin/protoc --proto_path=. " +
               "--cpp_out=$(GENDIR) --grpc_out=$(GENDIR) " +
               "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " +
               " ".join([pkg + "/" + s for s in srcs])),
        message = "protoc " + pkg,
    )
    native.cc_library(
        name = name,
        srcs = ccs,
        hdrs = hdrs,
        # Generated code is not ours to keep -Wextra clean.
        copts = ["-w"],
        visibility = visibility,
        deps = [
            "@system//:grpc",
            "@system//:protobuf",
        ],
    )
