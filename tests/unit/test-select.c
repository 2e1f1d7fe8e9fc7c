/* TAP tests of the -e selection of `tracepad calls` (src/calls/select.c): globs over
 * OBJECT:FUNCTION, objects by path, file name, soname or name up to ".so", C++ names mangled
 * or demangled, '!' in order, the default selection, and the one-line errors of malformed
 * patterns. */
/* select.h uses size_t without including its header */
#include <errno.h>
#include <stddef.h>

#include "calls/select.h"
#include "tap.h"

#define LIBTP "/build/tests/calls/libtpcalls.so"
#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"
#define LIBCRYPTO "/usr/lib/x86_64-linux-gnu/libcrypto.so.3"
#define PROG "/build/tests/calls/calls-lazy"

static struct tp_select *sel(const char *a, const char *b)
{
	char *args[2] = {(char *)a, (char *)b};
	char err[256] = "";
	struct tp_select *s = tp_select_new(args, a ? (b ? 2 : 1) : 0, err, sizeof(err));

	if (!s)
		printf("# unexpected error: %s\n", err);
	return s;
}

/* The error of one -e argument, or "" when it parses. */
static const char *error_of(const char *arg)
{
	static char err[256];
	char *args[1] = {(char *)arg};
	struct tp_select *s;

	err[0] = 0;
	s = tp_select_new(args, 1, err, sizeof(err));
	if (s) {
		tp_select_free(s);
		return "";
	}
	return err;
}

static void test_default(void)
{
	struct tp_select *s = sel(NULL, NULL);

	ok(s != NULL, "no -e: parses");
	ok(tp_select_match(s, PROG, "main", NULL, true), "no -e: the default selection holds");
	ok(!tp_select_match(s, LIBC, "malloc", NULL, false), "no -e: nothing beyond the default");
	ok(tp_select_may_match(s, LIBC, true), "no -e: an object with defaults may match");
	ok(!tp_select_may_match(s, LIBC, false), "no -e: an object without defaults may not");
	tp_select_free(s);
	tp_select_free(NULL);
	ok(1, "tp_select_free(NULL) is a no-op");
}

static void test_objects(void)
{
	struct tp_select *s = sel("libtpcalls:tpc_add", NULL);

	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false),
	   "libtpcalls:tpc_add: the stem up to .so");
	ok(!tp_select_match(s, LIBTP, "tpc_word", NULL, false), "libtpcalls:tpc_add: not tpc_word");
	ok(!tp_select_match(s, LIBTP, "tpc_word", NULL, true),
	   "a first positive pattern replaces the default selection");
	ok(!tp_select_match(s, PROG, "tpc_add", NULL, false),
	   "libtpcalls:tpc_add: not in the program");
	ok(tp_select_may_match(s, LIBTP, false), "may_match: the named object");
	ok(!tp_select_may_match(s, LIBC, true), "may_match: no other object");
	tp_select_free(s);

	s = sel("libtpcalls.so:tpc_add", NULL);
	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false),
	   "libtpcalls.so:tpc_add: the file name");
	tp_select_free(s);

	s = sel(LIBTP ":tpc_add", NULL);
	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false), "the whole path as OBJECT");
	tp_select_free(s);

	s = sel("/build/*/libtpcalls.so:tpc_add", NULL);
	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false), "a glob over the whole path");
	ok(!tp_select_match(s, "/other/libtpcalls.so", "tpc_add", NULL, false),
	   "a path glob does not match another directory");
	tp_select_free(s);

	s = sel("libc:open", NULL);
	ok(tp_select_match(s, LIBC, "open", NULL, false), "libc matches libc.so.6");
	ok(!tp_select_match(s, LIBCRYPTO, "open", NULL, false),
	   "libc does not match libcrypto.so.3");
	ok(!tp_select_match(s, LIBC, "open64", NULL, false), "libc:open is not open64");
	tp_select_free(s);

	s = sel("calls-lazy:main", NULL);
	ok(tp_select_match(s, PROG, "main", NULL, false), "an executable by its file name");
	tp_select_free(s);

	is_str(tp_select_base("/a/b/libc.so.6"), "libc.so.6", "tp_select_base of a path");
	is_str(tp_select_base("prog"), "prog", "tp_select_base of a bare name");
}

static void test_globs(void)
{
	struct tp_select *s = sel("tpc_add", NULL);

	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false),
	   "no colon: the function in any object");
	ok(tp_select_match(s, PROG, "tpc_add", NULL, false), "no colon: also in the program");
	ok(tp_select_may_match(s, LIBC, false), "no colon: every object may match");
	tp_select_free(s);

	s = sel("libtp*:tpc_?dd", NULL);
	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false), "libtp*:tpc_?dd matches tpc_add");
	ok(!tp_select_match(s, LIBTP, "tpc_addd", NULL, false), "? is one character");
	tp_select_free(s);

	s = sel("tpc_[aw]*", NULL);
	ok(tp_select_match(s, LIBTP, "tpc_word", NULL, false), "[aw]: a bracket class");
	ok(!tp_select_match(s, LIBTP, "tpc_sleep", NULL, false), "[aw]: not s");
	tp_select_free(s);

	s = sel("tpc\\[x", NULL);
	ok(s != NULL, "an escaped '[' needs no ']'");
	ok(tp_select_match(s, LIBTP, "tpc[x", NULL, false), "an escaped '[' is literal");
	tp_select_free(s);

	s = sel("*", NULL);
	ok(tp_select_match(s, LIBC, "anything", NULL, false), "* selects every function");
	tp_select_free(s);
}

static void test_negation(void)
{
	struct tp_select *s = sel("libtpcalls:tpc_*,!libtpcalls:tpc_c", NULL);

	ok(tp_select_match(s, LIBTP, "tpc_b", NULL, false), "tpc_*,!tpc_c: tpc_b");
	ok(!tp_select_match(s, LIBTP, "tpc_c", NULL, false), "tpc_*,!tpc_c: not tpc_c");
	tp_select_free(s);

	s = sel("!libtpcalls:tpc_c", "libtpcalls:tpc_*");
	ok(tp_select_match(s, LIBTP, "tpc_c", NULL, false),
	   "in order: a later pattern selects again");
	ok(tp_select_match(s, PROG, "main", NULL, true),
	   "a first pattern that deselects starts from the default selection");
	ok(!tp_select_match(s, PROG, "main", NULL, false), "... which holds only the defaults");
	ok(tp_select_may_match(s, LIBC, true), "may_match: defaults kept");
	ok(tp_select_may_match(s, LIBTP, false), "may_match: the positive pattern's object");
	ok(!tp_select_may_match(s, LIBC, false), "may_match: not from a negated pattern");
	tp_select_free(s);

	s = sel("!*", NULL);
	ok(!tp_select_match(s, PROG, "main", NULL, true), "!*: nothing, not even the defaults");
	ok(!tp_select_may_match(s, LIBC, false), "!*: no object");
	tp_select_free(s);

	s = sel("!libc:*", NULL);
	ok(!tp_select_match(s, LIBC, "malloc", NULL, true), "!libc:*: libc's defaults removed");
	ok(tp_select_match(s, PROG, "main", NULL, true), "!libc:*: the program's kept");
	tp_select_free(s);
}

static void test_add(void)
{
	char err[256] = "";
	struct tp_select *s = sel("libtpcalls:*", NULL);

	is_int(tp_select_add(s, "!libtpcalls:tpc_word", err, sizeof(err)), 0,
	       "tp_select_add: a plugin's choice");
	ok(!tp_select_match(s, LIBTP, "tpc_word", NULL, false), "tp_select_add applies after -e");
	ok(tp_select_match(s, LIBTP, "tpc_add", NULL, false), "... and keeps the rest");
	is_int(tp_select_add(s, "a:b:c", err, sizeof(err)), -EINVAL, "tp_select_add: bad input");
	is_str(err, "bad pattern 'a:b:c': more than one ':'", "tp_select_add: its reason");
	tp_select_free(s);
}

static void test_errors(void)
{
	static const struct {
		const char *arg, *err;
	} bad[] = {
	    {"", "bad pattern '': empty pattern"},
	    {",tpc_add", "bad pattern ',tpc_add': empty pattern"},
	    {"tpc_add,", "bad pattern 'tpc_add,': empty pattern"},
	    {"tpc_add,,tpc_word", "bad pattern 'tpc_add,,tpc_word': empty pattern"},
	    {"!", "bad pattern '': empty pattern"},
	    {":", "bad pattern ':': empty object"},
	    {":tpc_add", "bad pattern ':': empty object"},
	    {"libtpcalls:", "bad pattern 'libtpcalls:': empty function"},
	    {"a:b:c", "bad pattern 'a:b:c': more than one ':'"},
	    {"[", "bad pattern '[': unbalanced '['"},
	    {"libtpcalls:tpc_[add", "bad pattern 'tpc_[add': unbalanced '['"},
	    {"tpc_add,[", "bad pattern '[': unbalanced '['"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		is_str(error_of(bad[i].arg), bad[i].err, "-e '%s' refused", bad[i].arg);
	ok(strstr(error_of("lib[tp:tpc_add"), "unbalanced '['") != NULL,
	   "-e 'lib[tp:tpc_add' refused: an unbalanced '[' in OBJECT");
	is_str(error_of("libtpcalls:tpc_[a]dd"), "", "a closed bracket is accepted");
	is_str(error_of("!libc:*,libc:open"), "", "a list of several patterns is accepted");
}

/* A library by its soname and its unversioned names; C++ names by their source spelling. */
static void test_soname_cxx(void)
{
	static const char *const names[] = {"libz",	   "libz.so",	     "libz.so.1",
					    "libz.so.1.2", "libz.so.1.2.13", "libz.so.[0-9]"};
	const char *libz = "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13";
	char arg[64];
	struct tp_select *s;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(arg, sizeof(arg), "%s:deflate", names[i]);
		s = sel(arg, NULL);
		ok(tp_select_match(s, libz, "deflate", NULL, false), "%s names libz.so.1.2.13",
		   arg);
		tp_select_free(s);
	}
	s = sel("libz.so.2:deflate,libz.s:deflate,libz.so.1.2.1:deflate", NULL);
	ok(!tp_select_match(s, libz, "deflate", NULL, false),
	   "libz.so.2, libz.s and libz.so.1.2.1 do not name libz.so.1.2.13");
	tp_select_free(s);

	s = sel("calls-cxx:ns::Widget::get*", NULL);
	ok(s != NULL, "OBJECT:FUNCTION with C++ '::' parses");
	ok(tp_select_match(s, "/b/calls-cxx", "_ZNK2ns6Widget3getEv", "ns::Widget::get() const",
			   false),
	   "ns::Widget::get* matches the demangled name");
	ok(!tp_select_match(s, "/b/calls-cxx", "_ZNK2ns6Widget3getEv", NULL, false),
	   "... not the mangled one alone");
	ok(!tp_select_match(s, "/b/other", "_ZNK2ns6Widget3getEv", "ns::Widget::get() const",
			    false),
	   "... only in the object named");
	tp_select_free(s);
	s = sel("ns::Widget::get*", NULL);
	ok(tp_select_match(s, LIBTP, "x", "ns::Widget::get(int)", false) &&
	       tp_select_may_match(s, LIBC, false),
	   "ns::Widget::get* without OBJECT: any object");
	tp_select_free(s);
	s = sel("_ZN2ns*", NULL);
	ok(tp_select_match(s, LIBTP, "_ZN2ns1fEi", "ns::f(int)", false),
	   "a mangled name still matches");
	tp_select_free(s);
	s = sel("calls-cxx:ns::sum(double, double),calls-cxx:ns::sum(int, *),!ns::sum(int, "
		"long),tpc_add",
		NULL);
	ok(s &&
	       tp_select_match(s, "/b/calls-cxx", "_ZN2ns3sumEdd", "ns::sum(double, double)",
			       false) &&
	       !tp_select_match(s, "/b/calls-cxx", "_ZN2ns3sumEil", "ns::sum(int, long)", false) &&
	       tp_select_match(s, LIBTP, "tpc_add", NULL, false),
	   "a ',' inside parentheses does not separate patterns");
	tp_select_free(s);
	is_str(error_of("a:ns::f:b"), "bad pattern 'a:ns::f:b': more than one ':'",
	       "a second single ':' after OBJECT is refused");
}

int main(void)
{
	test_default();
	test_objects();
	test_globs();
	test_negation();
	test_add();
	test_errors();
	test_soname_cxx();
	return tap_done();
}
