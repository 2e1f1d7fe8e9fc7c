/* Program lookup (see paths.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"

const char *tp_path_dirs(void)
{
	const char *path = getenv("PATH");

	return path ? path : "/usr/local/bin:/usr/bin:/bin";
}

bool tp_path_next(const char **cursor, const char *file, char *buf, size_t len)
{
	size_t flen = strlen(file);

	while (*cursor) {
		const char *s = *cursor, *e = strchrnul(s, ':');
		size_t dlen = (size_t)(e - s);

		*cursor = *e ? e + 1 : NULL;
		if (dlen + flen + 3 > len)
			continue;
		if (dlen) {
			memcpy(buf, s, dlen);
		} else {
			buf[0] = '.';
			dlen = 1;
		}
		buf[dlen++] = '/';
		memcpy(buf + dlen, file, flen + 1);
		return true;
	}
	return false;
}

int tp_path_find_program(const char *name, char *out, size_t len)
{
	const char *cur = tp_path_dirs();

	if (strchr(name, '/')) {
		if (strlen(name) >= len)
			return -ENAMETOOLONG;
		strcpy(out, name);
		return access(out, F_OK) ? -ENOENT : 0;
	}
	if (!*name)
		return -ENOENT;
	while (tp_path_next(&cur, name, out, len))
		if (!access(out, X_OK))
			return 0;
	return -ENOENT;
}

const char *tp_path_beside(const char *agent, const char *env, const char *subdir, const char *name,
			   char *buf, size_t len)
{
	const char *val = getenv(env), *slash;

	if (val && *val)
		return access(val, R_OK) ? NULL : val;
	if (!agent || !(slash = strrchr(agent, '/')))
		return NULL;
	snprintf(buf, len, "%.*s/../%s/%s", (int)(slash - agent), agent, subdir, name);
	if (!access(buf, R_OK))
		return buf;
	snprintf(buf, len, "%.*s/%s", (int)(slash - agent), agent, name);
	return access(buf, R_OK) ? NULL : buf;
}
