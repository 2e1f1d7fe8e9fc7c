/* Tests of src/calls/proto.c: real targets built with and without -g (and static) run under
 * return breakpoints; the text of each call's arguments at entry and value at return (with
 * errno of a failing open) is compared with what the target passed.  Also the raw and table
 * fallbacks and truncation on synthetic registers. */
#include <sys/ptrace.h>

#include "../proc/proc-test.h"
#include "bp/bp.h"
#include "calls/proto.h"
#include "base/log.h"
#include "elf/symbols.h"

#define NFN 16
#define REC 4096

static void log_cb(enum tp_log_level level, const char *fmt, va_list ap)
{
	if (level > TP_LOG_WARN)
		return;
	printf("# ");
	vprintf(fmt, ap);
	printf("\n");
}

struct fn {
	const char *sym;  /* for tp_symtab_find_symbol; "*strlen": through strlen_impl */
	const char *name; /* as the engine would pass it */
	uint64_t addr;
	const struct tp_proto *p;
	bool found; /* tp_protos_find() gave a prototype */
	bool needs_fp;
	char rec[REC]; /* "ARGS = RET\n" of each call */
	int calls;
};

struct run {
	const char *target;
	struct fn fn[NFN];
	int nfn;
	int status;
	char out[4096];
	int tpoff_err;
	int64_t tpoff;
};

static void add_fn(struct run *r, const char *sym, const char *name)
{
	r->fn[r->nfn].sym = sym;
	r->fn[r->nfn].name = name;
	r->nfn++;
}

static int setup_fns(struct run *r, struct tp_symtab *st, struct tp_protos *ps, struct tp_bps *bps,
		     pid_t pid, bool is_static)
{
	const struct tp_map *m;
	uint64_t addr;
	int err;

	err = tp_symtab_load_pid(st, pid);
	if (err)
		return err;
	for (int i = 0; i < r->nfn; i++) {
		struct fn *f = &r->fn[i];

		if (f->sym[0] == '*') {
			err = tp_symtab_find_symbol(st, "strlen_impl", &addr);
			if (!err && tp_proc_read(pid, addr, &f->addr, 8) != 8)
				err = -EIO;
		} else {
			err = tp_symtab_find_symbol(st, f->sym, &f->addr);
		}
		m = err ? NULL : tp_symtab_find_map(st, f->addr);
		if (!m) {
			printf("# %s: not found\n", f->sym);
			return -ENOENT;
		}
		f->p = tp_protos_find(ps, m->path, f->name, f->addr - m->bias);
		f->found = f->p != NULL;
		f->needs_fp = tp_proto_needs_fp(f->p);
		err = tp_bp_insert(bps, pid, f->addr, TP_BP_RETURN);
		if (err) {
			printf("# insert %s: %s\n", f->sym, strerror(-err));
			return err;
		}
	}
	/* libc's mapping: the program's own when static. */
	r->tpoff_err = tp_symtab_find_symbol(st, is_static ? "main" : "libc:malloc", &addr);
	m = r->tpoff_err ? NULL : tp_symtab_find_map(st, addr);
	if (m)
		r->tpoff_err = tp_errno_tpoff(pid, m->path, m->bias, &r->tpoff);
	return 0;
}

static void append(struct fn *f, const char *args, const char *ret)
{
	size_t n = strlen(f->rec);

	snprintf(f->rec + n, REC - n, "%s = %s\n", args, ret);
}

static int run_target(struct run *r, bool is_static)
{
	char *argv[] = {target(r->target), NULL};
	char *env[] = {"TP_PROTO_VAR=v\ta l", NULL};
	struct tp_launch l = {.argv = argv, .env_add = env, .cpu = -1};
	struct tp_symtab *st = tp_symtab_new();
	struct tp_protos *ps = tp_protos_new();
	struct tp_bps *bps = NULL;
	struct tp_proc *p = NULL;
	char args[NFN][512];
	int stack[64], depth = 0, fd = -1, err;
	uint64_t main_addr = 0;
	struct tp_event ev;
	bool ready = false;
	pid_t pid;

	r->status = -1;
	err = launch_capture(&l, &p, &fd);
	if (err)
		goto out;
	pid = tp_proc_pid(p);
	err = tp_symtab_load_pid(st, pid);
	if (!err)
		err = tp_symtab_find_symbol(st, "main", &main_addr);
	bps = tp_bps_new(p, pid);
	if (!err)
		err = bps ? tp_bp_insert(bps, pid, main_addr, 0) : -ENOMEM;
	if (err) {
		tp_proc_kill(p);
		goto out;
	}
	tp_proc_resume(p, pid, TP_RESUME_CONT, 0);
	while (tp_bp_wait(bps, &ev) == 0) {
		struct user_regs_struct regs;
		struct user_fpregs_struct fp;
		uint64_t pc;
		int h, k;

		if (ev.kind == TP_EV_EXITED) {
			if (ev.tid == pid)
				r->status = ev.status;
			continue;
		}
		if (ev.kind == TP_EV_CLONE || ev.kind == TP_EV_FORK)
			tp_proc_resume(p, ev.new_tid, TP_RESUME_CONT, 0);
		if (ev.kind != TP_EV_BREAKPOINT || tp_proc_get_regs(ev.tid, &regs)) {
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT,
				       ev.kind == TP_EV_SIGNAL ? ev.sig : 0);
			continue;
		}
		pc = regs.rip - 1;
		/* src/proc has no FP register access yet: the engine will need one. */
		if (tp_proc_get_fpregs(ev.tid, &fp))
			memset(&fp, 0, sizeof(fp));
		if (pc == main_addr && !ready) {
			ready = true;
			err = setup_fns(r, st, ps, bps, pid, is_static);
			if (err) {
				tp_proc_kill(p);
				p = NULL;
				break;
			}
		} else if (tp_bp_lookup(bps, pc, NULL, NULL)) {
			for (k = 0; k < r->nfn && r->fn[k].addr != pc; k++)
				;
			if (k < r->nfn && depth < 64) {
				regs.rip = pc;
				tp_proto_format_args(r->fn[k].p, pid, &regs, &fp, args[depth],
						     sizeof(args[depth]));
				stack[depth++] = k;
			}
		} else if (depth > 0) {
			char ret[512];
			int errno_val = -1;
			bool failed;

			k = stack[--depth];
			if (tp_proto_failed(r->fn[k].p, &regs) && !r->tpoff_err &&
			    tp_proc_read(pid, regs.fs_base + r->tpoff, &errno_val, 4) != 4)
				errno_val = -1;
			tp_proto_format_ret(r->fn[k].p, pid, &regs, &fp, errno_val, ret,
					    sizeof(ret), &failed);
			append(&r->fn[k], args[depth], ret);
			r->fn[k].calls++;
		}
		h = tp_bp_hit(bps, ev.tid, NULL, 0, NULL);
		if (h != 1)
			tp_proc_resume(p, ev.tid, TP_RESUME_CONT, h ? 0 : SIGTRAP);
	}
	tp_proc_free(p);
	err = ready ? 0 : -ENOENT;
out:
	if (fd >= 0)
		snprintf(r->out, sizeof(r->out), "%s", read_all(fd));
	tp_bps_free(bps);
	tp_protos_free(ps);
	tp_symtab_free(st);
	return err;
}

static struct fn *fn_of(struct run *r, const char *name)
{
	for (int i = 0; i < r->nfn; i++)
		if (!strcmp(r->fn[i].name, name))
			return &r->fn[i];
	return NULL;
}

static void add_all(struct run *r, bool is_static)
{
	static const char *const own[] = {"f_all",  "f_mem", "r_big",  "f_strs", "r_str", "r_enum",
					  "r_bool", "r_neg", "r_void", "r_null", "vsum"};

	for (size_t i = 0; i < sizeof(own) / sizeof(*own); i++)
		add_fn(r, own[i], own[i]);
	add_fn(r, is_static ? "open" : "libc:open", "open");
	add_fn(r, "*strlen", "strlen");
	add_fn(r, is_static ? "getenv" : "libc:getenv", "getenv");
	add_fn(r, is_static ? "strtol" : "libc:strtol", "strtol");
}

static void check_libc(struct run *r, const char *t)
{
	static const char *const open_ret = " = -1 ENOENT (No such file or directory)\n";
	struct fn *f = fn_of(r, "open");
	char want[2][256];

	/* libc's own DWARF (libc6-dbg) declares open variadic; the table does not. */
	snprintf(want[0], sizeof(want[0]), "\"/nonexistent/tracepad-proto\", 0%s", open_ret);
	snprintf(want[1], sizeof(want[1]), "\"/nonexistent/tracepad-proto\", 0, ...%s", open_ret);
	ok(strstr(f->rec, want[0]) || strstr(f->rec, want[1]),
	   "%s: open() fails with errno shown: %.*s", t, (int)strcspn(f->rec, "\n"), f->rec);
	is_int(r->tpoff_err, 0, "%s: errno's TLS offset from __errno_location (%lld)", t,
	       (long long)r->tpoff);
	f = fn_of(r, "strlen");
	ok(strstr(f->rec, "\"abc\" = 3\n") != NULL, "%s: strlen(\"abc\") = 3 from the libc table",
	   t);
	if (!strstr(f->rec, "\"abc\" = 3\n"))
		printf("# strlen calls:\n# %s", f->rec);
	f = fn_of(r, "getenv");
	ok(strstr(f->rec, "\"TP_PROTO_VAR\" = \"v\\ta l\"\n") != NULL,
	   "%s: getenv returns a string", t);
	f = fn_of(r, "strtol");
	ok(strstr(f->rec, "\"123\", NULL, 10 = 123\n") != NULL,
	   "%s: strtol(\"123\", NULL, 10) = 123", t);
	ok(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0, "%s: exit status 0 (%#x)", t,
	   r->status);
	is_str(r->out, "94.25\n92\n3\n136\nworld 1 0 -7\n(nil) 6\n-1 3 v\ta l 123\n",
	       "%s: the program's output is unchanged", t);
}

/* The -g builds: every value typed from DWARF. */
static void check_dwarf(const char *t)
{
	static const struct {
		const char *fn, *rec;
	} want[] = {
	    {"f_all", "-42, 123456789012, \"hello\", 2.5, BLUE, 0x1234, true, {...}, 'x', 0.25 "
		      "= 94.25\n"},
	    {"f_mem", "{...}, \"abc\", -5 = 92\n"},
	    {"r_big", "3 = {...}\n"},
	    {"f_strs", "\"line1\\n\\\"quoted\\\"\\ttab\\\\ and a long t\"..., \"\\33[1m\", "
		       "\"\\0011\", NULL = 136\n"},
	    {"r_str", "1 = \"world\"\n"},
	    {"r_enum", " = GREEN\n"},
	    {"r_bool", "5 = false\n"},
	    {"r_neg", " = -7\n"},
	    {"r_void", "1 = void\n"},
	    {"r_null", " = NULL\n"},
	    {"vsum", "3, ... = 6\n"},
	};
	struct run r = {.target = t};
	struct fn *f;

	add_all(&r, false);
	is_int(run_target(&r, false), 0, "%s: ran under return breakpoints", t);
	for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
		f = fn_of(&r, want[i].fn);
		ok(f->found, "%s: %s has a DWARF prototype", t, want[i].fn);
		is_str(f->rec, want[i].rec, "%s: %s(%.*s)", t, want[i].fn,
		       (int)strcspn(want[i].rec, "\n"), want[i].rec);
	}
	ok(fn_of(&r, "f_all")->needs_fp && !fn_of(&r, "r_str")->needs_fp,
	   "%s: f_all needs the FP registers, r_str does not", t);
	check_libc(&r, t);
}

/* Without -g: raw registers for the program's functions, the table for libc's. */
static void check_nodebug(const char *t, bool is_static)
{
	struct run r = {.target = t};
	struct fn *f;

	add_all(&r, is_static);
	is_int(run_target(&r, is_static), 0, "%s: ran under return breakpoints", t);
	f = fn_of(&r, "f_all");
	ok(!f->found, "%s: no prototype for f_all without debug info", t);
	ok(!strncmp(f->rec, "rdi=0xffffffd6, rsi=0x1cbe991a14, rdx=0x", 40),
	   "%s: f_all's raw registers: %.*s", t, (int)strcspn(f->rec, "\n"), f->rec);
	f = fn_of(&r, "r_neg");
	ok(strstr(f->rec, " = 0xfffffffffffffff9\n") != NULL, "%s: r_neg's raw rax: %.*s", t,
	   (int)strcspn(f->rec, "\n"), f->rec);
	check_libc(&r, t);
}

/* Synthetic registers: no process is read. */
static void check_offline(const char *nog)
{
	struct user_regs_struct regs = {.rdi = 1, .rsi = 2, .rdx = 3, .rcx = 4, .r8 = 5, .r9 = 6};
	struct tp_protos *ps = tp_protos_new();
	const struct tp_proto *p;
	char buf[128];
	bool failed = true;
	int n;

	n = tp_proto_format_args(NULL, 0, &regs, NULL, buf, sizeof(buf));
	is_str(buf, "rdi=0x1, rsi=0x2, rdx=0x3, rcx=0x4, r8=0x5, r9=0x6", "raw arguments");
	is_int(n, strlen(buf), "raw arguments: length returned");
	memset(buf, 'Z', sizeof(buf));
	n = tp_proto_format_args(NULL, 0, &regs, NULL, buf, 10);
	ok(n == 9 && !strcmp(buf, "rdi=0x1, ") && buf[10] == 'Z',
	   "truncated to the buffer, never past it (%d)", n);
	regs.rax = 0xfffffffffffffff9;
	tp_proto_format_ret(NULL, 0, &regs, NULL, -1, buf, sizeof(buf), &failed);
	ok(!strcmp(buf, "0xfffffffffffffff9") && !failed, "raw return value: %s", buf);
	regs = (struct user_regs_struct){.rdi = 0, .rax = 0};
	tp_proto_format_args(NULL, 0, &regs, NULL, buf, sizeof(buf));
	tp_proto_format_ret(NULL, 0, &regs, NULL, -1, buf + 100, sizeof(buf) - 100, &failed);
	ok(!strncmp(buf, "rdi=0x0, rsi=0x0", 16) && !strcmp(buf + 100, "0x0"),
	   "raw zero is 0x0: %.16s = %s", buf, buf + 100);

	/* The table by name, versioned or not, for an object without DWARF. */
	p = tp_protos_find(ps, target(nog), "memcpy@GLIBC_2.14", 0x1000);
	regs = (struct user_regs_struct){.rdi = 0x1000, .rsi = 0, .rdx = 16, .rax = 0x1000};
	tp_proto_format_args(p, 0, &regs, NULL, buf, sizeof(buf));
	is_str(buf, "0x1000, NULL, 16", "memcpy@GLIBC_2.14 from the table");
	ok(tp_protos_find(ps, target(nog), "memcpy", 0x1000) == p, "cached per (path, vaddr)");
	p = tp_protos_find(ps, target(nog), "__dup2", 0x1100);
	regs = (struct user_regs_struct){.rdi = 3, .rsi = 1};
	tp_proto_format_args(p, 0, &regs, NULL, buf, sizeof(buf));
	is_str(buf, "3, 1", "__dup2 is dup2 in the table");
	p = tp_protos_find(ps, target(nog), "pthread_mutex_lock", 0x2000);
	regs.rax = 35;
	ok(tp_proto_failed(p, &regs), "pthread_mutex_lock returning 35 failed");
	tp_proto_format_ret(p, 0, &regs, NULL, -1, buf, sizeof(buf), &failed);
	ok(failed && !strcmp(buf, "35 EDEADLK (Resource deadlock avoided)"),
	   "an error number returned is named: %s", buf);
	p = tp_protos_find(ps, target(nog), "malloc", 0x3000);
	regs.rax = 0;
	tp_proto_format_ret(p, 0, &regs, NULL, ENOMEM, buf, sizeof(buf), &failed);
	ok(failed && !strcmp(buf, "NULL ENOMEM (Cannot allocate memory)"), "malloc: %s", buf);
	p = tp_protos_find(ps, target(nog), "mmap", 0x3100);
	regs.rax = (uint64_t)-1;
	tp_proto_format_ret(p, 0, &regs, NULL, ENOMEM, buf, sizeof(buf), &failed);
	ok(failed && !strcmp(buf, "-1 ENOMEM (Cannot allocate memory)"), "mmap: %s", buf);
	p = tp_protos_find(ps, target(nog), "write", 0x4000);
	regs.rax = (uint64_t)-1;
	tp_proto_format_ret(p, 0, &regs, NULL, -1, buf, sizeof(buf), &failed);
	ok(failed && !strcmp(buf, "-1"), "failure with errno unknown: %s", buf);
	/* Strings and buffers read from this very process. */
	{
		static const char data[] = "hello\n\0tail";
		pid_t self = getpid();

		p = tp_protos_find(ps, target(nog), "write", 0x4000);
		regs = (struct user_regs_struct){.rdi = 1, .rsi = (uintptr_t)data, .rdx = 8};
		tp_proto_format_args(p, self, &regs, NULL, buf, sizeof(buf));
		is_str(buf, "1, \"hello\\n\\0t\", 8", "write: the buffer up to its length");
		p = tp_protos_find(ps, target(nog), "open", 0x4100);
		regs = (struct user_regs_struct){.rdi = (uintptr_t)data, .rsi = 0x241};
		tp_proto_format_args(p, self, &regs, NULL, buf, sizeof(buf));
		is_str(buf, "\"hello\\n\", 0x241", "open: a string and flags in hex");
		p = tp_protos_find(ps, target(nog), "strchr", 0x4200);
		regs = (struct user_regs_struct){.rdi = 0x10, .rsi = '\n', .rax = (uintptr_t)data};
		tp_proto_format_args(p, self, &regs, NULL, buf, sizeof(buf));
		is_str(buf, "0x10, '\\n'", "strchr: unreadable string as its address, a char");
		tp_proto_format_ret(p, self, &regs, NULL, -1, buf, sizeof(buf), &failed);
		ok(!strcmp(buf, "\"hello\\n\"") && !failed, "strchr returns a string: %s", buf);
	}
	ok(!tp_protos_find(ps, target(nog), "f.isra.0", 0x5000), "a GCC clone has no prototype");
	ok(!tp_protos_find(ps, target(nog), "no_such_function", 0x6000), "unknown: NULL");
	tp_protos_free(ps);
	tp_protos_free(NULL);
}

/* A DWARF prototype on registers that cannot be read: no FP state, no process. */
static void check_unreadable(const char *t)
{
	struct user_regs_struct regs = {
	    .rdi = 0xffffffd6, .rsi = 123456789012, .rdx = 0x1000, .rcx = 7, .rsp = 0x2000};
	struct tp_protos *ps = tp_protos_new();
	const struct tp_proto *p;
	uint64_t vaddr = 0, size;
	char buf[256];

	tp_elf_lookup(target(t), "f_all", &vaddr, &size);
	p = tp_protos_find(ps, target(t), "f_all", vaddr);
	ok(p != NULL, "%s: f_all found by its link-time address", t);
	tp_proto_format_args(p, 0, &regs, NULL, buf, sizeof(buf));
	is_str(buf, "-42, 123456789012, 0x1000, ?, BLUE, NULL, false, {...}, ?, ?",
	       "%s: what cannot be read is shown as ?", t);
	regs.rcx = 5;
	tp_proto_format_args(p, 0, &regs, NULL, buf, sizeof(buf));
	ok(strstr(buf, "?, 5, NULL") != NULL, "%s: an enum value without a name in decimal", t);
	ok(tp_protos_find(ps, target(t), "f_all", vaddr + 1) == NULL,
	   "%s: no prototype for an address inside the function", t);
	tp_protos_free(ps);
}

int main(int argc, char **argv)
{
	target_dir = argc > 1 ? argv[1] : ".";
	tp_log_set_callback(log_cb);
	check_offline("proto-args-nog");
	check_unreadable("proto-args-g-O0");
	check_dwarf("proto-args-g-O0");
	check_dwarf("proto-args-g-O2");
	check_nodebug("proto-args-nog", false);
	check_nodebug("proto-args-static", true);
	return tap_done();
}
