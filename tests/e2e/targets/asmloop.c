/* e2e target: runs the hand-counted loop of asm.S so tests can check exact counts.
 * Usage: asmloop N [plain|twice|step|step-c]
 *   plain   tp_loop(N) once                       (--start tp_loop: 2N + 4)
 *   twice   tp_loop(N) then tp_loop(N + 7)        (--start tp_loop counts the first call only)
 *   step    tp_step_loop(N)                       (the tp_step_* region: 2N + 10)
 *   step-c  tp_step_begin(); tp_loop(N); tp_step_end();   (compiler-made region) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tracepad/step.h>

#include "asm.h"

int main(int argc, char **argv)
{
	unsigned long n;
	const char *mode = argc > 2 ? argv[2] : "plain";

	if (argc < 2) {
		fprintf(stderr, "usage: asmloop N [plain|twice|step|step-c]\n");
		return 2;
	}
	n = strtoul(argv[1], NULL, 0);
	if (!strcmp(mode, "plain")) {
		tp_loop(n);
	} else if (!strcmp(mode, "twice")) {
		tp_loop(n);
		tp_loop(n + 7);
	} else if (!strcmp(mode, "step")) {
		tp_step_loop(n);
	} else if (!strcmp(mode, "step-c")) {
		tp_step_begin();
		tp_loop(n);
		tp_step_end();
	} else {
		fprintf(stderr, "asmloop: unknown mode %s\n", mode);
		return 2;
	}
	printf("asmloop %s %lu\n", mode, n);
	return 0;
}
