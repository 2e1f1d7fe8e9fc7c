/* bench/dbt's CPU-bound program of our own: indirect calls through a table and a switch
 * (an indirect jump) in a tight loop, the cases a code cache handles worst.
 * Usage: cpu [ROUNDS]   prints a hash of the work */
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv)
{
	static step_fn volatile table[4] = {mix, rot, twist, mix};
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 0) : 50000000, h = 1;

	for (unsigned long i = 0; i < n; i++) {
		h = table[(h >> 3) & 3](h + i);
		switch (h & 7) {
		case 0:
			h += 3;
			break;
		case 1:
			h ^= 5;
			break;
		case 2:
			h -= 1;
			break;
		case 3:
			h *= 3;
			break;
		case 4:
			h = rot(h);
			break;
		default:
			h++;
		}
	}
	printf("%lx\n", h);
	return 0;
}
