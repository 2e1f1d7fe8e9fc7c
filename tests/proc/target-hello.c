/* Target of the proc tests: prints its CPU affinity, an environment variable and, if asked,
 * writes to an inherited fd; exits with argv[1] (7 by default). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *var = getenv("TP_TEST_VAR");
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return 99;
	printf("hello cpus=%d var=%s\n", CPU_COUNT(&set), var ? var : "-");
	fflush(stdout);
	if (argc > 2 && write(atoi(argv[2]), "kept", 4) != 4)
		return 98;
	return argc > 1 ? atoi(argv[1]) : 7;
}
