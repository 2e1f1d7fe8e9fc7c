/* calls-proto test target: functions with every kind of parameter and return value that
 * tracepad calls formats, and a few libc calls (a failing open, strlen, getenv, strtol). */
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum color { RED, GREEN, BLUE = 7 };
struct pt {
	int x, y;
};
struct big {
	long a[4];
};

/* strlen is an IFUNC: the pointer holds the implementation the program really calls. */
size_t (*volatile strlen_impl)(const char *) = strlen;

__attribute__((noipa)) double f_all(int i, unsigned long ul, const char *s, double d, enum color c,
				    void *p, bool b, struct pt pt, char ch, float fl)
{
	return d * 2 + i + pt.x + ch + fl + (s[0] == 'h') + (long)ul % 2 + c + (p != 0) + b;
}

__attribute__((noipa)) long f_mem(struct big b, const char *s, long l)
{
	return b.a[0] + s[0] + l * 2;
}

__attribute__((noipa)) struct big r_big(int x)
{
	struct big b = {{x, x, x, x}};

	return b;
}

__attribute__((noipa)) int f_strs(const char *a, const char *b, const char *c, char *null)
{
	return a[0] + b[0] + c[0] + (null != 0);
}

__attribute__((noipa)) const char *r_str(int n)
{
	return n ? "world" : "other";
}

__attribute__((noipa)) enum color r_enum(void)
{
	return GREEN;
}

__attribute__((noipa)) bool r_bool(int x)
{
	return x > 100;
}

__attribute__((noipa)) long r_neg(void)
{
	return -7;
}

static volatile int sink;

__attribute__((noipa)) void r_void(int x)
{
	sink = x;
}

__attribute__((noipa)) char *r_null(void)
{
	return NULL;
}

__attribute__((noipa)) int vsum(int n, ...)
{
	va_list ap;
	int s = 0;

	va_start(ap, n);
	while (n--)
		s += va_arg(ap, int);
	va_end(ap);
	return s;
}

int main(void)
{
	struct pt pt = {1, 2};
	struct big big = {{5, 6, 7, 8}};
	int fd;

	printf("%g\n", f_all(-42, 123456789012UL, "hello", 2.5, BLUE, (void *)0x1234, true, pt, 'x',
			     0.25f));
	printf("%ld\n", f_mem(big, "abc", -5));
	printf("%ld\n", r_big(3).a[0]);
	printf("%d\n", f_strs("line1\n\"quoted\"\ttab\\ and a long tail past 32", "\033[1m",
			      "\0011", NULL));
	printf("%s %d %d %ld\n", r_str(1), r_enum(), r_bool(5), r_neg());
	r_void(1);
	printf("%p %d\n", (void *)r_null(), vsum(3, 1, 2, 3));
	fd = open("/nonexistent/tracepad-proto", O_RDONLY);
	printf("%d %zu %s %d\n", fd, strlen_impl("abc"), getenv("TP_PROTO_VAR"),
	       (int)strtol("123", NULL, 10));
	return 0;
}
