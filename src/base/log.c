/* The log callback shared by tracepad's internal libraries. */
#include "base/log.h"

#include <stddef.h>

static tp_log_fn log_fn;

tp_log_fn tp_log_set_callback(tp_log_fn fn)
{
	tp_log_fn old = log_fn;

	log_fn = fn;
	return old;
}

void tp_log(enum tp_log_level level, const char *fmt, ...)
{
	va_list ap;

	if (!log_fn)
		return;
	va_start(ap, fmt);
	log_fn(level, fmt, ap);
	va_end(ap);
}
