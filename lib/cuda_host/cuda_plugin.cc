#include "cuda_host/cuda_plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

namespace streamattn {
namespace {

constexpr const char* kPluginFile = "libstreamattn_cuda.so";

// The directory this library was loaded from (with a trailing '/'), or "".
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&FindCudaPlugin), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

CudaPluginStatus Load(const std::string& path) {
  CudaPluginStatus status;
  status.path = path;
  struct stat file;
  if (stat(path.c_str(), &file) != 0) {
    status.reason = "no CUDA plugin at " + path;
    return status;
  }
  // RTLD_LOCAL: the plugin's statically linked CUDA runtime stays private to it.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    status.reason = "the CUDA plugin " + path + " failed to load: " +
                    (error ? std::string(error) : std::string("dlopen failed"));
    return status;
  }
  const auto entry =
      reinterpret_cast<sattn_cuda_plugin_entry_fn>(dlsym(handle, SATTN_CUDA_PLUGIN_ENTRY));
  if (entry == nullptr) {
    status.reason = path + " is not a streamattn CUDA plugin (no " SATTN_CUDA_PLUGIN_ENTRY ")";
    return status;
  }
  const sattn_cuda_plugin* plugin = entry();
  if (plugin == nullptr || plugin->abi_version != SATTN_CUDA_PLUGIN_ABI_VERSION ||
      plugin->struct_size < sizeof(sattn_cuda_plugin) || plugin->device_count == nullptr) {
    status.reason = path + ": CUDA plugin ABI mismatch (got version " +
                    (plugin ? std::to_string(plugin->abi_version) : std::string("none")) +
                    ", want " + std::to_string(SATTN_CUDA_PLUGIN_ABI_VERSION) +
                    (plugin && plugin->abi_version == SATTN_CUDA_PLUGIN_ABI_VERSION
                         ? ", but its table is incomplete"
                         : "") +
                    "); rebuild them together";
    return status;
  }
  char reason[512] = "";
  const int32_t devices = plugin->device_count(reason, sizeof(reason));
  if (devices <= 0) {
    status.reason = path + ": " + (reason[0] ? reason : "no CUDA device");
    return status;
  }
  status.plugin = plugin;
  status.devices = devices;
  status.reason = std::to_string(devices) + " device(s), plugin " + path + " (" +
                  (plugin->build_info ? plugin->build_info : "") + ")";
  return status;
}

}  // namespace

const CudaPluginStatus& FindCudaPlugin() {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<CudaPluginStatus>> loaded;  // never freed
  const char* override_path = std::getenv("STREAMATTN_CUDA_PLUGIN");
  const std::string path =
      override_path && override_path[0] ? std::string(override_path) : OwnDirectory() + kPluginFile;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<CudaPluginStatus>& entry = loaded[path];
  if (!entry) entry = std::make_unique<CudaPluginStatus>(Load(path));
  return *entry;
}

}  // namespace streamattn
