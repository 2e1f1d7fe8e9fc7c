/* e2e target: one `rep movsb` of K bytes (asm.S's tp_repmovs), to check that a rep-prefixed
 * string instruction counts once per iteration, and once when K = 0.
 * Usage: repmovs K   (K <= 65536; --start tp_repmovs: 2 + max(K, 1)) */
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

#define MAXK 65536

static unsigned char src[MAXK], dst[MAXK];

int main(int argc, char **argv)
{
	unsigned long k, i, sum = 0;

	if (argc < 2 || (k = strtoul(argv[1], NULL, 0)) > MAXK) {
		fprintf(stderr, "usage: repmovs K (K <= %d)\n", MAXK);
		return 2;
	}
	for (i = 0; i < k; i++)
		src[i] = (unsigned char)(i * 7 + 1);
	tp_repmovs(dst, src, k);
	for (i = 0; i < k; i++)
		sum += dst[i] * (i + 1);
	printf("repmovs %lu sum %lu\n", k, sum);
	return 0;
}
