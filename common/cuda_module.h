// Finding and loading the CUDA module, libplanner_cuda.so: the runtime's CUDA, cuBLAS(Lt), cuDNN and NCCL
// code (runtime/kernels/cuda_api.cu, device_ops_cuda.cu, runtime/comm/nccl_comm.cc), built by Meson as a
// shared module so that the planner executable links none of those libraries. Only the loaders
// (runtime/kernels/cuda_loader.cc, runtime/comm/nccl_loader.cc) call this, on the first call that needs a
// device: solve, inspect, codegen and import never load it.
//
// Where it is looked for, first found wins:
//   1. $PLANNER_CUDA_MODULE, when set and not empty: that file only;
//   2. the directory of the running executable (/proc/self/exe): build/planner/libplanner_cuda.so next to
//      build/planner/planner, .gpu/bin/ in a GPU bundle;
//   3. that directory's ../lib/planner/ (the installed layout: bin/planner, lib/planner/libplanner_cuda.so).
// No header of CUDA is included here: this is plain dlopen.
#pragma once

#include <string>

namespace planner {

inline constexpr const char* kCudaModuleFile = "libplanner_cuda.so";
inline constexpr const char* kCudaModuleEnv = "PLANNER_CUDA_MODULE";

// The address of the module's `symbol`, loading the module (once per process, thread-safe) on the first
// call; nullptr with *why set to one sentence naming what is missing (the module, a library it needs as
// dlerror reports it, or the symbol) and how to fix it. Never throws.
void* CudaModuleSymbol(const char* symbol, std::string* why);

}  // namespace planner
