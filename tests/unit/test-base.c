/* Unit tests of src/base: the maps parser, program lookup, the growable array and the hash
 * table. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/paths.h"
#include "base/procfs.h"
#include "base/vec.h"
#include "tap.h"

static void test_maps_line(void)
{
	static const char l1[] = "7f1c2a000000-7f1c2a022000 r-xp 00001000 fd:01 1314211"
				 "                    /usr/lib/x86_64-linux-gnu/libc.so.6\n";
	static const char l2[] = "7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ";
	static const char l3[] = "55aa00000000-55aa00001000 r-xp 00000000 08:02 42    "
				 "/tmp/a b (deleted)";
	struct tp_maps_ent e;

	is_int(tp_maps_parse_line(l1, strlen(l1), &e), 0, "maps: a library line parses");
	ok(e.start == 0x7f1c2a000000ULL && e.end == 0x7f1c2a022000ULL && e.offset == 0x1000,
	   "maps: start, end, offset");
	is_str(e.perms, "r-xp", "maps: perms");
	ok(tp_maps_exec(&e), "maps: executable");
	is_int(e.inode, 1314211, "maps: inode");
	ok(e.path_len == strlen("/usr/lib/x86_64-linux-gnu/libc.so.6") &&
	       !memcmp(e.path, "/usr/lib/x86_64-linux-gnu/libc.so.6", e.path_len) && !e.deleted,
	   "maps: path without the newline");
	is_int(tp_maps_parse_line(l2, strlen(l2), &e), 0, "maps: anonymous line parses");
	ok(!e.path_len && !tp_maps_exec(&e), "maps: anonymous has no path");
	is_int(tp_maps_parse_line(l3, strlen(l3), &e), 0, "maps: deleted line parses");
	ok(e.deleted && e.path_len == 8 && !memcmp(e.path, "/tmp/a b", 8),
	   "maps: ' (deleted)' left out of the path, spaces kept");
	is_int(tp_maps_parse_line("garbage", 7, &e), -1, "maps: garbage refused");
	is_int(tp_maps_parse_line("1000 2000 0 /x", 14, &e), -1, "maps: other format refused");
	is_int(tp_maps_parse_line("1000-2000 r-xp", 14, &e), -1, "maps: truncated refused");
}

struct seen {
	int n, exec;
	bool self_text;
	uint64_t addr;
};

static int count_map(void *arg, const struct tp_maps_ent *e)
{
	struct seen *s = arg;

	s->n++;
	s->exec += tp_maps_exec(e);
	if (e->start <= s->addr && s->addr < e->end && e->path[e->path_len] == 0 &&
	    e->path[0] == '/')
		s->self_text = true;
	return 0;
}

static int stop_at_two(void *arg, const struct tp_maps_ent *e)
{
	return ++*(int *)arg == 2 ? 42 : 0;
}

static void test_maps_foreach(void)
{
	struct seen s = {.addr = (uint64_t)(uintptr_t)test_maps_foreach};
	int n = 0;

	is_int(tp_maps_foreach(getpid(), count_map, &s), 0, "maps: own maps read");
	ok(s.n > 5 && s.exec >= 2, "maps: %d mappings, %d executable", s.n, s.exec);
	ok(s.self_text, "maps: this function's mapping found, path NUL-terminated");
	is_int(tp_maps_foreach(0, stop_at_two, &n), 42, "maps: callback's return stops the walk");
	is_int(tp_maps_foreach(0x7fffffff, count_map, &s), -ENOENT, "maps: no such process");
}

static void test_paths(void)
{
	char buf[4096], small[8];
	const char *cur = "/a::/b";

	ok(tp_path_next(&cur, "ls", buf, sizeof(buf)) && !strcmp(buf, "/a/ls"), "path: first");
	ok(tp_path_next(&cur, "ls", buf, sizeof(buf)) && !strcmp(buf, "./ls"),
	   "path: empty entry is the current directory");
	ok(tp_path_next(&cur, "ls", buf, sizeof(buf)) && !strcmp(buf, "/b/ls"), "path: last");
	ok(!tp_path_next(&cur, "ls", buf, sizeof(buf)), "path: end");
	cur = "/very/long/dir:/b";
	ok(tp_path_next(&cur, "ls", small, sizeof(small)) && !strcmp(small, "/b/ls"),
	   "path: too long entries skipped");

	setenv("PATH", "/nonexistent:/bin:/usr/bin", 1);
	is_int(tp_path_find_program("sh", buf, sizeof(buf)), 0, "path: sh found");
	ok(!strcmp(buf, "/bin/sh"), "path: first executable candidate (%s)", buf);
	is_int(tp_path_find_program("no-such-program-tp", buf, sizeof(buf)), -ENOENT,
	       "path: missing program");
	is_int(tp_path_find_program("/bin/sh", buf, sizeof(buf)), 0, "path: a path is taken as is");
	is_int(tp_path_find_program("/no/such", buf, sizeof(buf)), -ENOENT, "path: a missing path");
	unsetenv("PATH");
	is_str(tp_path_dirs(), "/usr/local/bin:/usr/bin:/bin", "path: default without $PATH");
}

static void test_vec(void)
{
	struct tp_vec v = TP_VEC_INIT(sizeof(uint64_t));
	bool good = true;

	for (uint64_t i = 0; i < 1000; i++) {
		uint64_t *p = tp_vec_push(&v);

		if (!p || *p) {
			good = false;
			break;
		}
		*p = i * 3;
	}
	ok(good && v.n == 1000, "vec: 1000 zeroed pushes");
	for (size_t i = 0; i < v.n; i++)
		good &= *(uint64_t *)tp_vec_at(&v, i) == i * 3;
	ok(good, "vec: elements kept across growth");
	is_int(tp_vec_reserve(&v, 5000), 0, "vec: reserve");
	ok(v.cap >= 5000 && v.n == 1000, "vec: reserve keeps the count");
	uint64_t *d = tp_vec_steal(&v);
	ok(d && d[999] == 2997 && !v.data && !v.n, "vec: steal");
	free(d);
	tp_vec_release(&v);
	ok(!v.data && !v.cap, "vec: release");
}

static int sum_vals(void *arg, uint64_t key, uint64_t *val)
{
	*(uint64_t *)arg += *val;
	return 0;
}

static void test_hash(void)
{
	struct tp_hash h = {0};
	bool good = true;
	uint64_t sum = 0, want = 0;

	ok(!tp_hash_get(&h, 0), "hash: empty table");
	for (uint64_t k = 0; k < 10000; k++)
		good &= !tp_hash_put(&h, k * 4096, k + 1);
	ok(good && h.n == 10000, "hash: 10000 inserts, key 0 included");
	for (uint64_t k = 0; k < 10000; k++) {
		uint64_t *v = tp_hash_get(&h, k * 4096);

		good &= v && *v == k + 1;
	}
	ok(good, "hash: every key found");
	ok(!tp_hash_get(&h, 1), "hash: absent key");
	is_int(tp_hash_put(&h, 4096, 77), 0, "hash: replace");
	ok(*tp_hash_get(&h, 4096) == 77 && h.n == 10000, "hash: replaced, count unchanged");
	for (uint64_t k = 0; k < 10000; k += 2)
		good &= tp_hash_del(&h, k * 4096);
	ok(good && h.n == 5000, "hash: half deleted");
	ok(!tp_hash_del(&h, 0), "hash: deleting twice");
	for (uint64_t k = 0; k < 10000; k++)
		good &= !tp_hash_get(&h, k * 4096) == !(k & 1);
	ok(good, "hash: the other half still there");
	/* churn: tombstones must not fill the table */
	for (uint64_t k = 0; k < 100000; k++) {
		good &= !tp_hash_put(&h, (1ULL << 40) + k, 1);
		good &= tp_hash_del(&h, (1ULL << 40) + k);
	}
	ok(good && h.n == 5000 && h.cap <= 65536, "hash: churn keeps the table small (%zu)", h.cap);
	tp_hash_foreach(&h, sum_vals, &sum);
	for (uint64_t k = 1; k < 10000; k += 2)
		want += k == 1 ? 77 : k + 1;
	is_int(sum, want, "hash: foreach visits every live value");
	tp_hash_release(&h);
	ok(!h.cap && !h.n, "hash: release");
}

static const char *const hash_names[] = {"zzz", "alpha", "beta"};

static bool hash_same(void *arg, uint64_t val, const void *s)
{
	(void)arg;
	return !strcmp(hash_names[val], s);
}

static void test_hash_str(void)
{
	struct tp_hash h = {0};
	uint64_t kb, kb2, ka, *v;

	ok(!tp_hash_get_str(&h, "beta", hash_same, NULL, &kb), "hash str: empty table");
	/* another string whose hash collides with "beta"'s: "zzz" put under beta's key */
	tp_hash_put(&h, kb, 0);
	ok(!tp_hash_get_str(&h, "beta", hash_same, NULL, &kb2) && kb2 != kb,
	   "hash str: a colliding entry is skipped, and the next key of the chain given");
	tp_hash_put(&h, kb2, 2);
	v = tp_hash_get_str(&h, "beta", hash_same, NULL, &kb);
	ok(v && *v == 2, "hash str: found past the collision");
	ok(!tp_hash_get_str(&h, "alpha", hash_same, NULL, &ka), "hash str: absent string");
	tp_hash_put(&h, ka, 1);
	v = tp_hash_get_str(&h, "alpha", hash_same, NULL, &ka);
	ok(v && *v == 1, "hash str: found");
	tp_hash_release(&h);
}

int main(void)
{
	test_maps_line();
	test_maps_foreach();
	test_paths();
	test_vec();
	test_hash();
	test_hash_str();
	return tap_done();
}
