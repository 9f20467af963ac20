// PS_VECTOR_CLONES: put on a loop over gradients (compiled with -O3) so that
// gcc emits an AVX2 clone beside the baseline one and picks between them
// when the program loads.
//
// Not under sanitizers: their runtimes are not up yet when the loader runs
// the ifunc resolvers of the clones, and TSan crashes there.
#ifndef PS_SERVER_SHARD_VECTOR_CLONES_H_
#define PS_SERVER_SHARD_VECTOR_CLONES_H_

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define PS_VECTOR_CLONES
#else
#define PS_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif

#endif  // PS_SERVER_SHARD_VECTOR_CLONES_H_
