// Small, fully specified random numbers for data order and generated data:
// the same sequence in every build on every machine (std::shuffle and
// absl::BitGen may change between library versions), which is what makes a
// shuffled shard resumable at an example position and a generated file the
// same for the same seed.
#ifndef PS_WORKER_DATA_RANDOM_H_
#define PS_WORKER_DATA_RANDOM_H_

#include <cstdint>

namespace ps::worker::data {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijection of
// uint64 that mixes every input bit into every output bit. Used as a hash of
// integers.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A hash of several integers, order-sensitive.
inline uint64_t HashWords(uint64_t a, uint64_t b) {
  return Mix64(Mix64(a) ^ (b + 0x632be59bd9b4e019ULL));
}
inline uint64_t HashWords(uint64_t a, uint64_t b, uint64_t c) {
  return HashWords(HashWords(a, b), c);
}

// The SplitMix64 generator. Not thread-safe; cheap to copy.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound > 0, without modulo bias (Lemire 2019).
  uint64_t Below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_RANDOM_H_
