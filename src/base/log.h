/* Logging for tracepad's libraries: they never print on their own, they hand messages to a
 * callback that the host (the CLI) installs, as libbpf does. */
#ifndef TP_BASE_LOG_H
#define TP_BASE_LOG_H

#include <stdarg.h>

enum tp_log_level { TP_LOG_ERROR, TP_LOG_WARN, TP_LOG_INFO, TP_LOG_DEBUG };

typedef void (*tp_log_fn)(enum tp_log_level level, const char *fmt, va_list ap);

/* Install the callback; NULL discards every message.  Returns the previous one. */
tp_log_fn tp_log_set_callback(tp_log_fn fn);
void tp_log(enum tp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define tp_err(...) tp_log(TP_LOG_ERROR, __VA_ARGS__)
#define tp_warn(...) tp_log(TP_LOG_WARN, __VA_ARGS__)
#define tp_info(...) tp_log(TP_LOG_INFO, __VA_ARGS__)
#define tp_dbg(...) tp_log(TP_LOG_DEBUG, __VA_ARGS__)

#endif
