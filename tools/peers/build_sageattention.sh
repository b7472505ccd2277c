#!/usr/bin/env bash
# Builds the public SageAttention (thu-ml/SageAttention, a source checkout given as $1; never
# committed here) on the GPU machine, for the side-by-side comparison in bench/sage_peer.py.
# Only what an sm_90 GPU runs is compiled: the sm_90a attention kernels and the fused
# quantization kernels (their setup.py would also build the sm_80/sm_89 kernels for an H200).
# Output: an importable package under ${2:-/tmp/sage-peer}; add that folder to PYTHONPATH.
# Usage (device tool, carry [".deps", ".peers"]):
#   bash tools/peers/build_sageattention.sh .peers/SageAttention /tmp/sage-peer
set -euo pipefail
src=$(cd "$1" && pwd)
dst=${2:-/tmp/sage-peer}
rm -rf "$dst"; mkdir -p "$dst"; cp -r "$src/sageattention" "$src/csrc" "$dst/"
cd "$dst"
cat > build_min.py <<'PY'
import os, torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
cxx = ["-O3", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DENABLE_BF16"]
nvcc = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "--use_fast_math", "-diag-suppress=174", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-gencode", "arch=compute_90a,code=sm_90a"]
flags = {"cxx": cxx, "nvcc": nvcc}
exts = [
    CUDAExtension("sageattention._qattn_sm90",
                  ["csrc/qattn/pybind_sm90.cpp", "csrc/qattn/qk_int_sv_f8_cuda_sm90.cu"],
                  extra_compile_args=flags, extra_link_args=["-lcuda"]),
    CUDAExtension("sageattention._fused", ["csrc/fused/pybind.cpp", "csrc/fused/fused.cu"],
                  extra_compile_args=flags),
]
setup(name="sageattention", ext_modules=exts, cmdclass={"build_ext": BuildExtension},
      script_args=["build_ext", "--inplace"])
PY
MAX_JOBS=${MAX_JOBS:-8} python3 build_min.py
python3 -c "import sys; sys.path.insert(0, '$dst'); import sageattention; print('sageattention built:', sageattention.__file__)"
