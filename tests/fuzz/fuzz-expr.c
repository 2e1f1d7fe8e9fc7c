/* libFuzzer target for the compiler of tracepoint expressions (src/tracept/expr.c) and its
 * evaluator: the input is a condition, then after a NUL a collect list; whatever compiles
 * is evaluated over fixed registers, with memory reads that fail or return zeros. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracept/tracept-priv.h"

static int fake_read(void *arg, uint64_t addr, void *buf, size_t len)
{
	(void)arg;
	if (addr & 1)
		return -EFAULT;
	memset(buf, 0, len);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t regs[TP_UREG_COUNT] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, v;
	struct tp_expr_error err;
	struct tp_items it = {0};
	struct tp_code *c = malloc(sizeof(*c));
	char *text = malloc(size + 2);
	const char *list;

	if (!c || !text)
		goto out;
	memcpy(text, data, size);
	text[size] = text[size + 1] = 0;
	list = text + strlen(text) + 1;
	if (!tp_expr_compile_cond(NULL, text, 0, c, &err))
		tp_expr_eval(c->code, c->len, regs, fake_read, NULL, &v, NULL);
	if (list <= text + size && !tp_expr_compile_collect(NULL, list, 0, &it, &err))
		for (int i = 0; i < it.n; i++)
			tp_expr_eval(it.v[i].c.code, it.v[i].c.len, regs, fake_read, NULL, &v,
				     NULL);
	tp_items_free(&it);
out:
	free(c);
	free(text);
	return 0;
}
