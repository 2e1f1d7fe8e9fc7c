/* One growable array: elements of a fixed size in one realloc'ed block that doubles.
 *
 *	struct tp_vec v = TP_VEC_INIT(sizeof(struct foo));
 *	struct foo *f = tp_vec_push(&v);   (zeroed; NULL and errno = ENOMEM when out of memory)
 *	...
 *	tp_vec_release(&v);
 *
 * Pointers into the array are valid until the next push. */
#ifndef TP_BASE_VEC_H
#define TP_BASE_VEC_H

#include <stddef.h>

struct tp_vec {
	void *data;
	size_t n, cap; /* elements used, allocated */
	size_t esize;  /* bytes per element */
};

#define TP_VEC_INIT(size) ((struct tp_vec){.esize = (size)})

/* Append one zeroed element and return it, or NULL (errno ENOMEM; the array is unchanged). */
void *tp_vec_push(struct tp_vec *v);
/* Make room for @n elements in all; returns 0 or -ENOMEM. */
int tp_vec_reserve(struct tp_vec *v, size_t n);
/* Element @i (no bounds check). */
static inline void *tp_vec_at(const struct tp_vec *v, size_t i)
{
	return (char *)v->data + i * v->esize;
}
/* Hand the block to the caller (who frees it) and empty @v. */
void *tp_vec_steal(struct tp_vec *v);
/* Free the block; @v is empty and reusable. */
void tp_vec_release(struct tp_vec *v);

#endif
