"""Finds the native module ps/_native.so.

Installed, or in Bazel's runfiles, it sits next to this file. In a source
tree it is built at bazel-bin/worker/python/ps/: that directory joins the
package's path (PS_NATIVE_DIR names another one).
"""

import importlib
import os

import ps


def _candidates():
    env = os.environ.get("PS_NATIVE_DIR")
    if env:
        yield env
    here = os.path.dirname(os.path.realpath(__file__))
    root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    yield os.path.join(root, "bazel-bin", "worker", "python", "ps")


def _load():
    try:
        return importlib.import_module("ps._native")
    except ImportError as first:
        for d in _candidates():
            if os.path.exists(os.path.join(d, "_native.so")) and d not in ps.__path__:
                ps.__path__.append(d)
                return importlib.import_module("ps._native")
        raise ImportError(
            "ps: the native module _native.so was not found next to the "
            "package nor in bazel-bin/worker/python/ps; build it with "
            "`bazel build --config=nocuda //worker/python:ps/_native.so` "
            "(or set PS_NATIVE_DIR)"
        ) from first


native = _load()
