/* The growable array (see vec.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/vec.h"

int tp_vec_reserve(struct tp_vec *v, size_t n)
{
	size_t cap = v->cap ? v->cap : 8;
	void *d;

	if (n <= v->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	if (!v->esize || cap > SIZE_MAX / v->esize)
		return -ENOMEM;
	d = realloc(v->data, cap * v->esize);
	if (!d)
		return -ENOMEM;
	v->data = d;
	v->cap = cap;
	return 0;
}

void *tp_vec_push(struct tp_vec *v)
{
	void *e;

	if (v->n == v->cap && tp_vec_reserve(v, v->n + 1)) {
		errno = ENOMEM;
		return NULL;
	}
	e = tp_vec_at(v, v->n++);
	memset(e, 0, v->esize);
	return e;
}

void *tp_vec_steal(struct tp_vec *v)
{
	void *d = v->data;

	v->data = NULL;
	v->n = v->cap = 0;
	return d;
}

void tp_vec_release(struct tp_vec *v)
{
	free(tp_vec_steal(v));
}
