// The CPU tier Python chose (hearth/kernels/tiers.py), set once at load by hk_set_tier: a lower tier
// forced on a better CPU keeps that CPU's extra units off (how CI runs every tier on one machine).
#pragma once

namespace {

enum CpuTier { TIER_AVX2 = 1, TIER_AVX512 = 2, TIER_AMX = 3 };  // tiers.py's Tier.level
constexpr int TIER_NEON = 1;  // aarch64's one tier (levels order the tiers of one architecture)

inline int& cpu_tier() {
  static int tier = TIER_AMX;  // the CPUID checks alone decide until hk_set_tier says otherwise
  return tier;
}

inline bool tier_allows_amx() { return cpu_tier() >= TIER_AMX; }

}  // namespace
