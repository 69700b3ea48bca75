// The Arm CPU features the kernels are chosen by at run time, from the Linux auxiliary vector
// (HWCAP, HWCAP2: what the kernel reports for every core of the system). Elsewhere (32-bit
// Arm, other systems, other architectures) every feature reads as absent, so those builds keep
// the f32 kernels.
#ifndef STREAMATTN_CPU_ARM_FEATURES_H_
#define STREAMATTN_CPU_ARM_FEATURES_H_

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#define SATTN_ARM_HWCAPS 1
#else
#define SATTN_ARM_HWCAPS 0
#endif

namespace streamattn {

// FEAT_BF16: BFDOT, BFMMLA and BFCVT on NEON registers (HWCAP2_BF16, bit 14).
inline bool ArmHasBf16() {
#if SATTN_ARM_HWCAPS
  return (getauxval(AT_HWCAP2) & (1UL << 14)) != 0;
#else
  return false;
#endif
}

// FEAT_FHM: FMLAL and FMLAL2, f16 products widened into f32 sums (HWCAP_ASIMDFHM, bit 23).
inline bool ArmHasFhm() {
#if SATTN_ARM_HWCAPS
  return (getauxval(AT_HWCAP) & (1UL << 23)) != 0;
#else
  return false;
#endif
}

}  // namespace streamattn

#endif  // STREAMATTN_CPU_ARM_FEATURES_H_
