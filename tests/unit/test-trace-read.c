/* TAP tests of the trace readers' shared library (src/cli/trace-read.c): one-line errors on
 * opening what is not a trace, the .maps and .formats files (and their malformed lines), and
 * the text and JSON forms of timestamps, names and field values. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/opts.h"
#include "trace/read/trace-read.h"
#include "elf/symbols.h"
#include "tap.h"

/* The CLI's one-line error (src/cli/main.c): kept here to check what would be printed. */
static char last_error[512];
static int nr_errors;

void tp_cli_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(last_error, sizeof(last_error), "%s: ", cmd);

	va_start(ap, fmt);
	vsnprintf(last_error + n, sizeof(last_error) - n, fmt, ap);
	va_end(ap);
	nr_errors++;
}

static char tmpdir[] = "/tmp/test-trace-read-XXXXXX";

static const char *tmp_path(const char *name)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	return path;
}

static const char *write_file(const char *name, const char *text)
{
	const char *path = tmp_path(name);
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
	return path;
}

/* What @put writes for @fld, as a string (static buffer). */
static const char *put(void (*fn)(FILE *, const struct tp_trace_field *),
		       const struct tp_trace_field *fld)
{
	static char buf[256];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	fn(f, fld);
	fclose(f);
	return buf;
}

static const char *float_text(double v)
{
	static char buf[64];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	tp_trace_print_float(f, v);
	fclose(f);
	return buf;
}

static const char *name_text(const char *s, bool folded)
{
	static char buf[128];
	FILE *f = fmemopen(buf, sizeof(buf), "w");

	tp_trace_print_name(f, s, folded);
	fclose(f);
	return buf;
}

static void test_open_errors(void)
{
	struct tp_cli_trace t;
	char want[PATH_MAX + 64];

	nr_errors = 0;
	is_int(tp_cli_trace_open(&t, "dump", tmp_path("missing"), false), 2,
	       "a missing directory: exit status 2");
	snprintf(want, sizeof(want), "dump: %s: No such file or directory", tmp_path("missing"));
	is_str(last_error, want, "... and one line naming it");

	snprintf(want, sizeof(want), "dump: %s: not a trace (a trace is a directory)",
		 write_file("plain", "x\n"));
	is_int(tp_cli_trace_open(&t, "dump", tmp_path("plain"), false), 2, "a file: exit status 2");
	is_str(last_error, want, "... not a trace (a trace is a directory)");

	mkdir(tmp_path("empty"), 0700);
	snprintf(want, sizeof(want), "report: %s: not a trace (no metadata file)",
		 tmp_path("empty"));
	is_int(tp_cli_trace_open(&t, "report", tmp_path("empty"), true), 2,
	       "a directory without metadata: exit status 2");
	is_str(last_error, want, "... not a trace (no metadata file)");

	mkdir(tmp_path("bad"), 0700);
	write_file("bad/metadata", "/* CTF 1.8 */\nthis is not TSDL {\n");
	is_int(tp_cli_trace_open(&t, "export", tmp_path("bad"), true), 2,
	       "malformed metadata: exit status 2");
	snprintf(want, sizeof(want), "export: %s: ", tmp_path("bad"));
	ok(!strncmp(last_error, want, strlen(want)) && !strchr(last_error, '\n'),
	   "... one line naming the directory (%s)", last_error);
	is_int(nr_errors, 4, "one line per failure");
}

static struct tp_trace_bad_lines bad;

static void test_maps(void)
{
	char self[PATH_MAX], line[PATH_MAX + 128], buf[256];
	uintptr_t pc = (uintptr_t)&test_maps;
	struct tp_symtab *syms;
	FILE *maps, *out;
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = 0;
	/* This process's own executable mappings, as /proc/PID/maps lines. */
	maps = fopen("/proc/self/maps", "r");
	out = fopen(tmp_path("maps"), "w");
	while (maps && out && fgets(line, sizeof(line), maps))
		if (strstr(line, self))
			fputs(line, out);
	if (out) {
		fputs("# a comment\n\nnot a mapping\n", out);
		fclose(out);
	}
	if (maps)
		fclose(maps);

	nr_errors = 0;
	syms = tp_trace_maps_load(tmp_path("maps"), &bad);
	ok(syms != NULL, "maps: /proc/PID/maps lines of this program load");
	ok(bad.count == 1, "maps: the malformed line is counted (%lu)", bad.count);
	is_int(tp_trace_resolve_addr(syms, pc, buf, sizeof(buf)), 0,
	       "maps: an address of ours resolves");
	ok(strstr(buf, ":test_maps+0x0") != NULL && strchr(buf, '/') == NULL,
	   "maps: object:function+0x0, the object without its directory (%s)", buf);
	tp_trace_func_name(syms, pc, buf, sizeof(buf));
	is_str(buf, "test_maps", "func_name: the function alone at offset 0");
	tp_trace_func_name(syms, pc + 1, buf, sizeof(buf));
	is_str(buf, "test_maps+0x1", "func_name: function+0x1 inside it");
	is_int(tp_trace_resolve_addr(syms, 8, buf, sizeof(buf)), -ENOENT,
	       "resolve: -ENOENT outside every mapping");
	tp_trace_func_name(syms, 0x10, buf, sizeof(buf));
	is_str(buf, "0x10", "func_name: 0x.. outside every mapping");
	tp_symtab_free(syms);

	snprintf(line, sizeof(line), "1000 2000 0 %s\n", self);
	write_file("maps-short", line);
	syms = tp_trace_maps_load(tmp_path("maps-short"), &bad);
	ok(syms != NULL, "maps: the short form START END OFFSET PATH loads");
	tp_symtab_free(syms);

	ok(tp_trace_maps_load(tmp_path("no-such-maps"), &bad) == NULL && !bad.count,
	   "maps: a trace without .maps has no table, no bad line");
	write_file("maps-bad", "zz-yy r-xp\n2000 1000 0 /bin/sh\n");
	ok(tp_trace_maps_load(tmp_path("maps-bad"), &bad) == NULL && bad.count == 2 &&
	       bad.first == 1,
	   "maps: only malformed lines (and start >= end): no table, 2 bad lines from line 1");
	write_file("maps-nox", "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 /bin/sh\n");
	ok(tp_trace_maps_load(tmp_path("maps-nox"), &bad) == NULL && !bad.count,
	   "maps: mappings that are not executable are skipped");
	is_int(tp_trace_resolve_addr(NULL, pc, buf, sizeof(buf)), -ENOENT,
	       "resolve without a table");
}

static void test_formats(void)
{
	struct tp_trace_field fields[] = {
	    {.name = "fmt", .type = TP_TRACE_INT, .bits = 32, .u = 3},
	    {.name = "a0", .type = TP_TRACE_INT, .bits = 32, .is_signed = true, .s = -2},
	    {.name = "a1", .type = TP_TRACE_STRING, .str = "hi", .count = 2},
	    {.name = "a2", .type = TP_TRACE_FLOAT, .bits = 64, .d = 0.25},
	};
	struct tp_trace_event ev = {.name = "ev", .fields = fields, .nr_fields = 4};
	struct tp_trace_formats *fs;
	char buf[128];

	nr_errors = 0;
	write_file("formats", "# id class types format\n"
			      "3\tev\tisd\tx=%d s=%s f=%.2f\\ttab\\x21\n"
			      "4\tother\tB\tnot this one\n"
			      "3\tev\ti\ta second id 3\n"
			      "x\tev\ti\tnot a number\n"
			      "5\tev\tz\tbad type code\n"
			      "6\tev\ti\tbad escape \\q\n");
	fs = tp_trace_formats_load(tmp_path("formats"), &bad);
	ok(fs != NULL, "formats: the file loads");
	ok(bad.count == 4 && bad.first == 4,
	   "formats: 4 malformed lines counted, the first is line 4 (%lu, %lu)", bad.count,
	   bad.first);
	is_int(tp_trace_marker_text(fs, &ev, buf, sizeof(buf)),
	       (long long)strlen("x=-2 s=hi f=0.25\ttab!"), "marker_text: the length of the text");
	is_str(buf, "x=-2 s=hi f=0.25\ttab!", "marker_text: the format applied, escapes undone");
	fields[0].u = 4;
	is_int(tp_trace_marker_text(fs, &ev, buf, sizeof(buf)), -ENOENT,
	       "marker_text: -ENOENT when the class differs");
	fields[0].u = 9;
	is_int(tp_trace_marker_text(fs, &ev, buf, sizeof(buf)), -ENOENT,
	       "marker_text: -ENOENT for an unknown id");
	fields[0].u = 3;
	fields[2].type = TP_TRACE_INT;
	is_int(tp_trace_marker_text(fs, &ev, buf, sizeof(buf)), -ENOENT,
	       "marker_text: -ENOENT when a field's type does not fit");
	ev.nr_fields = 2;
	is_int(tp_trace_marker_text(fs, &ev, buf, sizeof(buf)), -ENOENT,
	       "marker_text: -ENOENT when a field is missing");
	is_int(tp_trace_marker_text(NULL, &ev, buf, sizeof(buf)), -ENOENT,
	       "marker_text: -ENOENT without formats");
	tp_trace_formats_free(fs);
	tp_trace_formats_free(NULL);

	write_file("formats-empty", "# nothing\n");
	ok(tp_trace_formats_load(tmp_path("formats-empty"), &bad) == NULL,
	   "formats: no format, no table");
}

static void test_text(void)
{
	char buf[64];

	ok(tp_trace_is_addr_field("pc") && tp_trace_is_addr_field("ip") &&
	       tp_trace_is_addr_field("addr") && tp_trace_is_addr_field("ret_addr"),
	   "address fields: pc, ip, addr, *_addr");
	ok(!tp_trace_is_addr_field("_addr") && !tp_trace_is_addr_field("address") &&
	       !tp_trace_is_addr_field("pcs"),
	   "not address fields: _addr, address, pcs");

	tp_trace_fmt_secs(0, buf, sizeof(buf));
	is_str(buf, "0.000000000", "fmt_secs 0");
	tp_trace_fmt_secs(1234567890123ull, buf, sizeof(buf));
	is_str(buf, "1234.567890123", "fmt_secs with nanoseconds");
	setenv("TZ", "UTC", 1);
	tzset();
	tp_trace_fmt_time(1700000000123456789ull, buf, sizeof(buf));
	is_str(buf, "2023-11-14 22:13:20.123456789", "fmt_time in UTC");
	tp_trace_fmt_time(1700000000000000001ull, buf, sizeof(buf));
	is_str(buf, "2023-11-14 22:13:20.000000001", "fmt_time: the same second again");
	tp_trace_fmt_time(0, buf, sizeof(buf));
	is_str(buf, "1970-01-01 00:00:00.000000000", "fmt_time: the epoch");

	is_str(float_text(0.5), "0.5", "float 0.5");
	is_str(float_text(500), "500", "float 500");
	is_str(float_text(1e100), "1e+100", "float 1e+100");
	is_str(float_text(0.1 + 0.2), "0.30000000000000004", "float: the shortest exact text");
	is_str(float_text(123456789012.0), "123456789012", "float: no exponent below 1e17");
	is_str(float_text(NAN), "nan", "float nan");
	is_str(float_text(-INFINITY), "-inf", "float -inf");

	is_str(name_text("a\x01"
			 "b\xff",
			 false),
	       "a\\x01b\\xff", "name: control and bad bytes");
	is_str(name_text("caf\xc3\xa9", false), "caf\xc3\xa9", "name: UTF-8 kept");
	is_str(name_text("a b;c\xff", true), "a_b_c?", "name, folded: separators and bad bytes");
}

static void test_values(void)
{
	static const uint8_t bytes[] = {0x00, 0xab, 0x10};
	static const uint8_t elems[] = {0xff, 0x01, 0x02};
	struct tp_trace_field f;

	f = (struct tp_trace_field){.type = TP_TRACE_INT, .bits = 32, .is_signed = true, .s = -5};
	is_str(put(tp_trace_print_value, &f), "-5", "int: signed");
	is_str(put(tp_trace_print_json, &f), "-5", "json int: signed");
	f = (struct tp_trace_field){
	    .type = TP_TRACE_INT, .bits = 8, .base = 16, .is_signed = true, .s = -1};
	is_str(put(tp_trace_print_value, &f), "0xff", "int: base 16 shows the field's bits");
	is_str(put(tp_trace_print_json, &f), "255", "json int: base 16 as unsigned bits");
	f = (struct tp_trace_field){.type = TP_TRACE_INT, .bits = 64, .u = UINT64_MAX};
	is_str(put(tp_trace_print_value, &f), "18446744073709551615", "int: unsigned 64 bits");
	f = (struct tp_trace_field){.type = TP_TRACE_FLOAT, .bits = 64, .d = NAN};
	is_str(put(tp_trace_print_json, &f), "null", "json float: nan is null");
	f.d = 2.5;
	is_str(put(tp_trace_print_json, &f), "2.5", "json float");
	f = (struct tp_trace_field){.type = TP_TRACE_STRING, .str = "a\"b\n", .count = 4};
	is_str(put(tp_trace_print_value, &f), "\"a\\\"b\\n\"", "string: quoted, C escapes");
	is_str(put(tp_trace_print_json, &f), "\"a\\\"b\\n\"", "json string");
	f = (struct tp_trace_field){.type = TP_TRACE_BYTES, .data = bytes, .count = 3};
	is_str(put(tp_trace_print_value, &f), "<00ab10>", "bytes as <hex>");
	is_str(put(tp_trace_print_json, &f), "\"00ab10\"", "json bytes as a hex string");
	f = (struct tp_trace_field){
	    .type = TP_TRACE_SEQ, .bits = 8, .is_signed = true, .data = elems, .count = 3};
	is_str(put(tp_trace_print_value, &f), "[-1, 1, 2]", "sequence: elements in their base");
	is_str(put(tp_trace_print_json, &f), "[-1, 1, 2]", "json sequence");
	f.base = 16;
	is_str(put(tp_trace_print_value, &f), "[0xff, 0x1, 0x2]", "sequence in base 16");
	f.count = 0;
	is_str(put(tp_trace_print_value, &f), "[]", "an empty sequence");
}

static void test_hidden(void)
{
	struct tp_trace_field fields[] = {
	    {.name = "data_length", .type = TP_TRACE_INT, .bits = 32},
	    {.name = "data", .type = TP_TRACE_SEQ, .bits = 8},
	    {.name = "other_length", .type = TP_TRACE_INT, .bits = 32},
	    {.name = "data", .type = TP_TRACE_SEQ, .bits = 8},
	    {.name = "x_length", .type = TP_TRACE_INT, .bits = 32},
	};
	struct tp_trace_event ev = {.name = "e", .fields = fields, .nr_fields = 5};

	ok(tp_trace_field_hidden(&ev, 0), "NAME_length before the sequence NAME is hidden");
	ok(!tp_trace_field_hidden(&ev, 1), "the sequence itself is shown");
	ok(!tp_trace_field_hidden(&ev, 2), "a length before another name is shown");
	ok(!tp_trace_field_hidden(&ev, 4), "a length as the last field is shown");
}

static void test_out(void)
{
	FILE *f;

	ok(tp_cli_out_open("dump", NULL, stdout) == stdout &&
	       tp_cli_out_open("dump", "-", stdout) == stdout,
	   "out_open: stdout for NULL and -");
	nr_errors = 0;
	ok(tp_cli_out_open("dump", tmp_path("no/such/dir"), stdout) == NULL && nr_errors == 1 &&
	       strstr(last_error, "dump: -o "),
	   "out_open: a one-line error when the file cannot be created");
	f = tp_cli_out_open("dump", tmp_path("out"), stdout);
	ok(f != NULL, "out_open: a file");
	if (f) {
		fputs("x\n", f);
		is_int(tp_cli_out_close("dump", f, tmp_path("out"), true), 0, "out_close: 0");
	}
	f = fopen("/dev/full", "w");
	if (f) {
		fputs("x\n", f);
		nr_errors = 0;
		is_int(tp_cli_out_close("dump", f, "/dev/full", true), 1,
		       "out_close: 1 on a write error");
		is_str(last_error, "dump: /dev/full: write error: No space left on device",
		       "... with one line saying so");
	} else {
		ok(1, "# SKIP no /dev/full");
		ok(1, "# SKIP no /dev/full");
	}
}

int main(void)
{
	char cmd[64 + sizeof(tmpdir)];

	if (!mkdtemp(tmpdir)) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	test_open_errors();
	test_maps();
	test_formats();
	test_text();
	test_values();
	test_hidden();
	test_out();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		printf("# could not remove %s\n", tmpdir);
	return tap_done();
}
