/* What the two halves of calls/proto share: the types of parameters as read from DWARF or the
 * libc table (proto-dwarf.c) and as printed from a stopped thread's registers (proto.c). */
#ifndef TP_CALLS_PROTO_PRIV_H
#define TP_CALLS_PROTO_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "calls/proto.h"

/* Text written into a fixed buffer, cut (and NUL-terminated) when it is full. */
struct out {
	char *buf;
	size_t len, pos;
};
void tp_calls_put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define STR_MAX 4096   /* characters of a string shown at most (-s) */
#define MAX_ENUMS 4096 /* enumerators kept per enum type */
#define MAX_PARAMS 64

enum kind {
	K_VOID,
	K_INT, /* signed, @size bytes */
	K_UINT,
	K_BOOL,
	K_CHAR,
	K_PTR,
	K_STR, /* char *: the string it points to */
	K_BUF, /* const void * whose length is the next argument (write) */
	K_HEX,
	K_OCT,
	K_FLOAT,
	K_DOUBLE,
	K_LDOUBLE, /* x87 80-bit, passed in memory, returned in st0 */
	K_ENUM,
	K_STRUCT,    /* by value: {...}; passing follows cls[] */
	K_OTHER_SSE, /* __float128 and friends: one xmm register, shown as "?" */
};

/* SysV classes of an eightbyte. */
enum cls { C_NONE, C_INT, C_SSE, C_MEM };

struct enumv {
	uint64_t val;
	char *name;
};

struct ptype {
	uint8_t kind;
	bool is_signed; /* K_ENUM */
	uint8_t cls[2]; /* K_STRUCT: class of each eightbyte, cls[0] == C_MEM for memory */
	uint32_t size;
	uint32_t nenums;
	struct enumv *enums;
};

struct tp_proto {
	struct ptype ret;
	struct ptype *params;
	int nparams;
	bool variadic;
	bool needs_fp;
	char fail; /* as tp_libc_proto.fail */
};

#endif
