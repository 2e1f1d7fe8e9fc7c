/* Program lookup as execvp does it: the one reader of $PATH in tracepad. */
#ifndef TP_BASE_PATHS_H
#define TP_BASE_PATHS_H

#include <stdbool.h>
#include <stddef.h>

/* $PATH, or the default search list when it is unset ("/usr/local/bin:/usr/bin:/bin"). */
const char *tp_path_dirs(void);

/* The next candidate for @file in the colon-separated list at *@cursor ("dir/file"; "./file"
 * for an empty entry, which means the current directory), written to @buf.  Entries too
 * long for @buf are skipped.  Returns false at the end of the list.  No allocation: a forked
 * child iterates with it before execve. */
bool tp_path_next(const char **cursor, const char *file, char *buf, size_t len);

/* @name as execvp would find it: a name with a '/' is taken as it is (-ENOENT when it does
 * not exist), else the first executable candidate of tp_path_dirs().  Returns 0 with the path
 * in @out, -ENOENT, or -ENAMETOOLONG. */
int tp_path_find_program(const char *name, char *out, size_t len);

/* A file of tracepad's found beside the agent at @agent: environment variable @env's value
 * when set (NULL when unreadable), else "AGENT_DIR/../@subdir/@name" (the build tree) or
 * "AGENT_DIR/@name" (installed), written to @buf; NULL when neither is readable. */
const char *tp_path_beside(const char *agent, const char *env, const char *subdir, const char *name,
			   char *buf, size_t len);

#endif
