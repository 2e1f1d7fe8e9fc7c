/* bench/dbt's CPU-bound program of our own, a mix of what programs do: each round runs a
 * small bytecode interpreter (a switch: an indirect jump), calls through a table of
 * functions (indirect calls), hashes a buffer (a straight loop), sorts a few numbers
 * (branches that depend on data) and recurses (calls and returns).  `cpu indirect`
 * runs only the table and the switch in a tight loop, the case a code cache handles worst.
 * Usage: cpu [ROUNDS [indirect]]   prints a hash of the work */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long (*step_fn)(unsigned long);

static unsigned long mix(unsigned long x)
{
	return x * 2654435761u ^ (x >> 7);
}

static unsigned long rot(unsigned long x)
{
	return (x << 13) | (x >> 51);
}

static unsigned long twist(unsigned long x)
{
	return x ^ (x << 5) ^ 0x9e3779b97f4a7c15ul;
}

static step_fn volatile table[4] = {mix, rot, twist, mix};

static unsigned long dispatch(unsigned long h, unsigned long i)
{
	h = table[(h >> 3) & 3](h + i);
	switch (h & 7) {
	case 0:
		return h + 3;
	case 1:
		return h ^ 5;
	case 2:
		return h - 1;
	case 3:
		return h * 3;
	case 4:
		return rot(h);
	default:
		return h + 1;
	}
}

/* A stack machine's program: push, add, mul, xor, dup, swap, shift, loop. */
static unsigned long interp(const unsigned char *code, unsigned long seed)
{
	unsigned long st[8] = {seed, seed >> 3}, n = 2;
	int loops = 3;

	for (const unsigned char *pc = code;; pc++) {
		switch (*pc) {
		case 0:
			st[n++ & 7] = pc[1];
			pc++;
			break;
		case 1:
			n--;
			st[(n - 1) & 7] += st[n & 7];
			break;
		case 2:
			n--;
			st[(n - 1) & 7] *= st[n & 7] | 1;
			break;
		case 3:
			n--;
			st[(n - 1) & 7] ^= st[n & 7];
			break;
		case 4:
			st[n & 7] = st[(n - 1) & 7];
			n++;
			break;
		case 5: {
			unsigned long t = st[(n - 1) & 7];

			st[(n - 1) & 7] = st[(n - 2) & 7];
			st[(n - 2) & 7] = t;
			break;
		}
		case 6:
			st[(n - 1) & 7] >>= 1;
			break;
		case 7:
			if (--loops > 0)
				pc = code - 1;
			break;
		default:
			return st[(n - 1) & 7];
		}
	}
}

static unsigned long fnv(const unsigned char *p, size_t n, unsigned long h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ul;
	return h;
}

static void sort8(unsigned *a)
{
	for (int i = 1; i < 8; i++) {
		unsigned v = a[i];
		int j = i - 1;

		while (j >= 0 && a[j] > v) {
			a[j + 1] = a[j];
			j--;
		}
		a[j + 1] = v;
	}
}

static unsigned long depth(unsigned long x, int d)
{
	return d ? depth(x * 31 + (unsigned long)d, d - 1) ^ (x >> d) : x;
}

int main(int argc, char **argv)
{
	static const unsigned char code[] = {0, 7, 1, 4, 2, 0, 3, 3, 5, 6, 1, 7, 255};
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 5000000, h = 1;
	int indirect = argc > 2 && !strcmp(argv[2], "indirect");
	unsigned char buf[32];
	unsigned a[8];

	for (int k = 0; k < 32; k++)
		buf[k] = (unsigned char)(k * 37 + 11);
	if (indirect) {
		for (unsigned long i = 0; i < n; i++)
			h = dispatch(h, i);
		printf("%lx\n", h);
		return 0;
	}
	for (unsigned long i = 0; i < n; i++) {
		h = dispatch(h, i);
		h = interp(code, h);
		buf[i & 31] ^= (unsigned char)h;
		h = fnv(buf, sizeof(buf), h);
		for (int k = 0; k < 8; k++)
			a[k] = (unsigned)(h >> (k * 4)) & 0xffff;
		sort8(a);
		h += a[0] + a[7];
		h = depth(h, 4);
	}
	printf("%lx\n", h);
	return 0;
}
