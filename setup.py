"""Builds the C++ extensions from csrc/ (metadata lives in pyproject.toml):

- transfer_engine._core: the data plane (core registry and batches, transports, engine, binding);
- transfer_engine._tools: machine baselines and wire decoders for benches and tests;
- kvstore._meta: metadata for the master and clients (the offset allocator, the master's object table),
  no data plane.
"""

import os
from glob import glob

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_with_alias(build_py):
    """Also ships kvstore-mooncake-alias.pth (the opt-in `mooncake.store` alias; see
    _kvstore_mooncake_alias.py) at the top of site-packages."""

    def run(self) -> None:
        super().run()
        self.copy_file(
            "kvstore-mooncake-alias.pth", os.path.join(self.build_lib, "kvstore-mooncake-alias.pth")
        )


ParallelCompile("KVSTORE_BUILD_JOBS", default=0).install()

debug = os.environ.get("KVSTORE_DEBUG_BUILD") == "1"
flags = (["-O0", "-g"] if debug else ["-O2", "-fvisibility=hidden"]) + ["-Wall", "-Wextra"]


def sources(*patterns: str) -> list[str]:
    return sorted({path for pattern in patterns for path in glob(pattern, recursive=True)})


def extension(name: str, files: list[str]) -> Pybind11Extension:
    return Pybind11Extension(
        name, files, include_dirs=["csrc"], cxx_std=17, extra_compile_args=flags, libraries=["pthread", "dl"]
    )


core = extension(
    "transfer_engine._core",
    sources(
        "csrc/common/*.cpp",
        "csrc/core/*.cpp",
        "csrc/cuda/*.cpp",
        "csrc/transport/**/*.cpp",
        "csrc/engine/*.cpp",
        "csrc/topology/*.cpp",
        "csrc/bind/module.cpp",
        "csrc/bind/bind_*.cpp",
    ),
)
tools = extension(
    "transfer_engine._tools",
    sources(
        "csrc/tools/*.cpp",
        "csrc/common/*.cpp",
        "csrc/core/descriptor.cpp",
        "csrc/core/memory.cpp",
        "csrc/transport/tcp/wire.cpp",
    ),
)
meta = extension(
    "kvstore._meta",
    sources("csrc/storage/*.cpp", "csrc/meta/*.cpp", "csrc/bind/meta_module.cpp", "csrc/bind/meta_*.cpp"),
)

setup(ext_modules=[core, tools, meta], cmdclass={"build_ext": build_ext, "build_py": build_py_with_alias})
