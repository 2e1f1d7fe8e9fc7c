/* One hash table: 64-bit keys to 64-bit values (an integer, an index or a pointer cast),
 * open addressing with linear probing, power-of-two capacity kept under 70% full, deletion
 * by tombstones.  Every key value is allowed, 0 included.
 *
 *	struct tp_hash h = {0};
 *	tp_hash_put(&h, key, val);            0 or -ENOMEM
 *	uint64_t *v = tp_hash_get(&h, key);   NULL when absent; valid until the next put
 *	tp_hash_del(&h, key);
 *	tp_hash_release(&h);
 */
#ifndef TP_BASE_HASH_H
#define TP_BASE_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tp_hash_slot {
	uint64_t key, val;
};

struct tp_hash {
	struct tp_hash_slot *slot;
	uint8_t *state;	     /* per slot: 0 empty, 1 used, 2 deleted */
	size_t cap, n, used; /* n: live keys; used: live + tombstones */
};

/* The mixing step (murmur3's finaliser), for callers that combine keys. */
static inline uint64_t tp_hash_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

uint64_t *tp_hash_get(const struct tp_hash *h, uint64_t key);
/* Insert or replace.  Returns 0 or -ENOMEM (the table is unchanged). */
int tp_hash_put(struct tp_hash *h, uint64_t key, uint64_t val);
/* Remove @key; returns whether it was there. */
bool tp_hash_del(struct tp_hash *h, uint64_t key);
/* Visit every live entry (in no particular order) while @fn returns 0; returns its last
 * return value.  @fn must not insert or delete. */
int tp_hash_foreach(const struct tp_hash *h, int (*fn)(void *arg, uint64_t key, uint64_t *val),
		    void *arg);
void tp_hash_release(struct tp_hash *h);
/* Make @dst (empty) a copy of @src.  0 or -ENOMEM (@dst left empty). */
int tp_hash_copy(struct tp_hash *dst, const struct tp_hash *src);

/* ---- keys longer than 64 bits (strings, arrays) ----
 * The table maps a 64-bit hash of the caller's key to the caller's index of it; keys whose
 * hashes collide take the next key of a rehash chain, so lookups are exact.
 * @same(arg, val, key) says whether the caller's entry @val holds @key. */
typedef bool (*tp_hash_same_fn)(void *arg, uint64_t val, const void *key);

/* The value of @key (whose hash is @hash), or NULL with *@slot_key set to the key to
 * tp_hash_put() it under. */
uint64_t *tp_hash_get_by(const struct tp_hash *h, uint64_t hash, const void *key,
			 tp_hash_same_fn same, void *arg, uint64_t *slot_key);

/* The same for a string @s (@same receives it as @key). */
uint64_t *tp_hash_get_str(const struct tp_hash *h, const char *s, tp_hash_same_fn same, void *arg,
			  uint64_t *slot_key);

#endif
