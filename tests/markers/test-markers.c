/* libtracepad end to end: enable by pointer and by name, typed formatting, the site bytes,
 * points in a dlopened library, TRACEPAD_MARKERS (argv[1] == "env"), and tampered sites. */
#include <tracepad/tracepoint.h>

#include "tap.h"

#include <dlfcn.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

TP_POINT(exe_point);
TP_POINT(exe_types);
TP_POINT(tamper_point);

__attribute__((noinline)) static void exe_site(int n, const char *s)
{
	TP_TRACE(exe_point, "exe n=%d s=%s", n, s);
}

__attribute__((noinline)) static void types_site(void)
{
	signed char i8 = -5;
	unsigned short u16 = 65535;
	int i32 = -1;
	unsigned long long u64 = 18446744073709551615ull;
	double d = 2.5;
	void *p = (void *)0x1234;
	const char *s = "str";
	char c = 'Z';
	TP_TRACE(exe_types, "%d %u %x %llu %.2f %p [%5s] %c %%", i8, u16, i32, u64, d, p, s, c);
}

TP_POINT(str_point);

__attribute__((noinline)) static void str_site(const char *a, const char *b)
{
	TP_TRACE(str_point, "a=%s b=%s", a, b);
}

/* Issue 14: a bad string pointer is recorded as an error marker, NULL as "(null)". */
static void run_bad_strings(void)
{
	str_site((const char *)16, NULL);
	str_site("ok", (const char *)-4096l);
}

__attribute__((noinline)) static void tamper_site(void)
{
	TP_TRACE(tamper_point, "tamper");
}

static char got[8][256];
static int ngot;

static void capture(const struct tp_site_desc *desc, const union tp_arg *args, void *ctx)
{
	if (ngot < 8) {
		int n = snprintf(got[ngot], sizeof(got[0]), "%s: ", desc->point->name);
		tp_markers_format(desc, args, got[ngot] + n, sizeof(got[0]) - (size_t)n);
		ngot++;
	}
}

struct find {
	const struct tp_point *point;
	uintptr_t addr, target;
	int n;
};

static int find_site(const struct tp_site *s, void *ctx)
{
	struct find *f = ctx;
	if (s->desc->point == f->point) {
		f->addr = s->addr;
		f->target = s->target;
		f->n++;
	}
	return 0;
}

static struct find site_of(const struct tp_point *p)
{
	struct find f = {p, 0, 0, 0};
	tp_sites_foreach(find_site, &f);
	return f;
}

static int is_nop5(uintptr_t a)
{
	static const uint8_t nop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
	return !memcmp((const void *)a, nop5, 5);
}

static int is_jmp_to(uintptr_t a, uintptr_t target)
{
	const uint8_t *b = (const uint8_t *)a;
	int32_t rel;
	memcpy(&rel, b + 1, 4);
	return b[0] == 0xe9 && a + 5 + (uintptr_t)(intptr_t)rel == target;
}

static int poke(uintptr_t a, const void *bytes, size_t n)
{
	int fd = open("/proc/self/mem", O_RDWR);
	ssize_t w = fd < 0 ? -1 : pwrite(fd, bytes, n, (off_t)a);
	if (fd >= 0)
		close(fd);
	return w == (ssize_t)n ? 0 : -1;
}

/* Run @fn with stderr sent to a file; return what it printed. */
static const char *stderr_of(void (*fn)(void))
{
	static char buf[1024];
	FILE *tmp = tmpfile();
	int saved = dup(2);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	fn();
	dup2(saved, 2);
	close(saved);
	size_t n = (size_t)pread(fileno(tmp), buf, sizeof(buf) - 1, 0);
	buf[n < sizeof(buf) ? n : 0] = 0;
	fclose(tmp);
	return buf;
}

static void run_exe_site(void)
{
	exe_site(1, "a");
}

static volatile sig_atomic_t user_traps;

static void user_trap(int sig)
{
	user_traps++;
}

static void *plugin;
static void (*plugin_run)(int);

static void run_plugin(void)
{
	plugin_run(7);
}

static void load_plugin(void)
{
	plugin = dlopen(PLUGIN_PATH, RTLD_NOW);
	ok(plugin != NULL, "dlopen plugin (%s)", plugin ? "" : dlerror());
	*(void **)&plugin_run = plugin ? dlsym(plugin, "plugin_run") : NULL;
	if (!plugin_run)
		exit(tap_done() | 1);
}

static int env_mode(void)
{
	/* TRACEPAD_MARKERS=exe_point,lib_* : enabled at start, and at dlopen. */
	is_int(tp_point_enabled(&exe_point), 1, "exe_point enabled from the environment");
	is_int(tp_point_enabled(&exe_types), 0, "exe_types not matched, disabled");
	ok(is_jmp_to(site_of(&exe_point).addr, site_of(&exe_point).target), "site is a jmp");
	is_str(stderr_of(run_exe_site), "exe_point: exe n=1 s=a\n", "default consumer line");
	is_str(stderr_of(types_site), "", "a disabled point prints nothing");
	load_plugin();
	is_str(stderr_of(run_plugin), "lib_point: lib 7 x\n", "dlopened point enabled at load");
	dlclose(plugin);
	return tap_done();
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "env"))
		return env_mode();

	struct find f = site_of(&exe_point);
	is_int(f.n, 1, "one site registered for exe_point");
	ok(is_nop5(f.addr), "disabled site is the NOP5");
	is_int(tp_point_enabled(&exe_point), 0, "disabled at start");

	tp_markers_set_consumer(capture, NULL);
	exe_site(1, "a");
	is_int(ngot, 0, "disabled site records nothing");

	is_int(tp_point_enable(&exe_point), 1, "enable by pointer patches one site");
	ok(is_jmp_to(f.addr, f.target), "enabled site is a jmp to its block");
	exe_site(42, "hello");
	is_int(ngot, 1, "one event");
	is_str(got[0], "exe_point: exe n=42 s=hello", "event text");
	is_int(tp_point_enable(&exe_point), 1, "enable again is harmless");
	is_int(tp_point_disable(&exe_point), 1, "disable by pointer");
	ok(is_nop5(f.addr), "disabled again: NOP5");
	exe_site(3, "b");
	is_int(ngot, 1, "no event after disable");

	is_int(tp_points_enable("exe_t*"), 1, "enable by glob matches one point");
	types_site();
	is_int(ngot, 2, "typed event");
	is_str(got[1], "exe_types: -5 65535 ffffffff 18446744073709551615 2.50 0x1234 [  str] Z %",
	       "every type formatted from its recorded type");
	is_int(tp_points_disable("exe_types"), 1, "disable by name");
	is_int(tp_points_enable("no_such_point"), -ENOENT, "unknown name: -ENOENT");
	is_int(tp_points_disable("no_such_*"), -ENOENT, "unknown glob: -ENOENT");
	ok(tp_point_find("exe_types") == &exe_types, "find by name");
	ok(tp_point_find("no_such_point") == NULL, "find unknown name: NULL");
	is_int(tp_point_enable(NULL), -EINVAL, "NULL point: -EINVAL");
	is_int(tp_points_enable("lib_*"), -ENOENT, "library points unknown before dlopen");

	load_plugin();
	is_int(tp_points_enable("lib_*"), 1, "library point after dlopen");
	is_int(tp_point_enabled(tp_point_find("lib_point")), 1, "query by name");
	plugin_run(7);
	is_int(ngot, 3, "library event");
	is_str(got[2], "lib_point: lib 7 x", "library event text");
	is_int(tp_points_disable("lib_point"), 1, "disable library point");
	plugin_run(8);
	is_int(ngot, 3, "disabled library site records nothing");
	dlclose(plugin);
	is_int(tp_points_enable("lib_*"), -ENOENT, "library points gone after dlclose");

	/* A site whose bytes are not what the runtime expects is refused and left alone. */
	struct find t = site_of(&tamper_point);
	static const uint8_t odd[5] = {0x0f, 0x1f, 0x44, 0x00, 0x01};
	static const uint8_t nop5[5] = {0x0f, 0x1f, 0x44, 0x00, 0x00};
	uint8_t now[5];
	ok(!poke(t.addr, odd, 5), "tamper with the site");
	is_int(tp_point_enable(&tamper_point), -EILSEQ, "tampered site refused with -EILSEQ");
	memcpy(now, (const void *)t.addr, 5);
	ok(!memcmp(now, odd, 5), "tampered bytes left untouched");
	ok(!poke(t.addr, nop5, 5), "restore the NOP5");
	is_int(tp_point_enable(&tamper_point), 1, "restored site enables");
	uint8_t jmp[5];
	memcpy(jmp, (const void *)t.addr, 5);
	jmp[4] ^= 0x10;
	ok(!poke(t.addr, jmp, 5), "tamper with the jmp");
	is_int(tp_point_disable(&tamper_point), -EILSEQ, "tampered jmp refused");
	memcpy(now, (const void *)t.addr, 5);
	ok(!memcmp(now, jmp, 5), "tampered jmp left untouched");
	jmp[4] ^= 0x10;
	poke(t.addr, jmp, 5);
	is_int(tp_point_disable(&tamper_point), 1, "restored jmp disables");
	tamper_site();
	is_int(ngot, 3, "tamper site never fired while disabled");

	/* The runtime's SIGTRAP handler passes traps that are not its own to the program's. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = user_trap;
	sigaction(SIGTRAP, &sa, NULL);
	is_int(tp_point_enable(&exe_types), 1, "patch with a program SIGTRAP handler installed");
	__asm__ volatile("int3");
	is_int(user_traps, 1, "a foreign int3 reaches the program's handler");
	is_int(tp_point_disable(&exe_types), 1, "disable again");

	/* Issue 14: a daemon closes every descriptor and opens its data file, which gets the
	 * lowest number; enabling a point must not write into that file. */
	struct stat st;
	uint8_t back[4];
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	int data = (int)syscall(SYS_memfd_create, "data", 0);
	ok(data == 3 && write(data, "data", 4) == 4, "a data file on the lowest descriptor");
	is_int(tp_point_enable(&exe_types), 1, "enable after the program closed every fd");
	ok(!fstat(data, &st) && st.st_size == 4, "its data file is untouched (%lld bytes)",
	   (long long)st.st_size);
	ok(pread(data, back, 4, 0) == 4 && !memcmp(back, "data", 4), "its bytes too");
	is_int(tp_point_disable(&exe_types), 1, "disable again");
	close(data);

	tp_markers_set_consumer(NULL, NULL);
	is_int(tp_point_enable(&str_point), 1, "enable the string point");
	is_str(stderr_of(run_bad_strings),
	       "str_point: a=(bad pointer) b=(null)\nstr_point: a=ok b=(bad pointer)\n",
	       "bad string pointers and NULL print markers, no crash");
	tp_point_disable(&str_point);
	tp_point_enable(&exe_point);
	is_str(stderr_of(run_exe_site), "exe_point: exe n=1 s=a\n", "default consumer: stderr");
	return tap_done();
}
