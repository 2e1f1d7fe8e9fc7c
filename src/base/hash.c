/* The hash table (see hash.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

enum { EMPTY, USED, DELETED };

static size_t find(const struct tp_hash *h, uint64_t key, bool *found)
{
	size_t mask = h->cap - 1, j = tp_hash_mix(key) & mask, tomb = SIZE_MAX;

	for (;; j = (j + 1) & mask) {
		if (h->state[j] == EMPTY) {
			*found = false;
			return tomb != SIZE_MAX ? tomb : j;
		}
		if (h->state[j] == DELETED) {
			if (tomb == SIZE_MAX)
				tomb = j;
		} else if (h->slot[j].key == key) {
			*found = true;
			return j;
		}
	}
}

uint64_t *tp_hash_get(const struct tp_hash *h, uint64_t key)
{
	bool found;
	size_t j;

	if (!h->n)
		return NULL;
	j = find(h, key, &found);
	return found ? &h->slot[j].val : NULL;
}

static int rehash(struct tp_hash *h, size_t cap)
{
	struct tp_hash nh = {.cap = cap};

	nh.slot = malloc(cap * sizeof(*nh.slot));
	nh.state = calloc(cap, 1);
	if (!nh.slot || !nh.state) {
		free(nh.slot);
		free(nh.state);
		return -ENOMEM;
	}
	for (size_t i = 0; i < h->cap; i++) {
		bool found;
		size_t j;

		if (h->state[i] != USED)
			continue;
		j = find(&nh, h->slot[i].key, &found);
		nh.slot[j] = h->slot[i];
		nh.state[j] = USED;
		nh.n++;
	}
	nh.used = nh.n;
	free(h->slot);
	free(h->state);
	*h = nh;
	return 0;
}

int tp_hash_put(struct tp_hash *h, uint64_t key, uint64_t val)
{
	bool found;
	size_t j;

	if ((h->used + 1) * 10 > h->cap * 7) {
		size_t cap = h->cap ? h->cap : 16;

		/* Grow when live keys fill it; only clean tombstones out otherwise. */
		while ((h->n + 1) * 10 > cap * 7 / 2)
			cap *= 2;
		if (rehash(h, cap))
			return -ENOMEM;
	}
	j = find(h, key, &found);
	if (!found) {
		if (h->state[j] == EMPTY)
			h->used++;
		h->state[j] = USED;
		h->slot[j].key = key;
		h->n++;
	}
	h->slot[j].val = val;
	return 0;
}

bool tp_hash_del(struct tp_hash *h, uint64_t key)
{
	bool found;
	size_t j;

	if (!h->n)
		return false;
	j = find(h, key, &found);
	if (!found)
		return false;
	h->state[j] = DELETED;
	h->n--;
	return true;
}

int tp_hash_foreach(const struct tp_hash *h, int (*fn)(void *arg, uint64_t key, uint64_t *val),
		    void *arg)
{
	int r = 0;

	for (size_t i = 0; i < h->cap && !r; i++)
		if (h->state[i] == USED)
			r = fn(arg, h->slot[i].key, &h->slot[i].val);
	return r;
}

int tp_hash_copy(struct tp_hash *dst, const struct tp_hash *src)
{
	*dst = (struct tp_hash){0};
	if (!src->cap)
		return 0;
	dst->slot = malloc(src->cap * sizeof(*dst->slot));
	dst->state = malloc(src->cap);
	if (!dst->slot || !dst->state) {
		tp_hash_release(dst);
		return -ENOMEM;
	}
	memcpy(dst->slot, src->slot, src->cap * sizeof(*dst->slot));
	memcpy(dst->state, src->state, src->cap);
	dst->cap = src->cap;
	dst->n = src->n;
	dst->used = src->used;
	return 0;
}

void tp_hash_release(struct tp_hash *h)
{
	free(h->slot);
	free(h->state);
	memset(h, 0, sizeof(*h));
}

static uint64_t str_hash(const char *s)
{
	uint64_t x = 0xcbf29ce484222325ULL; /* FNV-1a, then the mixer for the low bits */

	for (; *s; s++)
		x = (x ^ (unsigned char)*s) * 0x100000001b3ULL;
	return tp_hash_mix(x);
}

uint64_t *tp_hash_get_by(const struct tp_hash *h, uint64_t hash, const void *key,
			 tp_hash_same_fn same, void *arg, uint64_t *slot_key)
{
	uint64_t *v;

	for (; (v = tp_hash_get(h, hash)); hash = tp_hash_mix(hash + 1))
		if (same(arg, *v, key))
			return v;
	*slot_key = hash;
	return NULL;
}

uint64_t *tp_hash_get_str(const struct tp_hash *h, const char *s, tp_hash_same_fn same, void *arg,
			  uint64_t *slot_key)
{
	return tp_hash_get_by(h, str_hash(s), s, same, arg, slot_key);
}
