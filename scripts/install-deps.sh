#!/usr/bin/env bash
# Installs Loom's build and test dependencies from Debian packages (run as root).
# CUDA is not installed here: when nvcc is on PATH the CUDA backend is built, otherwise skipped.
# clang and its compiler-rt (libFuzzer, ASan and UBSan runtimes) build the `asan` preset: the
# sanitized tests and the fuzz targets .ci/run runs after the default build.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  cmake ninja-build g++ make pkg-config ccache \
  nlohmann-json3-dev libcli11-dev libfmt-dev libeigen3-dev libboost-graph-dev \
  libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-openmp-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libgl-dev \
  python3 clang-format \
  clang libclang-rt-dev >/dev/null
