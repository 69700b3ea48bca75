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

// Bit `bit` of HWCAP (hwcap2 false) or HWCAP2.
inline bool ArmHwcapBit(bool hwcap2, int bit) {
#if SATTN_ARM_HWCAPS
  return (getauxval(hwcap2 ? AT_HWCAP2 : AT_HWCAP) >> bit) & 1;
#else
  (void)hwcap2, (void)bit;
  return false;
#endif
}

// FEAT_BF16: BFDOT, BFMMLA and BFCVT on NEON registers (HWCAP2_BF16).
inline bool ArmHasBf16() { return ArmHwcapBit(/*hwcap2=*/true, 14); }

// FEAT_FHM: FMLAL and FMLAL2, f16 products widened into f32 sums (HWCAP_ASIMDFHM).
inline bool ArmHasFhm() { return ArmHwcapBit(/*hwcap2=*/false, 23); }

}  // namespace streamattn

#endif  // STREAMATTN_CPU_ARM_FEATURES_H_
