/* The one parser of /proc/PID/maps: a pure line parser that needs no allocation and no libc
 * (the in-process agent parses /proc/self/maps with it from signal handlers), and a reader
 * for the tracer side that hands every mapping of a process to a callback. */
#ifndef TP_BASE_PROCFS_H
#define TP_BASE_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One line of /proc/PID/maps: "start-end perms offset dev inode   path". */
struct tp_maps_ent {
	uint64_t start, end, offset;
	uint64_t inode;
	char perms[5];	  /* "r-xp", NUL-terminated */
	bool deleted;	  /* the path ended with " (deleted)", which path_len leaves out */
	const char *path; /* into the line (NUL-terminated only from tp_maps_foreach) */
	size_t path_len;  /* 0 for an anonymous mapping */
};

/* Parse the @len bytes at @line (one line, without or with its '\n').  Returns 0, or -1 when
 * the line is not a maps line.  Async-signal-safe: touches nothing but @line and @e. */
int tp_maps_parse_line(const char *line, size_t len, struct tp_maps_ent *e);

static inline bool tp_maps_exec(const struct tp_maps_ent *e)
{
	return e->perms[2] == 'x';
}

/* Called for each mapping; a non-zero return stops the walk and is returned. */
typedef int (*tp_maps_fn)(void *arg, const struct tp_maps_ent *e);

/* Hand each mapping of @pid (0: the calling process) to @fn, in address order, path
 * NUL-terminated.  Returns 0, what @fn returned, or -errno (-ENOENT: no such process). */
int tp_maps_foreach(pid_t pid, tp_maps_fn fn, void *arg);

#endif
