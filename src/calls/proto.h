/* Prototypes of traced functions for `tracepad calls`: from DWARF (libdw) when the object has
 * debug info, else from a built-in table of libc functions; and the text of arguments at a
 * call's entry and of its return value (with errno) at its return, in strace's manner. */
#ifndef TP_CALLS_PROTO_H
#define TP_CALLS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

struct tp_protos; /* cache over objects */
struct tp_proto;  /* one function's prototype (opaque) */

struct tp_protos *tp_protos_new(void);
void tp_protos_free(struct tp_protos *ps);

/* Prototype of function @name at link-time address @vaddr of ELF @path: from DWARF when the
 * object has debug info (the DW_TAG_subprogram whose entry is @vaddr, also from a separate
 * debug file found by build-id under /usr/lib/debug), else from the built-in table by @name
 * ("memcpy@GLIBC_2.14" matches "memcpy"), else NULL (also for GCC clones such as
 * "f.isra.0" or "f.constprop.0", whose calling convention is their own).  @name may be
 * NULL (DWARF only).  Cached per (path, vaddr): the first name asked for an address counts.
 * The result lives as long as @ps. */
const struct tp_proto *tp_protos_find(struct tp_protos *ps, const char *path, const char *name,
				      uint64_t vaddr);

/* Is the return value in st0 (long double)? */
bool tp_proto_ret_x87(const struct tp_proto *p);

/* Does formatting need the FP/SSE registers (float/double parameter or return)? */
bool tp_proto_needs_fp(const struct tp_proto *p);

/* Characters of a string or buffer shown before "..." (strace's -s; 32 by default, at most
 * 4096).  One setting for the process: tracepad traces one program at a time. */
void tp_proto_set_string_size(size_t n);

size_t tp_proto_string_size(void);

/* Where formatting reads the program's memory when @pid <= 0 (the agent engine: what its
 * records carry): @fn answers as tp_proc_read would, bytes read or -errno.  NULL: none. */
typedef ssize_t (*tp_proto_mem_fn)(void *ctx, uint64_t addr, void *buf, size_t len);
void tp_proto_set_mem(tp_proto_mem_fn fn, void *ctx);

/* What formatting @p's arguments and return value reads beyond the integer registers, for an
 * engine that copies it at the call (the agent): the strings and buffers of arguments (their
 * register 0-5 or stack slot 6+ above the return address; a buffer's length argument), the
 * bytes of stack-passed arguments, the xmm registers of arguments, the return's kind. */
#define TP_PROTO_READS_MAX 8
enum { TP_PROTO_RET_INT, TP_PROTO_RET_XMM0, TP_PROTO_RET_ST0, TP_PROTO_RET_STR };
struct tp_proto_reads {
	int nargs;
	struct {
		bool buf;
		int src, len_src;
	} arg[TP_PROTO_READS_MAX];
	unsigned stack;
	int nsse;
	int nint; /* integer registers the arguments take (a returned struct's pointer too) */
	int ret;
};
void tp_proto_reads(const struct tp_proto *p, struct tp_proto_reads *r);

/* The string at @addr of @pid as arguments show it (quoted, escaped, cut at the string size
 * then "..."; NULL; the address when unreadable): up to its NUL when @len < 0, else a buffer
 * of @len bytes; a path, not cut, when @len < -1.  Returns the length written (cut to fit @n). */
int tp_proto_format_string(pid_t pid, uint64_t addr, int64_t len, char *buf, size_t n);

/* Arguments, without parentheses, at the entry stop (rsp points at the return address, so
 * stack-passed arguments start at rsp+8), strace style: strings quoted and C-escaped, at most
 * the string size (32) characters then "..."; pointers 0x... or NULL; integers in decimal;
 * chars as 'c'; enums by name when DWARF knows it; float/double from the xmm registers (@fp
 * NULL: "?"); structs by value as {...}; "..." for the variadic part.  @p NULL: the six argument
 * registers, "rdi=0x1, rsi=0x2, ...".  Returns the length written (truncated to fit @len) or
 * -errno.  @pid <= 0: no memory is read (strings show as their addresses). */
int tp_proto_format_args(const struct tp_proto *p, pid_t pid, const struct user_regs_struct *regs,
			 const struct user_fpregs_struct *fp, char *buf, size_t len);

/* The return value at the return stop: "void" for void functions, then as arguments are
 * shown (double from xmm0).  *@failed is set when the prototype says the value means
 * failure (-1 or NULL with errno set, MAP_FAILED, or an error number returned as by
 * pthread_*); then " ENOENT (No such file or directory)" is appended, from @errno_val when it
 * is >= 0 or from the returned error number.  @p NULL: "0x..." of rax.  Returns the length
 * or -errno. */
int tp_proto_format_ret(const struct tp_proto *p, pid_t pid, const struct user_regs_struct *regs,
			const struct user_fpregs_struct *fp, int errno_val, char *buf, size_t len,
			bool *failed);

/* Would this return value be a failure with errno set (worth reading errno for)? */
bool tp_proto_failed(const struct tp_proto *p, const struct user_regs_struct *regs);

/* Offset of errno from the thread pointer for the libc at @libc_path mapped with @libc_bias
 * in @pid, from the code of __errno_location (fs:0 plus a TPOFF read from the GOT, or an
 * immediate in a static program), or for a static program without __errno_location, from
 * its TLS symbol errno.  errno of a stopped thread is the 4 bytes at regs.fs_base + *@tpoff.
 * Call it once libc is relocated (the GOT slot is filled by ld.so), e.g. at a traced call.
 * Returns 0, -ENOENT (neither found), -ENOTSUP (code not understood), -EFAULT or -errno. */
int tp_errno_tpoff(pid_t pid, const char *libc_path, uint64_t libc_bias, int64_t *tpoff);

/* Between proto.c and proto-libc.c: the built-in table.  @sig is the return kind, ':', one
 * letter per parameter, and '.' for a variadic tail (letters in proto-libc.c); @fail is the
 * failure convention ('-' none, 'm' -1 with errno, 'n' NULL with errno, 'M' MAP_FAILED
 * with errno, 'e' returns an error number). */
struct tp_libc_proto {
	const char *name;
	const char *sig;
	char fail;
};
const struct tp_libc_proto *tp_proto_libc_lookup(const char *name, size_t len);

#endif
