#ifndef KB_CORE_RNG_H
#define KB_CORE_RNG_H
/*
 * Random numbers for the search, the tuner, the LLM clients' backoff and
 * model choice: splitmix64 over one uint64_t state the caller owns (and
 * stores), so a search resumed from the store or run again from its seed
 * draws the same numbers. Not for anything secret.
 */
#include "core/common.h"

static inline uint64_t kb_rng_u64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double kb_rng_double(uint64_t *state)
{
	return (double)(kb_rng_u64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [0, n); 0 when n is 0. */
static inline size_t kb_rng_below(uint64_t *state, size_t n)
{
	return n ? (size_t)(kb_rng_double(state) * (double)n) : 0;
}

#endif
