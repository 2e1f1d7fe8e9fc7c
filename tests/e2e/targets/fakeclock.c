/* What libfaketime does, in small: libfakeclock.so, preloaded, wraps time() and finds the
 * real one with dlsym(RTLD_NEXT) at each call; the clock it shows starts on 2020-01-01.
 * Prints the day number (18262) a round.  "fakeclock": 3 rounds.  "fakeclock loop":
 * "ready PID", then a round per line of stdin. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char line[64];
	int i = 0;

	if (argc > 1 && !strcmp(argv[1], "loop")) {
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin)) {
			printf("round %d: day %ld\n", i++, (long)(time(NULL) / 86400));
			fflush(stdout);
		}
	} else {
		for (; i < 3; i++)
			printf("round %d: day %ld\n", i, (long)(time(NULL) / 86400));
	}
	return 0;
}
