/* <tracepad/tracepoint.h>: static tracepoints compiled into a program.  A disabled site is one
 * 5-byte NOP; libtracepad patches it into a jmp to an out-of-line block that records the event.
 * Dependency-free; C11 (gcc, clang: uses __asm__ goto and _Generic) and C++17.
 *
 *	TP_POINT(foo_entry);                        // define a point (once, at file scope)
 *	TP_POINT_DECLARE(foo_entry);                // use it from another translation unit
 *	int foo(int n, const char *s) {
 *		TP_TRACE(foo_entry, "foo(%d, %s)", n, s);   // any number of sites per point
 *		...
 *	}
 *	tp_point_enable(&foo_entry);  tp_points_enable("foo_*");  tp_point_disable(&foo_entry);
 *
 * Link with libtracepad (pkg-config tracepad).  TRACEPAD_MARKERS=glob[,glob...] in the
 * environment enables the matching points at start; events then go to stderr as
 * "point: formatted text" lines unless a consumer was set with tp_markers_set_consumer() or
 * `tracepad markers record` records the process (then to its trace, and to the consumer).
 * Formatting is done by the runtime from the typed arguments (printf conversions d i u x X o c
 * s p f e g a and %%, with flags, width and precision; length modifiers are ignored because the
 * type is recorded).  At most 8 arguments per site.  Sites must not be placed in a C `inline`
 * (non-static) function (they use a function-local static).  With -Wpedantic nothing extra is
 * needed.  The ELF note section ".note.tracepad" (owner "tracepad", type TP_NOTE_SITE, not
 * loaded) describes every site for tools that read a binary at rest, like USDT's
 * .note.stapsdt: six 64-bit link-time addresses: the NOP5, the out-of-line block, the
 * tp_site_desc, the point's name, the format string, the type codes (NUL-terminated strings).
 */
#ifndef TRACEPAD_TRACEPOINT_H
#define TRACEPAD_TRACEPOINT_H

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>
#include <type_traits>
#else
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A point: the key shared by all its sites.  flags is owned by the runtime. */
struct tp_point {
	const char *name;
	volatile uint32_t flags; /* TP_POINT_F_* */
	uint32_t reserved;
};
#define TP_POINT_F_ENABLED 1u
#define TP_NOTE_SITE 1

/* Argument type codes (one char per argument in tp_site_desc.types). */
#define TP_ARG_I8 'b'
#define TP_ARG_I16 'h'
#define TP_ARG_I32 'i'
#define TP_ARG_I64 'l'
#define TP_ARG_U8 'B'
#define TP_ARG_U16 'H'
#define TP_ARG_U32 'I'
#define TP_ARG_U64 'L'
#define TP_ARG_PTR 'p'
#define TP_ARG_DOUBLE 'd'
#define TP_ARG_STR 's'
#define TP_MAX_ARGS 8

union tp_arg {
	int64_t i;
	uint64_t u;
	double d;
	const void *p;
	const char *s;
};

/* What a TP_TRACE knows at compile time; shared by the copies the compiler makes of a site. */
struct tp_site_desc {
	struct tp_point *point;
	const char *fmt;
	const char *types; /* NUL-terminated, one TP_ARG_* per argument */
	const char *file;
	uint32_t line;
	uint32_t nargs;
};

/* One placed site, in section "tracepad_sites" (writable: state belongs to the runtime). */
struct tp_site {
	const struct tp_site_desc *desc;
	uintptr_t addr;	  /* the NOP5 */
	uintptr_t target; /* the out-of-line block that records the event */
	uintptr_t state;  /* runtime-owned: 1 while patched to the jmp */
};

/* Enable/disable every site of @point (also sites registered later, e.g. by dlopen).
 * Return the number of sites patched, or -errno: -EILSEQ when a site does not hold the bytes
 * expected (it is left untouched; other sites are still patched), -ERANGE out of jmp reach. */
int tp_point_enable(struct tp_point *point);
int tp_point_disable(struct tp_point *point);
/* 1 if enabled, 0 if not. */
int tp_point_enabled(const struct tp_point *point);
/* By glob (fnmatch) over point names, comma-separated alternatives allowed.  Return the
 * number of points matched, -ENOENT when none matched, or a patch error as above. */
int tp_points_enable(const char *glob);
int tp_points_disable(const char *glob);

/* The point named @name among the registered sites (the first found if several objects define
 * one), or NULL.  Query by name: tp_point_enabled(tp_point_find("foo_entry")). */
struct tp_point *tp_point_find(const char *name);

/* Call @fn for every registered site (stops when fn returns non-zero, which is returned). */
int tp_sites_foreach(int (*fn)(const struct tp_site *site, void *ctx), void *ctx);

/* A consumer receives every event of an enabled site, in the thread that hit it.  NULL
 * restores the default (formatted lines on stderr). */
typedef void (*tp_consumer_fn)(const struct tp_site_desc *desc, const union tp_arg *args,
			       void *ctx);
void tp_markers_set_consumer(tp_consumer_fn fn, void *ctx);

/* Format an event like the default consumer (without the point name or newline).  Returns
 * the length the text needs (snprintf-like); @buf is always NUL-terminated if @len > 0. */
int tp_markers_format(const struct tp_site_desc *desc, const union tp_arg *args, char *buf,
		      size_t len);

/* Testing only: sleep @usec microseconds between the steps of every patch; the number of
 * times a thread met a site's temporary int3 and was sent on its way. */
void tp__markers_set_patch_delay(unsigned usec);
unsigned long tp__markers_trap_count(void);

/* Internal: used by the code this header generates. */
void tp__fire(const struct tp_site_desc *desc, const union tp_arg *args);
void tp__sites_register(struct tp_site *start, struct tp_site *stop);
void tp__sites_unregister(struct tp_site *start, struct tp_site *stop);

/* Per object (executable or shared library): the linker brackets this object's sites. */
extern struct tp_site __start_tracepad_sites[] __attribute__((weak, visibility("hidden")));
extern struct tp_site __stop_tracepad_sites[] __attribute__((weak, visibility("hidden")));

/* Every translation unit registers its object's range; the runtime counts references, so an
 * object registers once however many of its units include this header, and dlclose
 * unregisters it.  Tools that only need the types and codes of this header (tracepad itself)
 * define TP_NO_SITE_REGISTRATION first: they place no site and do not link libtracepad. */
#ifndef TP_NO_SITE_REGISTRATION
__attribute__((constructor, used)) static void tp__object_ctor(void)
{
	tp__sites_register(__start_tracepad_sites, __stop_tracepad_sites);
}
__attribute__((destructor, used)) static void tp__object_dtor(void)
{
	tp__sites_unregister(__start_tracepad_sites, __stop_tracepad_sites);
}
#endif

#ifdef __cplusplus
}
#endif

#define TP_POINT(var) struct tp_point var = {#var, 0, 0}
#define TP_POINT_DECLARE(var) extern struct tp_point var

#define TP__CAT_(a, b) a##b
#define TP__CAT(a, b) TP__CAT_(a, b)
#define TP__NARG(...) TP__NARG_(__VA_ARGS__, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define TP__NARG_(a1, a2, a3, a4, a5, a6, a7, a8, a9, n, ...) n
#define TP__FIRST(...) TP__FIRST_(__VA_ARGS__, 0)
#define TP__FIRST_(a, ...) a
#define TP__MAP(f, ...) TP__CAT(TP__MAP_, TP__NARG(__VA_ARGS__))(f, __VA_ARGS__)
#define TP__MAP_1(f, a) f(a)
#define TP__MAP_2(f, a, ...) f(a), TP__MAP_1(f, __VA_ARGS__)
#define TP__MAP_3(f, a, ...) f(a), TP__MAP_2(f, __VA_ARGS__)
#define TP__MAP_4(f, a, ...) f(a), TP__MAP_3(f, __VA_ARGS__)
#define TP__MAP_5(f, a, ...) f(a), TP__MAP_4(f, __VA_ARGS__)
#define TP__MAP_6(f, a, ...) f(a), TP__MAP_5(f, __VA_ARGS__)
#define TP__MAP_7(f, a, ...) f(a), TP__MAP_6(f, __VA_ARGS__)
#define TP__MAP_8(f, a, ...) f(a), TP__MAP_7(f, __VA_ARGS__)
#define TP__MAP_9(f, a, ...) f(a), TP__MAP_8(f, __VA_ARGS__)

#ifdef __cplusplus
template <class T> constexpr char tp__code_of()
{
	using D = std::decay_t<T>;
	if constexpr (std::is_same_v<D, char *> || std::is_same_v<D, const char *>)
		return TP_ARG_STR;
	else if constexpr (std::is_pointer_v<D> || std::is_null_pointer_v<D>)
		return TP_ARG_PTR;
	else if constexpr (std::is_floating_point_v<D>)
		return TP_ARG_DOUBLE;
	else if constexpr (std::is_enum_v<D>)
		return tp__code_of<std::underlying_type_t<D>>();
	else {
		static_assert(std::is_integral_v<D>, "TP_TRACE: unsupported argument type");
		constexpr bool s = std::is_signed_v<D>;
		return sizeof(D) == 1	? (s ? 'b' : 'B')
		       : sizeof(D) == 2 ? (s ? 'h' : 'H')
		       : sizeof(D) == 4 ? (s ? 'i' : 'I')
					: (s ? 'l' : 'L');
	}
}
template <class T> inline union tp_arg tp__value_of(T x)
{
	union tp_arg a;
	using D = std::decay_t<T>;
	if constexpr (std::is_same_v<D, char *> || std::is_same_v<D, const char *>)
		a.s = x;
	else if constexpr (std::is_pointer_v<D>)
		a.p = (const void *)x;
	else if constexpr (std::is_null_pointer_v<D>)
		a.p = nullptr;
	else if constexpr (std::is_floating_point_v<D>)
		a.d = (double)x;
	else if constexpr (tp__code_of<D>() >= 'a')
		a.i = (int64_t)x;
	else
		a.u = (uint64_t)x;
	return a;
}
#define TP__T(x) tp__code_of<decltype((x))>()
#define TP__V(x) tp__value_of(x)
#else
static inline union tp_arg tp__v_i(int64_t x)
{
	union tp_arg a;
	a.i = x;
	return a;
}
static inline union tp_arg tp__v_u(uint64_t x)
{
	union tp_arg a;
	a.u = x;
	return a;
}
static inline union tp_arg tp__v_d(double x)
{
	union tp_arg a;
	a.d = x;
	return a;
}
static inline union tp_arg tp__v_s(const char *x)
{
	union tp_arg a;
	a.s = x;
	return a;
}
static inline union tp_arg tp__v_p(const volatile void *x)
{
	union tp_arg a;
	a.p = (const void *)x;
	return a;
}
#define TP__T(x)                                                                                   \
	_Generic((x), _Bool: 'B', char: 'b', signed char: 'b', unsigned char: 'B', short: 'h',    \
		unsigned short: 'H', int: 'i', unsigned int: 'I', long: 'l', unsigned long: 'L',   \
		long long: 'l', unsigned long long: 'L', float: 'd', double: 'd', char *: 's',     \
		const char *: 's', default: 'p')
#define TP__V(x)                                                                                   \
	_Generic((x), _Bool: tp__v_u, char: tp__v_i, signed char: tp__v_i,                         \
		unsigned char: tp__v_u, short: tp__v_i, unsigned short: tp__v_u, int: tp__v_i,    \
		unsigned int: tp__v_u, long: tp__v_i, unsigned long: tp__v_u, long long: tp__v_i,  \
		unsigned long long: tp__v_u, float: tp__v_d, double: tp__v_d, char *: tp__v_s,     \
		const char *: tp__v_s, default: tp__v_p)(x)
#endif

/* The NOP5 (0f 1f 44 00 00) and its records: the site in "tracepad_sites" ("awR": writable
 * for the runtime's state, SHF_GNU_RETAIN against --gc-sections, "?" to share the COMDAT group
 * of an inline function so a discarded copy takes its record along) and a non-allocated
 * note with link-time addresses: site, target, desc, point name, format, types. */
#define TP__ASM                                                                                    \
	"1: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n\t"                                                \
	".pushsection tracepad_sites, \"awR?\"\n\t"                                                \
	".balign 8\n\t"                                                                            \
	".quad %c0, 1b, %l4, 0\n\t"                                                                \
	".popsection\n\t"                                                                          \
	".pushsection .note.tracepad, \"?\", @note\n\t"                                            \
	".balign 4\n\t"                                                                            \
	".4byte 9, 48, 1\n\t"                                                                      \
	".asciz \"tracepad\"\n\t"                                                                  \
	".balign 4\n\t"                                                                            \
	".quad 1b, %l4, %c0, %c1, %c2, %c3\n\t"                                                    \
	".popsection"

#define TP_TRACE(point, ...)                                                                       \
	do {                                                                                       \
		static const char tp__types[] = {TP__MAP(TP__T, __VA_ARGS__), 0};                  \
		static const char tp__name[] = #point;                                             \
		static const struct tp_site_desc tp__desc = {                                      \
		    &(point), TP__FIRST(__VA_ARGS__),	tp__types + 1, __FILE__,                   \
		    __LINE__, TP__NARG(__VA_ARGS__) - 1};                                          \
		__asm__ goto(TP__ASM                                                               \
			     :                                                                     \
			     : "i"(&tp__desc), "i"(tp__name), "i"(TP__FIRST(__VA_ARGS__)),         \
			       "i"(tp__types + 1)                                                  \
			     :                                                                     \
			     : TP__CAT(tp__on_, __LINE__));                                        \
		if (0) {                                                                           \
			TP__CAT(tp__on_, __LINE__) :                                               \
			{                                                                          \
				const union tp_arg tp__args[] = {TP__MAP(TP__V, __VA_ARGS__)};     \
				tp__fire(&tp__desc, tp__args + 1);                                 \
			}                                                                          \
		}                                                                                  \
	} while (0)

#endif
