/* Calls whose result depends on who calls them (glibc's dl* functions read their return
 * address): dlsym(RTLD_NEXT) from the program, directly and through a helper that
 * tail-calls it, dlvsym(RTLD_NEXT), and a dlopen that only the library's RUNPATH
 * ($ORIGIN/plugins) finds.  Prints one line a check; exits 0 when all hold.
 * "dlcaller": 3 rounds.  "dlcaller loop": "ready PID", then a round per line of stdin. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dlorigin.h"

static int bad;

/* At -O2 a jmp to dlsym: dlsym sees main's return address. */
__attribute__((noinline)) void *lookup_next(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

static void say(const char *what, int ok)
{
	printf("%s: %s\n", what, ok ? "ok" : "WRONG");
	bad |= !ok;
}

static void round_once(int i)
{
	void *libc_puts = dlsym(RTLD_DEFAULT, "puts");
	void *h;

	printf("round %d\n", i);
	say("dlsym(RTLD_NEXT, puts) is libc's", libc_puts && dlsym(RTLD_NEXT, "puts") == libc_puts);
	say("dlvsym(RTLD_NEXT, puts, GLIBC_2.2.5) is libc's",
	    dlvsym(RTLD_NEXT, "puts", "GLIBC_2.2.5") == libc_puts);
	say("tail-called dlsym(RTLD_NEXT, puts) is libc's", lookup_next("puts") == libc_puts);
	/* Not in the program's search path: only the library's RUNPATH has it. */
	h = dlopen("libdlplug.so", RTLD_NOW);
	say("the program's dlopen(libdlplug.so) fails", h == NULL);
	if (h)
		dlclose(h);
	say("the library's dlopen(libdlplug.so) through $ORIGIN/plugins gives 42",
	    dlorigin_plugin_value() == 42);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	char line[64];
	int i = 0;

	if (argc > 1 && !strcmp(argv[1], "loop")) {
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin))
			round_once(i++);
	} else {
		for (; i < 3; i++)
			round_once(i);
	}
	return bad;
}
