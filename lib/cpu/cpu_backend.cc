#include "cpu/cpu_backend.h"

#include "hwy/targets.h"

namespace streamattn {

std::string CompiledSimdTargetNames() {
  std::string names;
  for (int64_t bit = 1; bit != 0 && bit <= HWY_SCALAR; bit <<= 1) {
    if ((HWY_TARGETS & bit) == 0) continue;
    if (!names.empty()) names += ' ';
    names += hwy::TargetName(bit);
  }
  return names;
}

}  // namespace streamattn
