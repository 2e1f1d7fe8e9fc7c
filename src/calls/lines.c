/* `tracepad calls`: the output.  Lines wait, ordered by the time of what they show, until no
 * thread can still report anything earlier; the process events (exec, exit, death by a
 * signal, signals delivered) become lines, JSON objects of the summary and trace events. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "base/text.h"
#include "base/vec.h"
#include "calls/engine.h"

/* How often every thread's returns are read when nothing else reads them. */
#define TICK_NS 50000000ULL
/* Lines held at most: past this many, the oldest go out before their turn. */
#define HELD_MAX (1u << 18)
/* Nesting levels shown by indentation; deeper lines say their depth as {N} instead (a
 * recursion 10,000 deep would otherwise write 20 KB of spaces a line). */
#define INDENT_MAX 50

struct line {
	uint64_t key, seq; /* the TSC of what it shows; ties in the order they came */
	char *text;	   /* a heap line's own copy; NULL: the run's, at off in its text */
	size_t len, off;
};

struct calls_lines {
	struct tp_vec heap; /* struct line, a binary min-heap on (key, seq) */
	/* Lines that came in time order (nearly all: the agent engine's drain merges its
	 * threads' records by time) wait in a queue instead, their text one after another in
	 * one buffer, and go out by one fwrite: a heap of a million lines and a malloc and an
	 * fwrite each were most of a line's cost. */
	struct tp_vec run; /* struct line, from run_head on */
	size_t run_head;
	char *rtext; /* their text, from rtext_head on */
	size_t rtext_len, rtext_cap, rtext_head;
	uint64_t seq;
	uint64_t horizon;  /* the start (TSC) of the previous reading of every thread's returns */
	uint64_t next_due; /* when to read them again */
	char *buf;	   /* the line being built */
	size_t len, cap;
	char **events; /* -c --json: the process events as JSON objects */
	int nevents, cap_events;
	uint64_t last_ns; /* -r: the time of the line written last */
};

static struct calls_lines *lines_of(struct session *s)
{
	if (!s->lines) {
		s->lines = calloc(1, sizeof(*s->lines));
		if (!s->lines) {
			s->err = -ENOMEM;
			return NULL;
		}
		s->lines->heap = TP_VEC_INIT(sizeof(struct line));
		s->lines->run = TP_VEC_INIT(sizeof(struct line));
	}
	return s->lines;
}

static bool before(const struct line *a, const struct line *b)
{
	return a->key < b->key || (a->key == b->key && a->seq < b->seq);
}

static void heap_swap(struct line *a, struct line *b)
{
	struct line t = *a;

	*a = *b;
	*b = t;
}

static int heap_push(struct calls_lines *L, const struct line *ln)
{
	struct line *v;
	size_t i;

	if (!tp_vec_push(&L->heap))
		return -ENOMEM;
	v = L->heap.data;
	i = L->heap.n - 1;
	v[i] = *ln;
	while (i && before(&v[i], &v[(i - 1) / 2])) {
		heap_swap(&v[i], &v[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	return 0;
}

/* -t, -tt, -ttt (the time of day, then with microseconds, then seconds since the epoch) and
 * -r (seconds since the previous line), as ltrace writes them, for a line as of @key. */
static void put_stamps(struct session *s, struct calls_lines *L, uint64_t key, FILE *out)
{
	uint64_t ns = tp_calls_tsc_ns(s, key);

	if (s->o->timestamps) {
		uint64_t wall = (uint64_t)((int64_t)ns + s->wall_off);
		time_t sec = (time_t)(wall / 1000000000u);
		unsigned us = (unsigned)(wall / 1000 % 1000000);
		struct tm tm;
		char b[32];

		if (s->o->timestamps == 3) {
			fprintf(out, "%lld.%06u ", (long long)sec, us);
		} else {
			localtime_r(&sec, &tm);
			strftime(b, sizeof(b), "%H:%M:%S", &tm);
			if (s->o->timestamps == 2)
				fprintf(out, "%s.%06u ", b, us);
			else
				fprintf(out, "%s ", b);
		}
	}
	if (s->o->relative) {
		uint64_t d = L->last_ns && ns > L->last_ns ? ns - L->last_ns : 0;

		fprintf(out, "%3" PRIu64 ".%06u ", d / 1000000000u, (unsigned)(d / 1000 % 1000000));
	}
	if (ns > L->last_ns)
		L->last_ns = ns;
}

/* Write a line: "[TID] ", the time stamps asked for, the rest. */
static void line_write(struct session *s, struct calls_lines *L, const char *text, size_t len,
		       uint64_t key)
{
	FILE *out = s->o->out;
	const char *sp = memchr(text, ' ', len);

	if ((s->o->timestamps || s->o->relative) && sp) {
		fwrite(text, 1, (size_t)(sp + 1 - text), out);
		put_stamps(s, L, key, out);
		len -= (size_t)(sp + 1 - text);
		text = sp + 1;
	}
	fwrite(text, 1, len, out);
}

/* Write the earliest line and take it out. */
static void heap_pop_write(struct session *s, struct calls_lines *L)
{
	struct line *v = L->heap.data;
	size_t n = --L->heap.n, i = 0;

	line_write(s, L, v[0].text, v[0].len, v[0].key);
	free(v[0].text);
	v[0] = v[n];
	for (;;) {
		size_t l = 2 * i + 1, m = i;

		if (l < n && before(&v[l], &v[m]))
			m = l;
		if (l + 1 < n && before(&v[l + 1], &v[m]))
			m = l + 1;
		if (m == i)
			break;
		heap_swap(&v[i], &v[m]);
		i = m;
	}
}

static size_t held(const struct calls_lines *L)
{
	return L->heap.n + L->run.n - L->run_head;
}

/* The run's first line, or NULL. */
static struct line *run_first(struct calls_lines *L)
{
	return L->run_head < L->run.n ? tp_vec_at(&L->run, L->run_head) : NULL;
}

/* Write the run's lines from its head while they come before @key (0: no limit) and before
 * the heap's first: by one fwrite when no line needs time stamps. */
static void run_write(struct session *s, struct calls_lines *L, uint64_t key, size_t max)
{
	struct line *v = L->run.data, *h = L->heap.n ? L->heap.data : NULL;
	size_t i = L->run_head, end = L->run_head;

	while (end < L->run.n && end - i < max && (!key || v[end].key < key) &&
	       (!h || before(&v[end], h)))
		end++;
	if (end == i)
		return;
	if (s->o->timestamps || s->o->relative) {
		for (; i < end; i++)
			line_write(s, L, L->rtext + v[i].off, v[i].len, v[i].key);
	} else {
		fwrite(L->rtext + v[i].off, 1, v[end - 1].off + v[end - 1].len - v[i].off,
		       s->o->out);
	}
	L->run_head = end;
	L->rtext_head = end < L->run.n ? v[end].off : L->rtext_len;
	/* room back once half of it is written (amortised: each line moves once at most) */
	if (L->run_head == L->run.n) {
		L->run.n = L->run_head = 0;
		L->rtext_len = L->rtext_head = 0;
	} else if (L->run_head > L->run.n / 2 && L->rtext_head > L->rtext_len / 2) {
		size_t n = L->run.n - L->run_head;

		memmove(v, v + L->run_head, n * sizeof(*v));
		for (size_t k = 0; k < n; k++)
			v[k].off -= L->rtext_head;
		memmove(L->rtext, L->rtext + L->rtext_head, L->rtext_len - L->rtext_head);
		L->rtext_len -= L->rtext_head;
		L->rtext_head = 0;
		L->run.n = n;
		L->run_head = 0;
	}
}

/* Write the earliest held line, of the run or the heap. */
static void pop_write(struct session *s, struct calls_lines *L)
{
	struct line *r = run_first(L);

	if (r && (!L->heap.n || before(r, L->heap.data)))
		run_write(s, L, 0, 1);
	else if (L->heap.n)
		heap_pop_write(s, L);
}

/* Hold the line being built (as of @ln's key): at the run's end when it comes after it. */
static int hold(struct calls_lines *L, struct line *ln)
{
	struct line *last = L->run.n > L->run_head ? tp_vec_at(&L->run, L->run.n - 1) : NULL;

	if (!last || !before(ln, last)) {
		struct line *v;

		if (L->rtext_len + ln->len > L->rtext_cap) {
			size_t cap = (L->rtext_len + ln->len) * 2;
			char *b = realloc(L->rtext, cap < 65536 ? 65536 : cap);

			if (!b)
				return -ENOMEM;
			L->rtext = b;
			L->rtext_cap = cap < 65536 ? 65536 : cap;
		}
		/* a slot of the room there is, not cleared to be overwritten (tp_vec_push) */
		if (L->run.n < L->run.cap)
			v = (struct line *)L->run.data + L->run.n++;
		else if (!(v = tp_vec_push(&L->run)))
			return -ENOMEM;
		memcpy(L->rtext + L->rtext_len, L->buf, ln->len);
		ln->off = L->rtext_len;
		L->rtext_len += ln->len;
		*v = *ln;
		return 0;
	}
	if (!(ln->text = malloc(ln->len ? ln->len : 1)) || heap_push(L, ln)) {
		free(ln->text);
		return -ENOMEM;
	}
	memcpy(ln->text, L->buf, ln->len);
	return 0;
}

/* Room for @n more bytes and a NUL in the line being built; false when there is none
 * (s->err says why). */
static bool grow(struct session *s, struct calls_lines *L, size_t n)
{
	size_t cap = (L->len + n + 1) * 2;
	char *b;

	if (L->buf && L->len + n < L->cap)
		return true;
	cap = cap < 1024 ? 1024 : cap;
	b = realloc(L->buf, cap);
	if (!b) {
		s->err = -ENOMEM;
		return false;
	}
	L->buf = b;
	L->cap = cap;
	return true;
}

/* Append to the line being built; on failure the line is cut (s->err says why). */
static void __attribute__((format(printf, 3, 4)))
add(struct session *s, struct calls_lines *L, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(L->buf ? L->buf + L->len : NULL, L->buf ? L->cap - L->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (!L->buf || L->len + (size_t)n >= L->cap) {
		if (!grow(s, L, (size_t)n))
			return;
		va_start(ap, fmt);
		vsnprintf(L->buf + L->len, L->cap - L->len, fmt, ap);
		va_end(ap);
	}
	L->len += (size_t)n;
}

/* The line built so far, of thread @t (NULL: of no thread), as of @key: written now when
 * nothing can come before it, else held. */
static void emit(struct session *s, struct calls_lines *L, struct thread *t, uint64_t key)
{
	struct line ln = {.key = key, .seq = L->seq++, .len = L->len};

	/* A thread's lines stay in the order they came (an unwound call's line is as of the
	 * stop that finds it, which may be later than a return read at the same stop). */
	if (t) {
		if (ln.key < t->line_tsc)
			ln.key = t->line_tsc;
		t->line_tsc = ln.key;
	}
	if (!s->async) {
		/* Every return stops: the lines come in the order of the stops already. */
		line_write(s, L, L->buf, L->len, ln.key);
	} else if (hold(L, &ln)) {
		s->err = -ENOMEM;
	} else if (held(L) > HELD_MAX) {
		pop_write(s, L);
	}
	L->len = 0;
}

/* Write @x in decimal at @p, @min digits at least (zeros before): the end. */
static char *put_u64(char *p, uint64_t x, int min)
{
	char num[24];
	int i = sizeof(num);

	do
		num[--i] = (char)('0' + x % 10);
	while ((x /= 10) || (int)sizeof(num) - i < min);
	memcpy(p, num + i, sizeof(num) - (size_t)i);
	return p + sizeof(num) - i;
}

/* strlen(@s), measured once into *@memo (the length + 1; 0: not yet). */
static size_t len_of(const char *s, uint32_t *memo)
{
	if (!*memo)
		*memo = (uint32_t)strlen(s) + 1;
	return *memo - 1;
}

/* Start the line of @rc's call at nesting @depth: "[TID] INDENT{DEEP} OBJECT:FUNCTION(ARGS)",
 * without stdio, with room for @more bytes after it (false when there is none: s->err says
 * why).  Its parts measured once and copied into room made once: a piece at a time they
 * were most of a line's cost. */
static bool call_start(struct session *s, struct calls_lines *L, struct thread *t,
		       const struct rec *rc, unsigned depth, size_t more)
{
	static const char spaces[2 * INDENT_MAX + 1] = {[0 ... 2 * INDENT_MAX - 1] = ' '};
	size_t indent = 2 * (depth < INDENT_MAX ? depth : INDENT_MAX);
	size_t lobj = len_of(rc->f->obj->base, &rc->f->obj->base_len);
	size_t lname = len_of(rc->f->name, &rc->f->name_len), largs = strlen(rc->args);
	char *p;

	/* "[" TID "] " and "{DEPTH} ": 12 and 13 bytes at most */
	if (!grow(s, L, 12 + indent + 13 + lobj + 1 + lname + 1 + largs + 1 + more))
		return false;
	p = L->buf + L->len;
	*p++ = '[';
	p = put_u64(p, (unsigned)t->tid, 1);
	*p++ = ']';
	*p++ = ' ';
	memcpy(p, spaces, indent);
	p += indent;
	if (depth > INDENT_MAX) {
		*p++ = '{';
		p = put_u64(p, depth, 1);
		*p++ = '}';
		*p++ = ' ';
	}
	memcpy(p, rc->f->obj->base, lobj);
	p += lobj;
	*p++ = ':';
	memcpy(p, rc->f->name, lname);
	p += lname;
	*p++ = '(';
	memcpy(p, rc->args, largs);
	p += largs;
	*p++ = ')';
	L->len = (size_t)(p - L->buf);
	return true;
}

/* The rest of @rc's line (its backtrace's lines), and the line held or written. */
static void call_end(struct session *s, struct calls_lines *L, struct thread *t,
		     const struct rec *rc, unsigned depth)
{
	int indent = 2 * (int)(depth < INDENT_MAX ? depth : INDENT_MAX);

	for (int i = 1; i < rc->npcs; i++) {
		char buf[512];

		tp_calls_symbolize(s, t->pid, rc->pcs[i], true, buf, sizeof(buf));
		add(s, L, "[%d] %*s    at %s\n", t->tid, indent, "", buf);
	}
	/* A return read from its stub is as of the stub's time stamp; other lines, of the
	 * stop being handled.  Raw TSC readings: converting them to the clock (the stubs
	 * have no other) can be off by as long as tracepad was preempted in the conversion. */
	emit(s, L, t, s->ret_tsc ? s->ret_tsc : __rdtsc());
}

void tp_calls_line_call(struct session *s, struct thread *t, const struct rec *rc, unsigned depth,
			const char *tail)
{
	struct calls_lines *L = lines_of(s);
	size_t n = strlen(tail);

	if (!L)
		return;
	if (call_start(s, L, t, rc, depth, n + 1)) {
		memcpy(L->buf + L->len, tail, n);
		L->buf[L->len + n] = '\n';
		L->len += n + 1;
	}
	call_end(s, L, t, rc, depth);
}

void tp_calls_line_return(struct session *s, struct thread *t, const struct rec *rc, unsigned depth,
			  const char *ret, size_t len, uint64_t d)
{
	struct calls_lines *L = lines_of(s);
	char *p;

	if (!L)
		return;
	/* " = " RET, then " <SECONDS.MICROSECONDS>" with -T (24 bytes at most) */
	if (call_start(s, L, t, rc, depth, 3 + len + 24 + 1)) {
		p = L->buf + L->len;
		memcpy(p, " = ", 3);
		memcpy(p + 3, ret, len);
		p += 3 + len;
		if (s->o->durations) {
			*p++ = ' ';
			*p++ = '<';
			p = put_u64(p, d / 1000000000u, 1);
			*p++ = '.';
			p = put_u64(p, d / 1000 % 1000000, 6);
			*p++ = '>';
		}
		*p++ = '\n';
		L->len = (size_t)(p - L->buf);
	}
	call_end(s, L, t, rc, depth);
}

void tp_calls_line_text(struct session *s, struct thread *t, unsigned depth, const char *text)
{
	struct calls_lines *L = lines_of(s);
	int indent = 2 * (int)(depth < INDENT_MAX ? depth : INDENT_MAX);

	if (!L || s->o->summary)
		return;
	if (depth > INDENT_MAX)
		add(s, L, "[%d] %*s{%u} %s\n", t->tid, indent, "", depth, text);
	else
		add(s, L, "[%d] %*s%s\n", t->tid, indent, "", text);
	emit(s, L, t, __rdtsc());
}

void tp_calls_lines_tick(struct session *s, bool ticked)
{
	struct calls_lines *L = s->lines;
	uint64_t now, start;

	if (!s->async) {
		if (ticked)
			fflush(s->o->out);
		return;
	}
	now = tp_calls_now_ns();
	if (!ticked && (!L || now < L->next_due))
		return;
	start = __rdtsc();
	/* A return that happened before the previous reading was read by this one at the
	 * latest (unless its thread was held inside the stub's few instructions for a whole
	 * tick): every line before it is known. */
	for (int i = 0; i < s->nthreads; i++)
		if (s->threads[i]->img)
			tp_bp_reap(s->threads[i]->img->bps, s->threads[i]->tid, true, 0);
	L = s->lines;
	if (L) {
		struct line *v;

		for (;;) {
			struct line *r = run_first(L);

			v = L->heap.n ? L->heap.data : NULL;
			if (r && r->key < L->horizon && (!v || before(r, v)))
				run_write(s, L, L->horizon, SIZE_MAX);
			else if (v && v[0].key < L->horizon)
				heap_pop_write(s, L);
			else
				break;
		}
		L->horizon = start;
		L->next_due = now + TICK_NS;
	}
	fflush(s->o->out);
}

void tp_calls_lines_flush(struct session *s)
{
	struct calls_lines *L = s->lines;

	while (L && held(L))
		pop_write(s, L);
}

void tp_calls_lines_free(struct session *s)
{
	struct calls_lines *L = s->lines;

	if (!L)
		return;
	tp_calls_lines_flush(s);
	tp_vec_release(&L->heap);
	tp_vec_release(&L->run);
	free(L->rtext);
	for (int i = 0; i < L->nevents; i++)
		free(L->events[i]);
	free(L->events);
	free(L->buf);
	free(L);
	s->lines = NULL;
}

/* ---- process events ---- */

/* strace's names: SIGCHLD, SIGRT_2. */
static const char *sig_name(int sig, char *buf, size_t len)
{
	const char *a = sig > 0 && sig < 32 ? sigabbrev_np(sig) : NULL;

	if (a)
		snprintf(buf, len, "SIG%s", a);
	else if (sig >= 32 && sig <= 64)
		snprintf(buf, len, "SIGRT_%d", sig - 32);
	else
		snprintf(buf, len, "%d", sig);
	return buf;
}

struct code_names {
	int sig;
	const char *const *names; /* si_code 1, 2, ... */
	int n;
};

#define NAMES(sig, ...)                                                                            \
	{                                                                                          \
		sig, (const char *const[]){__VA_ARGS__},                                           \
		    sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)              \
	}

static const struct code_names code_tab[] = {
    NAMES(SIGCHLD, "CLD_EXITED", "CLD_KILLED", "CLD_DUMPED", "CLD_TRAPPED", "CLD_STOPPED",
	  "CLD_CONTINUED"),
    NAMES(SIGSEGV, "SEGV_MAPERR", "SEGV_ACCERR", "SEGV_BNDERR", "SEGV_PKUERR", "SEGV_ACCADI",
	  "SEGV_ADIDERR", "SEGV_ADIPERR", "SEGV_MTEAERR", "SEGV_MTESERR", "SEGV_CPERR"),
    NAMES(SIGBUS, "BUS_ADRALN", "BUS_ADRERR", "BUS_OBJERR", "BUS_MCEERR_AR", "BUS_MCEERR_AO"),
    NAMES(SIGILL, "ILL_ILLOPC", "ILL_ILLOPN", "ILL_ILLADR", "ILL_ILLTRP", "ILL_PRVOPC",
	  "ILL_PRVREG", "ILL_COPROC", "ILL_BADSTK", "ILL_BADIADDR"),
    NAMES(SIGFPE, "FPE_INTDIV", "FPE_INTOVF", "FPE_FLTDIV", "FPE_FLTOVF", "FPE_FLTUND",
	  "FPE_FLTRES", "FPE_FLTINV", "FPE_FLTSUB", "FPE_FLTUNK", "FPE_CONDTRAP"),
    NAMES(SIGTRAP, "TRAP_BRKPT", "TRAP_TRACE", "TRAP_BRANCH", "TRAP_HWBKPT", "TRAP_UNK",
	  "TRAP_PERF"),
    NAMES(SIGIO, "POLL_IN", "POLL_OUT", "POLL_MSG", "POLL_ERR", "POLL_PRI", "POLL_HUP"),
    NAMES(SIGSYS, "SYS_SECCOMP", "SYS_USER_DISPATCH"),
};

static const char *code_name(const siginfo_t *si, char *buf, size_t len)
{
	static const char *const generic[] = {"SI_USER",    "SI_QUEUE", "SI_TIMER", "SI_MESGQ",
					      "SI_ASYNCIO", "SI_SIGIO", "SI_TKILL", "SI_DETHREAD"};
	int c = si->si_code;

	if (c == SI_KERNEL)
		return "SI_KERNEL";
	if (c <= 0 && -c < (int)(sizeof(generic) / sizeof(generic[0])))
		return generic[-c];
	if (c == SI_ASYNCNL)
		return "SI_ASYNCNL";
	for (size_t i = 0; c > 0 && i < sizeof(code_tab) / sizeof(code_tab[0]); i++)
		if (code_tab[i].sig == si->si_signo && c <= code_tab[i].n)
			return code_tab[i].names[c - 1];
	snprintf(buf, len, "%d", c);
	return buf;
}

/* One field of a siginfo, as strace names it: a number, or a name (@str). */
struct sfield {
	const char *name;
	char val[40];
	bool str;
};

static int sfield_put(struct sfield *f, int n, const char *name, bool str, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int sfield_put(struct sfield *f, int n, const char *name, bool str, const char *fmt, ...)
{
	va_list ap;

	f[n].name = name;
	f[n].str = str;
	va_start(ap, fmt);
	vsnprintf(f[n].val, sizeof(f[n].val), fmt, ap);
	va_end(ap);
	return n + 1;
}

static int addr_field(struct sfield *f, int n, const char *name, const void *p)
{
	return p ? sfield_put(f, n, name, true, "%p", p) : sfield_put(f, n, name, true, "NULL");
}

/* The fields strace shows for @si (at most 8). */
static int siginfo_fields(const siginfo_t *si, struct sfield *f)
{
	char b[16];
	int n = 0, sig = si->si_signo, c = si->si_code;

	n = sfield_put(f, n, "si_signo", true, "%s", sig_name(sig, b, sizeof(b)));
	n = sfield_put(f, n, "si_code", true, "%s", code_name(si, b, sizeof(b)));
	if (c == SI_USER || c == SI_TKILL || c == SI_QUEUE || c == SI_MESGQ) {
		n = sfield_put(f, n, "si_pid", false, "%d", si->si_pid);
		n = sfield_put(f, n, "si_uid", false, "%u", si->si_uid);
		if (c != SI_USER && c != SI_TKILL)
			n = sfield_put(f, n, "si_int", false, "%d", si->si_int);
	} else if (c == SI_TIMER) {
		n = sfield_put(f, n, "si_timerid", false, "%d", si->si_timerid);
		n = sfield_put(f, n, "si_overrun", false, "%d", si->si_overrun);
		n = sfield_put(f, n, "si_int", false, "%d", si->si_int);
	} else if (sig == SIGCHLD && c > 0) {
		n = sfield_put(f, n, "si_pid", false, "%d", si->si_pid);
		n = sfield_put(f, n, "si_uid", false, "%u", si->si_uid);
		if (c == CLD_EXITED)
			n = sfield_put(f, n, "si_status", false, "%d", si->si_status);
		else
			n = sfield_put(f, n, "si_status", true, "%s",
				       sig_name(si->si_status, b, sizeof(b)));
		n = sfield_put(f, n, "si_utime", false, "%ld", (long)si->si_utime);
		n = sfield_put(f, n, "si_stime", false, "%ld", (long)si->si_stime);
	} else if (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
		   sig == SIGTRAP) {
		n = addr_field(f, n, "si_addr", si->si_addr);
	} else if (sig == SIGIO && c > 0) {
		n = sfield_put(f, n, "si_band", false, "%ld", si->si_band);
		n = sfield_put(f, n, "si_fd", false, "%d", si->si_fd);
	} else if (sig == SIGSYS && c > 0) {
		n = addr_field(f, n, "si_call_addr", si->si_call_addr);
		n = sfield_put(f, n, "si_syscall", false, "%d", si->si_syscall);
		n = sfield_put(f, n, "si_arch", true, "%#x", si->si_arch);
	}
	return n;
}

/* Keep a JSON object of the summary (-c --json). */
static void keep_event(struct session *s, char *json)
{
	struct calls_lines *L = lines_of(s);
	char **n;

	if (L && json && L->nevents == L->cap_events) {
		int cap = L->cap_events ? 2 * L->cap_events : 64;

		n = realloc(L->events, (size_t)cap * sizeof(*n));
		if (n) {
			L->events = n;
			L->cap_events = cap;
		}
	}
	if (!L || !json || L->nevents == L->cap_events) {
		free(json);
		if (json)
			s->err = -ENOMEM;
		return;
	}
	L->events[L->nevents++] = json;
}

static bool want_json(struct session *s)
{
	return s->o->summary && s->o->json;
}

/* The path execve was given (AT_EXECFN), else the file run. */
static void exec_path(pid_t pid, const char *exe, char *buf, size_t len)
{
	uint64_t at;
	size_t got = 0;

	if (!tp_proc_auxv(pid, AT_EXECFN, &at)) {
		while (got + 1 < len) {
			size_t want = len - 1 - got < 256 ? len - 1 - got : 256;
			ssize_t r = tp_proc_read(pid, at + got, buf + got, want);

			if (r <= 0)
				break;
			if (memchr(buf + got, 0, (size_t)r))
				return;
			got += (size_t)r;
		}
	}
	snprintf(buf, len, "%s", exe);
}

/* @s as strace quotes a string, into a new string (NULL when out of memory). */
static char *quote(const char *str, size_t len)
{
	char *q = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&q, &n);

	if (!f)
		return NULL;
	tp_text_str(f, str, len);
	if (fclose(f)) {
		free(q);
		return NULL;
	}
	return q;
}

void tp_calls_event_exec(struct session *s, struct thread *t)
{
	char path[PATH_MAX], cmd[64], argv[8192], *list = NULL, *json = NULL, *qpath;
	size_t llen = 0, jlen = 0, n = 0;
	struct calls_lines *L;
	FILE *lf, *jf = NULL;
	int fd;

	if (!t->report || !t->img)
		return;
	exec_path(t->pid, t->img->exe, path, sizeof(path));
	snprintf(cmd, sizeof(cmd), "/proc/%d/cmdline", t->pid);
	fd = open(cmd, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r;

		while (n < sizeof(argv) && (r = read(fd, argv + n, sizeof(argv) - n)) > 0)
			n += (size_t)r;
		close(fd);
	}
	qpath = quote(path, strlen(path));
	lf = open_memstream(&list, &llen);
	if (lf && want_json(s))
		jf = open_memstream(&json, &jlen);
	if (!qpath || !lf || (want_json(s) && !jf))
		goto err;
	if (jf) {
		fprintf(jf, "{\"event\": \"exec\", \"pid\": %d, \"program\": ", t->pid);
		tp_json_str(jf, path, strlen(path));
		fputs(", \"argv\": [", jf);
	}
	fputc('[', lf);
	for (size_t i = 0; i < n;) {
		size_t k = strnlen(argv + i, n - i);

		if (i)
			fputs(", ", lf);
		tp_text_str(lf, argv + i, k);
		if (jf) {
			if (i)
				fputs(", ", jf);
			tp_json_str(jf, argv + i, k);
		}
		i += k + 1;
	}
	fputc(']', lf);
	if (jf) {
		fputs("]}", jf);
		if (fclose(jf))
			goto err_json;
		keep_event(s, json);
	}
	if (fclose(lf))
		goto err_list;
	if (!s->o->summary && (L = lines_of(s))) {
		add(s, L, "[%d] +++ exec %s %s +++\n", t->tid, qpath, list);
		emit(s, L, t, __rdtsc());
	}
	if (s->trace)
		tp_calls_trace_exec(s->trace, t->pid, t->tid, path, list);
	free(qpath);
	free(list);
	return;

err:
	if (jf)
		fclose(jf);
err_json:
	free(json);
	if (lf)
		fclose(lf);
err_list:
	free(list);
	free(qpath);
	s->err = -ENOMEM;
}

void tp_calls_event_exit(struct session *s, struct thread *t, int status)
{
	struct calls_lines *L = lines_of(s);
	bool core = WIFSIGNALED(status) && WCOREDUMP(status);
	char b[16], *json = NULL;

	if (!L || !t->report)
		return;
	if (WIFEXITED(status)) {
		if (!s->o->summary)
			add(s, L, "[%d] +++ exited with %d +++\n", t->pid, WEXITSTATUS(status));
		if (want_json(s) &&
		    asprintf(&json, "{\"event\": \"exit\", \"pid\": %d, \"status\": %d}", t->pid,
			     WEXITSTATUS(status)) < 0)
			json = NULL;
	} else {
		sig_name(WTERMSIG(status), b, sizeof(b));
		if (!s->o->summary)
			add(s, L, "[%d] +++ killed by %s%s +++\n", t->pid, b,
			    core ? " (core dumped)" : "");
		if (want_json(s) && asprintf(&json,
					     "{\"event\": \"killed\", \"pid\": %d, \"signal\": "
					     "\"%s\", \"core_dumped\": %s}",
					     t->pid, b, core ? "true" : "false") < 0)
			json = NULL;
	}
	if (!s->o->summary)
		emit(s, L, t, __rdtsc());
	if (want_json(s)) {
		if (!json)
			s->err = -ENOMEM;
		keep_event(s, json);
	}
	if (s->trace)
		tp_calls_trace_exit(s->trace, t->pid, t->tid,
				    WIFEXITED(status) ? WEXITSTATUS(status) : 0,
				    WIFEXITED(status) ? NULL : b, core);
}

void tp_calls_event_signal(struct session *s, struct thread *t, const siginfo_t *si)
{
	struct calls_lines *L = lines_of(s);
	struct sfield f[8];
	char info[512], b[16], *json = NULL, *j;
	size_t len = 0, jlen = 0;
	int n;
	FILE *jf;

	if (!L || !t || !t->report)
		return;
	n = siginfo_fields(si, f);
	len = (size_t)snprintf(info, sizeof(info), "{");
	for (int i = 0; i < n && len < sizeof(info); i++)
		len += (size_t)snprintf(info + len, sizeof(info) - len, "%s%s=%s", i ? ", " : "",
					f[i].name, f[i].val);
	if (len < sizeof(info))
		snprintf(info + len, sizeof(info) - len, "}");
	sig_name(si->si_signo, b, sizeof(b));
	if (!s->o->summary) {
		add(s, L, "[%d] --- %s %s ---\n", t->tid, b, info);
		emit(s, L, t, __rdtsc());
	}
	if (s->trace)
		tp_calls_trace_signal(s->trace, t->pid, t->tid, b, info);
	if (!want_json(s))
		return;
	jf = open_memstream(&json, &jlen);
	if (!jf) {
		s->err = -ENOMEM;
		return;
	}
	fprintf(jf,
		"{\"event\": \"signal\", \"pid\": %d, \"tid\": %d, \"signal\": \"%s\", "
		"\"siginfo\": {",
		t->pid, t->tid, b);
	for (int i = 0; i < n; i++) {
		bool q = f[i].str && strcmp(f[i].val, "NULL");

		fprintf(jf, "%s\"%s\": %s%s%s", i ? ", " : "", f[i].name, q ? "\"" : "",
			q	   ? f[i].val
			: f[i].str ? "null"
				   : f[i].val,
			q ? "\"" : "");
	}
	fputs("}}", jf);
	j = json;
	if (fclose(jf)) {
		free(j);
		s->err = -ENOMEM;
		return;
	}
	keep_event(s, json);
}

void tp_calls_events_json(struct session *s, FILE *f)
{
	struct calls_lines *L = s->lines;

	fputs(", \"events\": [", f);
	for (int i = 0; L && i < L->nevents; i++)
		fprintf(f, "%s\n  %s", i ? "," : "", L->events[i]);
	fputs("]", f);
}
