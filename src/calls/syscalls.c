/* `tracepad calls -S`: system calls as lines, named as strace names them (the kernel's
 * __NR_ names, generated from <asm/unistd_64.h> at build time) with the arguments of the
 * common ones decoded as strace shows them, the others' six registers in hex. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <x86intrin.h>

#include "calls/engine.h"
#include "calls/proto-priv.h"
#include "syscall-names.h"

/* How the arguments and the return value show, one letter each (as strace shows them):
 * d int, l long, u unsigned, x hex, p pointer (NULL), s path (whole, as strace shows paths), b
 * buffer whose length is the next argument, B buffer filled by the call (its length the return
 * value, shown at the exit), f directory fd (AT_FDCWD), o open flags, m mode in octal (after o:
 * only with O_CREAT or O_TMPFILE), P mmap prot, M mmap flags, S signal.  Return: d, x, or ? (the
 * call does not return). */
struct sys_proto {
	const char *name;
	char ret;
	const char *args;
};

static const struct sys_proto protos[] = {
    {"read", 'd', "dBu"},	 {"write", 'd', "dbu"},
    {"pread64", 'd', "dBul"},	 {"pwrite64", 'd', "dbul"},
    {"open", 'd', "som"},	 {"openat", 'd', "fsom"},
    {"creat", 'd', "sm"},	 {"close", 'd', "d"},
    {"lseek", 'l', "dld"},	 {"mmap", 'x', "puPMdx"},
    {"mprotect", 'd', "puP"},	 {"munmap", 'd', "pu"},
    {"brk", 'x', "p"},		 {"access", 'd', "sd"},
    {"faccessat", 'd', "fsd"},	 {"faccessat2", 'd', "fsdx"},
    {"exit", '?', "d"},		 {"exit_group", '?', "d"},
    {"getpid", 'd', ""},	 {"gettid", 'd', ""},
    {"getppid", 'd', ""},	 {"getuid", 'd', ""},
    {"geteuid", 'd', ""},	 {"getgid", 'd', ""},
    {"getegid", 'd', ""},	 {"kill", 'd', "dS"},
    {"tkill", 'd', "dS"},	 {"tgkill", 'd', "ddS"},
    {"dup", 'd', "d"},		 {"dup2", 'd', "dd"},
    {"dup3", 'd', "ddo"},	 {"pipe2", 'd', "po"},
    {"fstat", 'd', "dp"},	 {"newfstatat", 'd', "fspx"},
    {"stat", 'd', "sp"},	 {"lstat", 'd', "sp"},
    {"unlink", 'd', "s"},	 {"unlinkat", 'd', "fsx"},
    {"mkdir", 'd', "sm"},	 {"mkdirat", 'd', "fsm"},
    {"rmdir", 'd', "s"},	 {"chdir", 'd', "s"},
    {"fchdir", 'd', "d"},	 {"readlink", 'd', "sBu"},
    {"readlinkat", 'd', "fsBu"}, {"execve", 'd', "spp"},
    {"wait4", 'd', "dppp"},	 {"nanosleep", 'd', "pp"},
    {"getrandom", 'd', "Bux"},	 {"set_tid_address", 'd', "p"},
    {"arch_prctl", 'd', "xp"},	 {"ioctl", 'd', "dxp"},
    {"fcntl", 'd', "ddx"},	 {"socket", 'd', "ddd"},
    {"connect", 'd', "dpd"},	 {"fsync", 'd', "d"},
    {"ftruncate", 'd', "dl"},	 {"rename", 'd', "ss"},
    {"renameat", 'd', "fsfs"},	 {"symlink", 'd', "ss"},
    {"chmod", 'd', "sm"},	 {"fchmod", 'd', "dm"},
    {"umask", 'm', "m"},	 {"getcwd", 'd', "pu"},
    {"sched_yield", 'd', ""},	 {"pause", 'd', ""},
    {"alarm", 'u', "u"},	 {"setsid", 'd', ""},
    {"getpgrp", 'd', ""},
};

struct bit {
	uint64_t v;
	const char *name;
};

#define B(x)                                                                                       \
	{                                                                                          \
		x, #x                                                                              \
	}
static const struct bit open_bits[] = {
    B(O_CREAT),	   B(O_EXCL),	 B(O_NOCTTY),  B(O_TRUNC),     B(O_APPEND),  B(O_NONBLOCK),
    B(O_SYNC),	   B(O_DSYNC),	 B(O_DIRECT),  B(O_LARGEFILE), B(O_TMPFILE), B(O_DIRECTORY),
    B(O_NOFOLLOW), B(O_NOATIME), B(O_CLOEXEC), B(O_PATH),      B(O_ASYNC),
};
static const struct bit prot_bits[] = {B(PROT_READ), B(PROT_WRITE), B(PROT_EXEC), B(PROT_GROWSDOWN),
				       B(PROT_GROWSUP)};
static const struct bit map_bits[] = {
    B(MAP_FIXED),      B(MAP_ANONYMOUS), B(MAP_32BIT),	   B(MAP_GROWSDOWN),	   B(MAP_DENYWRITE),
    B(MAP_EXECUTABLE), B(MAP_LOCKED),	 B(MAP_NORESERVE), B(MAP_POPULATE),	   B(MAP_NONBLOCK),
    B(MAP_STACK),      B(MAP_HUGETLB),	 B(MAP_SYNC),	   B(MAP_FIXED_NOREPLACE),
};
#undef B

/* @v as NAME|NAME|0x..., @first already written when not NULL. */
static void put_bits(struct out *o, uint64_t v, const struct bit *b, size_t n, const char *first)
{
	bool any = first != NULL;

	if (first)
		tp_calls_put(o, "%s", first);
	for (size_t i = 0; i < n; i++)
		if (b[i].v && (v & b[i].v) == b[i].v) {
			tp_calls_put(o, "%s%s", any ? "|" : "", b[i].name);
			any = true;
			v &= ~b[i].v;
		}
	if (v || !any)
		tp_calls_put(o, any ? "|%#" PRIx64 : "%#" PRIx64, v);
}

static const struct sys_proto *proto_of(int nr)
{
	const char *name = nr >= 0 && nr < (int)(sizeof(syscall_names) / sizeof(syscall_names[0]))
			       ? syscall_names[nr]
			       : NULL;

	for (size_t i = 0; name && i < sizeof(protos) / sizeof(protos[0]); i++)
		if (!strcmp(protos[i].name, name))
			return &protos[i];
	return NULL;
}

/* One argument @v of kind @k (@next: the next argument, @ret the return value). */
static void put_arg(struct out *o, pid_t pid, char k, uint64_t v, uint64_t next, int64_t ret,
		    bool at_exit)
{
	int n;

	switch (k) {
	case 'd':
		tp_calls_put(o, "%d", (int)v);
		break;
	case 'l':
		tp_calls_put(o, "%" PRId64, (int64_t)v);
		break;
	case 'u':
		tp_calls_put(o, "%" PRIu64, v);
		break;
	case 'x':
		tp_calls_put(o, "%#" PRIx64, v);
		break;
	case 'p':
		tp_calls_put(o, v ? "%#" PRIx64 : "NULL", v);
		break;
	case 's':
	case 'b':
	case 'B':
		if (k == 'B' && (!at_exit || ret < 0)) {
			tp_calls_put(o, v ? "%#" PRIx64 : "NULL", v);
			break;
		}
		n = tp_proto_format_string(pid, v,
					   k == 's'   ? -2
					   : k == 'b' ? (int64_t)next
						      : ret,
					   o->buf + o->pos, o->len - o->pos);
		o->pos += (size_t)n;
		break;
	case 'f':
		if ((int)v == AT_FDCWD)
			tp_calls_put(o, "AT_FDCWD");
		else
			tp_calls_put(o, "%d", (int)v);
		break;
	case 'o':
		put_bits(o, v & ~(uint64_t)O_ACCMODE, open_bits,
			 sizeof(open_bits) / sizeof(*open_bits),
			 (v & O_ACCMODE) == O_WRONLY ? "O_WRONLY"
			 : (v & O_ACCMODE) == O_RDWR ? "O_RDWR"
						     : "O_RDONLY");
		break;
	case 'm':
		tp_calls_put(o, "%#03" PRIo64, v);
		break;
	case 'P':
		if (!v)
			tp_calls_put(o, "PROT_NONE");
		else
			put_bits(o, v, prot_bits, sizeof(prot_bits) / sizeof(*prot_bits), NULL);
		break;
	case 'M':
		put_bits(o, v & ~(uint64_t)MAP_TYPE, map_bits, sizeof(map_bits) / sizeof(*map_bits),
			 (v & MAP_TYPE) == MAP_SHARED		 ? "MAP_SHARED"
			 : (v & MAP_TYPE) == MAP_PRIVATE	 ? "MAP_PRIVATE"
			 : (v & MAP_TYPE) == MAP_SHARED_VALIDATE ? "MAP_SHARED_VALIDATE"
								 : "0");
		break;
	case 'S':
		if (v > 0 && v < 32 && sigabbrev_np((int)v))
			tp_calls_put(o, "SIG%s", sigabbrev_np((int)v));
		else if (v >= 32 && v <= 64)
			tp_calls_put(o, "SIGRT_%d", (int)v - 32);
		else
			tp_calls_put(o, "%d", (int)v);
		break;
	}
}

/* "SYS_name(args" of the call of @t (at its exit: buffers it filled, @ret). */
static void put_call(struct out *o, struct thread *t, int64_t ret, bool at_exit)
{
	const struct sys_proto *p = proto_of(t->sys_nr);
	int nnames = (int)(sizeof(syscall_names) / sizeof(syscall_names[0]));
	const uint64_t *a = t->sys_args;

	if (t->sys_nr >= 0 && t->sys_nr < nnames && syscall_names[t->sys_nr])
		tp_calls_put(o, "SYS_%s(", syscall_names[t->sys_nr]);
	else
		tp_calls_put(o, "SYS_%d(", t->sys_nr);
	if (!p) {
		tp_calls_put(o,
			     "%#" PRIx64 ", %#" PRIx64 ", %#" PRIx64 ", %#" PRIx64 ", %#" PRIx64
			     ", %#" PRIx64,
			     a[0], a[1], a[2], a[3], a[4], a[5]);
		return;
	}
	for (int i = 0; p->args[i] && i < 6; i++) {
		char k = p->args[i];

		if (k == 'm' && i && p->args[i - 1] == 'o' && !(a[i - 1] & (O_CREAT | __O_TMPFILE)))
			break;
		tp_calls_put(o, i ? ", " : "");
		put_arg(o, t->pid, k, a[i], i < 5 ? a[i + 1] : 0, ret, at_exit);
	}
}

static void put_ret(struct out *o, const struct sys_proto *p, int64_t ret)
{
	if (ret < 0 && ret >= -4095) {
		const char *name = strerrorname_np((int)-ret);

		if (name)
			tp_calls_put(o, " = -1 %s (%s)", name, strerror((int)-ret));
		else
			tp_calls_put(o, " = -1 errno %d", (int)-ret);
	} else if (p && p->ret == 'x') {
		tp_calls_put(o, " = %#" PRIx64, (uint64_t)ret);
	} else if (p && p->ret == 'm') {
		tp_calls_put(o, " = %#03" PRIo64, (uint64_t)ret);
	} else {
		tp_calls_put(o, " = %" PRId64, ret);
	}
}

/* The line of @t's system call, which returned @ret (@done false: it never returns).  The
 * call's text is the entry's (strings read before the call could change them, execve's
 * path before it is gone), unless the call fills a buffer. */
static void sys_line(struct session *s, struct thread *t, int64_t ret, bool done)
{
	const struct sys_proto *p = proto_of(t->sys_nr);
	char text[1024];
	struct out o = {.buf = text, .len = sizeof(text)};

	if (done && p && strchr(p->args, 'B'))
		put_call(&o, t, ret, true);
	else
		tp_calls_put(&o, "%s", t->sys_text);
	tp_calls_put(&o, ")");
	if (done)
		put_ret(&o, proto_of(t->sys_nr), ret);
	else
		tp_calls_put(&o, " = ?");
	tp_calls_line_text(s, t, t->n, text);
}

int tp_calls_syscall_stop(struct session *s, const struct tp_event *ev)
{
	struct thread *t = tp_calls_thread_of(s, ev->tid);
	struct tp_syscall_stop st;

	if (t && t->report && !tp_proc_syscall_info(ev->tid, &st)) {
		if (st.entry) {
			t->in_sys = true;
			t->sys_nr = st.nr;
			memcpy(t->sys_args, st.args, sizeof(t->sys_args));
			{
				struct out o = {.buf = t->sys_text, .len = sizeof(t->sys_text)};

				put_call(&o, t, 0, false);
			}
			if (proto_of(st.nr) && proto_of(st.nr)->ret == '?')
				sys_line(s, t, 0, false); /* exit_group: its line now */
		} else if (st.exit && t->in_sys) {
			t->in_sys = false;
			sys_line(s, t, st.ret, true);
		}
	}
	return tp_proc_resume(s->p, ev->tid, TP_RESUME_SYSCALL, 0);
}
