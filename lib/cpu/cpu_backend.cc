#include "cpu/cpu_backend.h"

#include <cstdio>

#include "hwy/targets.h"

namespace streamattn {

// Host memory: validation reads the caller's tensor where it lies.
Status CpuBackend::CopyToHost(const Tensor& t, const char*, Vector<unsigned char>*,
                              Tensor* host) const {
  *host = t;
  return Status();
}

void CompiledSimdTargetNames(char* text, size_t size) {
  size_t used = 0;
  text[0] = '\0';
  // By index, not by shifting a bit up to the sign: shifting HWY_SCALAR's bit on reached
  // INT64_MIN, and shifting that is undefined (UBSan stopped every context creation).
  for (int i = 0; i < 63; ++i) {
    const int64_t bit = int64_t{1} << i;
    if ((HWY_TARGETS & bit) == 0) continue;
    const int n =
        std::snprintf(text + used, size - used, "%s%s", used == 0 ? "" : " ", hwy::TargetName(bit));
    if (n < 0 || static_cast<size_t>(n) >= size - used) return;  // truncated, still terminated
    used += static_cast<size_t>(n);
  }
}

}  // namespace streamattn
