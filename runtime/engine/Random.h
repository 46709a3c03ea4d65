// The sampler's random numbers: xoshiro256** (Blackman and Vigna) seeded
// through splitmix64, so a seed gives the same stream on every platform.
#pragma once

#include <cstdint>

namespace kiln {

// One step of splitmix64: advances `state` and returns the next output.
inline uint64_t splitMix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Xoshiro256 {
public:
  explicit Xoshiro256(uint64_t seed) {
    uint64_t state = seed;
    for (uint64_t &word : s_)
      word = splitMix64(state); // never all zero: splitmix64 is a bijection
  }

  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

} // namespace kiln
