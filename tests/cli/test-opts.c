/* The option helpers every subcommand shares (src/cli/opts.c): -p PID, --duration, -o FILE
 * and a trace DIR refuse bad input with one line naming it and the exit status 2. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/opts.h"
#include "tap.h"

static char last[1024];
static int nerrors;

/* The CLI's printer (main.c), captured. */
void tp_cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(last, sizeof(last), "tracepad %s: ", cmd);

	va_start(ap, fmt);
	vsnprintf(last + n, sizeof(last) - (size_t)n, fmt, ap);
	va_end(ap);
	nerrors++;
}

static void refused(int status, const char *culprit, const char *what)
{
	ok(status == 2 && nerrors == 1 && strstr(last, culprit), "%s: status 2, one line naming %s",
	   what, culprit);
	if (status != 2 || nerrors != 1 || !strstr(last, culprit))
		printf("#   status %d, %d lines, last '%s'\n", status, nerrors, last);
	nerrors = 0;
	last[0] = 0;
}

int main(void)
{
	char dir[] = "/tmp/tp-test-opts-XXXXXX", path[4096];
	struct tp_cli_trace t;
	double secs = 0;
	pid_t pid = 0;
	FILE *f;

	is_int(tp_cli_parse_pid("x", "1234", &pid), 0, "-p 1234 accepted");
	is_int(pid, 1234, "-p 1234 is pid 1234");
	refused(tp_cli_parse_pid("x", "0", &pid), "'0'", "-p 0");
	refused(tp_cli_parse_pid("x", "-5", &pid), "'-5'", "-p -5");
	refused(tp_cli_parse_pid("x", "12ab", &pid), "'12ab'", "-p 12ab");
	refused(tp_cli_parse_pid("x", "", &pid), "''", "-p ''");
	refused(tp_cli_parse_pid("x", "99999999999", &pid), "'99999999999'", "-p beyond int");
	is_int(pid, 1234, "a refused -p leaves the pid alone");

	is_int(tp_cli_parse_duration("x", "2.5", &secs), 0, "--duration 2.5 accepted");
	ok(secs == 2.5, "--duration 2.5 is 2.5 s");
	refused(tp_cli_parse_duration("x", "0", &secs), "'0'", "--duration 0");
	refused(tp_cli_parse_duration("x", "soon", &secs), "'soon'", "--duration soon");
	refused(tp_cli_parse_duration("x", "", &secs), "''", "--duration ''");
	refused(tp_cli_parse_duration("x", "nan", &secs), "'nan'", "--duration nan");

	ok(tp_cli_out_open("x", NULL, stdout) == stdout, "no -o: the default stream");
	ok(tp_cli_out_open("x", "-", stderr) == stderr, "-o -: the default stream");
	ok(mkdtemp(dir) != NULL, "a scratch directory");
	snprintf(path, sizeof(path), "%s/missing/out", dir);
	ok(tp_cli_out_open("x", path, stdout) == NULL && nerrors == 1 && strstr(last, path),
	   "-o in a missing directory: NULL and one line naming it");
	nerrors = 0;
	f = tp_cli_out_open("x", "/dev/full", stdout);
	if (f) {
		fputs("more than nothing\n", f);
		is_int(tp_cli_out_close("x", f, "/dev/full", true), 1, "a write error is status 1");
		ok(nerrors == 1 && strstr(last, "/dev/full"), "... with one line naming the file");
		nerrors = 0;
	}

	/* a result replaces its file only when kept */
	snprintf(path, sizeof(path), "%s/result", dir);
	f = tp_cli_result_open("x", path, stdout);
	ok(f && access(path, F_OK) != 0, "a new result is not at its name while written");
	if (f) {
		fputs("first\n", f);
		is_int(tp_cli_out_close("x", f, path, false), 0, "a result dropped: status 0");
		ok(access(path, F_OK) != 0, "... and no file at all");
	}
	f = tp_cli_result_open("x", path, stdout);
	if (f) {
		fputs("kept\n", f);
		is_int(tp_cli_out_close("x", f, path, true), 0, "a result kept: status 0");
	}
	f = tp_cli_result_open("x", path, stdout);
	if (f) {
		char buf[16] = "";
		FILE *r;

		fputs("dropped\n", f);
		tp_cli_out_close("x", f, path, false);
		r = fopen(path, "r");
		ok(r && fgets(buf, sizeof(buf), r) && !strcmp(buf, "kept\n"),
		   "a dropped result leaves the earlier file as it was");
		if (r)
			fclose(r);
	}
	unlink(path);

	snprintf(path, sizeof(path), "%s/nothing-here", dir);
	refused(tp_cli_trace_open(&t, "dump", path, true), path, "trace DIR that does not exist");
	refused(tp_cli_trace_open(&t, "dump", dir, true), "no metadata",
		"trace DIR without metadata");
	snprintf(path, sizeof(path), "%s/file", dir);
	f = fopen(path, "w");
	if (f)
		fclose(f);
	refused(tp_cli_trace_open(&t, "dump", path, true), "directory", "trace DIR that is a file");
	unlink(path);
	rmdir(dir);
	return tap_done();
}
