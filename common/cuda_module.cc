#include "common/cuda_module.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include <fmt/format.h>

namespace planner {

namespace {

struct Loaded {
  void* handle = nullptr;
  std::string path;
  std::string error;  // set when handle is nullptr
};

std::string ExeDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

Loaded Open() {
  Loaded l;
  std::vector<std::string> candidates;
  const char* env = std::getenv(kCudaModuleEnv);
  std::error_code ec;
  if (env != nullptr && *env != '\0') {
    const std::string path = std::filesystem::absolute(env, ec).string();
    if (!std::filesystem::is_regular_file(path, ec)) {
      l.error = fmt::format("the CUDA module {} ({}) does not exist; point {} at {} or unset it", path, kCudaModuleEnv,
                            kCudaModuleEnv, kCudaModuleFile);
      return l;
    }
    candidates.push_back(path);
  } else {
    const std::string dir = ExeDir();
    candidates.push_back(dir + "/" + kCudaModuleFile);
    candidates.push_back(dir + "/../lib/planner/" + kCudaModuleFile);
  }
  for (const std::string& path : candidates) {
    if (!std::filesystem::is_regular_file(path, ec)) continue;
    l.path = path;
    l.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle == nullptr) {
      const char* e = dlerror();
      const std::string what = e != nullptr ? e : "unknown dlopen error";
      l.error = fmt::format("cannot load the CUDA module {}: {}; {}", path, what,
                            what.find("undefined symbol") != std::string::npos
                                ? "the executable must export the runtime's symbols (Meson: export_dynamic, the "
                                  "kernels linked whole) and come from the same build as the module"
                                : "put the CUDA runtime, cuBLAS, cuDNN and NCCL libraries on LD_LIBRARY_PATH");
    }
    return l;
  }
  const std::string dir = ExeDir();
  l.error = fmt::format(
      "the CUDA module {} is not in {} nor in {}/../lib/planner; copy it from the build directory "
      "(beside build/planner/planner) next to the executable, or set {} to its path",
      kCudaModuleFile, dir, dir, kCudaModuleEnv);
  return l;
}

}  // namespace

void* CudaModuleSymbol(const char* symbol, std::string* why) {
  static const Loaded loaded = Open();
  if (loaded.handle == nullptr) {
    if (why != nullptr) *why = loaded.error;
    return nullptr;
  }
  void* p = dlsym(loaded.handle, symbol);
  if (p == nullptr && why != nullptr) {
    *why = fmt::format("the CUDA module {} has no {} (built from another version of planner?); rebuild it", loaded.path,
                       symbol);
  }
  return p;
}

}  // namespace planner
