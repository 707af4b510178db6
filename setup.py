"""Builds the one C++ extension, transfer_engine._core, from csrc/ (metadata lives in pyproject.toml)."""

import os
from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("KVSTORE_BUILD_JOBS", default=0).install()

sources = sorted(glob("csrc/**/*.cpp", recursive=True))
debug = os.environ.get("KVSTORE_DEBUG_BUILD") == "1"

core = Pybind11Extension(
    "transfer_engine._core",
    sources,
    include_dirs=["csrc"],
    cxx_std=17,
    extra_compile_args=(["-O0", "-g"] if debug else ["-O2", "-fvisibility=hidden"]) + ["-Wall", "-Wextra"],
    libraries=["pthread"],
)

setup(ext_modules=[core], cmdclass={"build_ext": build_ext})
