/* printf formatting of recorded arguments: a marker's format string applied to the typed
 * values of one event, the same text whether libtracepad prints the event at once or
 * tracepad dump prints it from a trace.  No allocation; snprintf only. */
#include "trace/trace.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct out {
	char *buf;
	size_t len, pos;
};

static void out_add(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(struct out *o, const char *fmt, ...)
{
	va_list ap;
	size_t room = o->pos < o->len ? o->len - o->pos : 0;

	va_start(ap, fmt);
	int n = vsnprintf(room ? o->buf + o->pos : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->pos += (size_t)n;
}

static bool is_signed_code(char t)
{
	return t == 'b' || t == 'h' || t == 'i' || t == 'l';
}

/* A double under an integer conversion (a format that does not match its argument, which
 * C leaves undefined): truncated toward zero, saturated at the limits, NaN as 0. */
static long long double_int(double d)
{
	if (d != d)
		return 0;
	if (d >= 0x1p63)
		return LLONG_MAX;
	if (d < -0x1p63)
		return LLONG_MIN;
	return (long long)d;
}

/* The value of an integer argument as its own C type would print with %u/%x: a negative
 * int is 32 bits of ones, not 64. */
static unsigned long long as_unsigned(char t, union tp_trace_value a)
{
	switch (t) {
	case 'b':
		return (uint8_t)a.i;
	case 'h':
		return (uint16_t)a.i;
	case 'i':
		return (uint32_t)a.i;
	case 'd':
		return (unsigned long long)double_int(a.d);
	default:
		return a.u;
	}
}

static long long as_signed(char t, union tp_trace_value a)
{
	if (t == 'd')
		return double_int(a.d);
	return is_signed_code(t) ? a.i : (long long)a.u;
}

int tp_trace_format(const char *fmt, const char *types, const union tp_trace_value *args,
		    size_t nargs, char *buf, size_t len)
{
	struct out o = {buf, len, 0};
	const char *f = fmt ? fmt : "";
	size_t ai = 0;

	if (len)
		buf[0] = 0;
	while (*f) {
		if (*f != '%') {
			const char *pct = strchr(f, '%');
			size_t n = pct ? (size_t)(pct - f) : strlen(f);
			out_add(&o, "%.*s", (int)(n > INT_MAX ? INT_MAX : n), f);
			f += n;
			continue;
		}
		if (f[1] == '%') {
			out_add(&o, "%%");
			f += 2;
			continue;
		}
		/* Keep flags, width and precision; drop length modifiers (the type is known). */
		char spec[32];
		size_t sl = 0;
		const char *p = f + 1;
		spec[sl++] = '%';
		while (*p && strchr("-+ #0123456789.", *p) && sl < 20)
			spec[sl++] = *p++;
		while (*p && strchr("hlLqjzt", *p))
			p++;
		char conv = *p;
		if (!conv)
			break;
		f = p + 1;
		if (ai >= nargs || !types[ai]) {
			out_add(&o, "<?>");
			continue;
		}
		char t = types[ai];
		union tp_trace_value a = args[ai++];
		switch (conv) {
		case 'd':
		case 'i':
			memcpy(spec + sl, "lld", 4);
			out_add(&o, spec, as_signed(t, a));
			break;
		case 'u':
		case 'x':
		case 'X':
		case 'o':
			spec[sl] = 'l';
			spec[sl + 1] = 'l';
			spec[sl + 2] = conv;
			spec[sl + 3] = 0;
			out_add(&o, spec, as_unsigned(t, a));
			break;
		case 'c':
			memcpy(spec + sl, "c", 2);
			out_add(&o, spec, (int)(unsigned char)as_unsigned(t, a));
			break;
		case 's':
			memcpy(spec + sl, "s", 2);
			if (t == 's')
				out_add(&o, spec, a.s ? a.s : "(null)");
			else
				out_add(&o, "<not a string>");
			break;
		case 'p':
			memcpy(spec + sl, "p", 2);
			out_add(&o, spec,
				t == 'p' || t == 's' ? (void *)(uintptr_t)a.u : (void *)0);
			break;
		case 'f':
		case 'F':
		case 'e':
		case 'E':
		case 'g':
		case 'G':
		case 'a':
		case 'A':
			spec[sl] = conv;
			spec[sl + 1] = 0;
			out_add(&o, spec,
				t == 'd'	    ? a.d
				: is_signed_code(t) ? (double)a.i
						    : (double)a.u);
			break;
		default:
			out_add(&o, "<bad %%%c>", conv);
			break;
		}
	}
	if (o.pos > (size_t)INT_MAX)
		return -EOVERFLOW;
	return (int)o.pos;
}
