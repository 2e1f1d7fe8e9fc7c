/* The tests' window on a code cache's repositories (src/dbt/map.h), driven by map.py:
 *   map-probe dump PID          every range: R block cache size kind pc len stale bytes
 *                                (INSN: cache then program bytes; others: first insn)
 *   map-probe check PID         every byte of every range maps back as its range says
 *   map-probe copies PID ADDR   the cache copies of the instruction at ADDR
 *   map-probe insert|remove PID ADDR
 *   map-probe text PID ADDR N   the program's bytes, then as a debugger wrote them */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "arch/arch.h"
#include "dbt/map.h"

static const char *const kinds[] = {"insn", "inside", "hidden", "stub", "lookup", "runtime"};

struct ctx {
	struct tp_dbt_map *m;
	FILE *mem;
	unsigned long n, bad;
};

static void hex(FILE *mem, uint64_t at, size_t n)
{
	uint8_t b[64];

	if (n > sizeof(b) || fseeko(mem, (off_t)at, SEEK_SET) || fread(b, 1, n, mem) != n) {
		printf(" ?");
		return;
	}
	putchar(' ');
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int dump_one(const struct tp_dbt_range *r, void *arg)
{
	struct ctx *c = arg;

	printf("R %" PRIx64 " %" PRIx64 " %" PRIu64 " %s %" PRIx64 " %u %d", r->block, r->cache,
	       r->size, kinds[r->kind], r->pc, r->len, r->stale);
	if (r->kind == TP_DBT_PC_INSN) {
		uint8_t b[16];

		hex(c->mem, r->cache, r->len < r->size ? r->len : r->size);
		if (r->len <= sizeof(b) &&
		    tp_dbt_map_read_text(c->m, r->pc, b, r->len, 0) == (ssize_t)r->len) {
			putchar(' ');
			for (uint32_t i = 0; i < r->len; i++)
				printf("%02x", b[i]);
		}
	} else {
		uint8_t b[16];
		struct tp_insn in;

		if (!fseeko(c->mem, (off_t)r->cache, SEEK_SET) &&
		    fread(b, 1, sizeof(b), c->mem) == sizeof(b) &&
		    !tp_arch_decode(b, sizeof(b), r->cache, &in)) {
			printf(" %s ", tp_arch_mnemonic_name(in.mnemonic));
			for (int i = 0; i < in.len; i++)
				printf("%02x", b[i]);
		}
	}
	putchar('\n');
	return 0;
}

/* Does @at map back as the range @r says? */
static void check_at(struct ctx *c, const struct tp_dbt_range *r, uint64_t at)
{
	struct tp_dbt_pc pc;
	int err = tp_dbt_map_to_program(c->m, at, &pc), want = r->kind;

	if (r->kind == TP_DBT_PC_INSN && at != r->cache)
		want = TP_DBT_PC_INSIDE;
	c->n++;
	if (err || pc.kind != want || pc.pc != r->pc ||
	    (r->kind == TP_DBT_PC_INSN && (pc.site != r->cache || pc.len != r->len)) ||
	    (r->kind == TP_DBT_PC_HIDDEN && pc.site && pc.site != r->cache + r->size)) {
		if (c->bad++ < 20)
			printf("bad %" PRIx64 ": err %d kind %s pc %" PRIx64 " (range %" PRIx64
			       " %s pc %" PRIx64 ")\n",
			       at, err, err ? "-" : kinds[pc.kind], pc.pc, r->cache, kinds[r->kind],
			       r->pc);
	}
}

static int check_one(const struct tp_dbt_range *r, void *arg)
{
	for (uint64_t i = 0; i < r->size; i++)
		check_at(arg, r, r->cache + i);
	return 0;
}

int main(int argc, char **argv)
{
	struct ctx c = {0};
	char path[64];
	pid_t pid;
	int err;

	if (argc < 3) {
		fprintf(stderr, "usage: map-probe dump|check|copies|insert|remove|text PID ...\n");
		return 2;
	}
	pid = (pid_t)atoi(argv[2]);
	err = tp_dbt_map_open(pid, &c.m);
	if (err) {
		fprintf(stderr, "map-probe: cannot open the repositories of %d: %s\n", (int)pid,
			strerror(-err));
		return 1;
	}
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	c.mem = fopen(path, "rb");
	if (!c.mem)
		return 1;
	setvbuf(c.mem, NULL, _IONBF, 0);
	if (!strcmp(argv[1], "dump")) {
		err = tp_dbt_map_foreach(c.m, dump_one, &c);
	} else if (!strcmp(argv[1], "check")) {
		err = tp_dbt_map_foreach(c.m, check_one, &c);
		printf("checked %lu bad %lu\n", c.n, c.bad);
	} else if (argc > 3 && !strcmp(argv[1], "copies")) {
		struct tp_dbt_copy cp[64];
		size_t n = tp_dbt_map_copies(c.m, strtoull(argv[3], NULL, 0), cp, 64);

		printf("copies %zu\n", n);
		for (size_t i = 0; i < n && i < 64; i++) {
			printf("copy %" PRIx64 " %u %d", cp[i].cache, cp[i].len, cp[i].stale);
			hex(c.mem, cp[i].cache, 1);
			putchar('\n');
		}
	} else if (argc > 3 && !strcmp(argv[1], "insert")) {
		err = tp_dbt_map_bp_insert(c.m, strtoull(argv[3], NULL, 0));
	} else if (argc > 3 && !strcmp(argv[1], "remove")) {
		err = tp_dbt_map_bp_remove(c.m, strtoull(argv[3], NULL, 0));
	} else if (argc > 4 && !strcmp(argv[1], "text")) {
		uint64_t at = strtoull(argv[3], NULL, 0);
		size_t n = strtoul(argv[4], NULL, 0);
		uint8_t b[256];

		for (int w = 0; w < 2 && n <= sizeof(b); w++) {
			ssize_t got = tp_dbt_map_read_text(c.m, at, b, n, w);

			printf("text%s", w ? "-written" : "");
			for (ssize_t i = 0; i < got; i++)
				printf(" %02x", b[i]);
			putchar('\n');
		}
	} else {
		fprintf(stderr, "map-probe: unknown command %s\n", argv[1]);
		return 2;
	}
	if (err)
		printf("error %d %s\n", err, strerror(-err));
	tp_dbt_map_close(c.m);
	fclose(c.mem);
	return err ? 1 : 0;
}
