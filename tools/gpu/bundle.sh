#!/usr/bin/env bash
# Builds the project for a lent GPU machine and packs what must travel into .gpu/ (git-excluded).
# The GPU machine has nvcc and the CUDA, cuBLAS(Lt), cuDNN and NCCL libraries (cuDNN and NCCL as Python
# wheels) and PyTorch, but no apt, no yaml-cpp / fmt / CLI11 / Eigen / MPI: so build HERE (CUDA 13 is
# installed for compile and link), without MPI, and carry the three executables the check runs, the CUDA
# module they load (libplanner_cuda.so) and the non-CUDA shared libraries they need (docs/gpu.md).
#   bash tools/gpu/bundle.sh
#   device run: command "bash .gpu/check.sh", carry [".gpu"], timeout_s 600
# GPU_BUILD names another build directory (default build-gpu); GPU_ARCH the CUDA architectures (default 9.0:
# H100 / H200; "8.0;9.0" adds A100).
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
here=$(cd "$(dirname "$0")" && pwd)
build=${GPU_BUILD:-build-gpu}
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file: ask git where the exclude file is
mkdir -p "$(dirname "$exclude")"
for p in /.gpu/ "/$build/"; do grep -qx "$p" "$exclude" 2>/dev/null || echo "$p" >> "$exclude"; done
[ -f "$build/build.ninja" ] || meson setup "$build" -Dmpi=disabled -Dcuda=enabled -Dnccl=enabled -Dbuildtype=release -Dbench=false \
  -Dgpu_arch="${GPU_ARCH:-9.0}"
# Meson does not see the project headers nvcc includes: rebuild a CUDA object when any header is newer than it
# (a changed tensor.h otherwise links stale objects against new symbols).
for o in $(find "$build" -name '*.cu.o' 2>/dev/null); do
  [ -n "$(find . -path "./$build" -prune -o -path ./.git -prune -o -name '*.h' -newer "$o" -print -quit)" ] && rm -f "$o"
done
ninja -C "$build" -j"${JOBS:-2}" planner/planner planner/libplanner_cuda.so tests/kernels_gpu_test tests/nccl_test
rm -rf .gpu; mkdir -p .gpu/bin .gpu/lib
# The CUDA module goes next to the executables: the loader looks in the executable's directory first
# (common/cuda_module.h).
cp "$build/planner/planner" "$build/planner/libplanner_cuda.so" "$build/tests/kernels_gpu_test" "$build/tests/nccl_test" \
  .gpu/bin/
# Shared libraries that are neither CUDA's (the GPU machine has its own) nor the C/C++ runtime's.
for b in .gpu/bin/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u | \
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libgomp|ld-linux)[.-]|cuda|cudnn|nccl|cublas' | \
  xargs -r -I{} cp -L {} .gpu/lib/
# The FP8 diagnosis (check.sh's fp8-probe step): cuBLASLt alone, no project code.
gencode=(); for a in $(echo "${GPU_ARCH:-9.0}" | tr ';' ' '); do a=${a/./}; gencode+=(-gencode "arch=compute_$a,code=sm_$a"); done
nvcc -O2 "${gencode[@]}" "$here/fp8_probe.cu" -lcublasLt -o .gpu/bin/fp8_probe
cp "$here/lib.sh" "$here/check.sh" "$here/recheck.sh" .gpu/
git rev-parse HEAD > .gpu/commit
git status --porcelain --untracked-files=no | grep -q . && echo "dirty" >> .gpu/commit
strip --strip-unneeded .gpu/bin/* 2>/dev/null || true
du -sh .gpu; ls -l .gpu/bin .gpu/lib
# The device call carries at most 64 MiB; keep well under it.
[ "$(du -sm .gpu | cut -f1)" -lt 60 ] || { echo "bundle.sh: .gpu is over 60 MiB; it must stay under the device call's 64 MiB carry limit" >&2; exit 1; }
