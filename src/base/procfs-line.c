/* The /proc/PID/maps line parser (see procfs.h).  It must stay free of libc calls and of
 * writable state: the agent compiles this file into code that runs inside traced programs,
 * in signal handlers. */
#include "base/procfs.h"

static bool hex_field(const char **p, const char *end, uint64_t *v)
{
	const char *s = *p;
	uint64_t x = 0;

	for (; *p < end; (*p)++) {
		char c = **p;

		if (c >= '0' && c <= '9')
			x = x * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			x = x * 16 + (uint64_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			x = x * 16 + (uint64_t)(c - 'A' + 10);
		else
			break;
	}
	*v = x;
	return *p > s;
}

static void skip_spaces(const char **p, const char *end)
{
	while (*p < end && (**p == ' ' || **p == '\t'))
		(*p)++;
}

static void skip_word(const char **p, const char *end)
{
	while (*p < end && **p != ' ' && **p != '\t')
		(*p)++;
}

int tp_maps_parse_line(const char *line, size_t len, struct tp_maps_ent *e)
{
	static const char del[] = " (deleted)";
	const size_t dlen = sizeof(del) - 1;
	const char *p = line, *end = line + len, *w;

	while (end > p && (end[-1] == '\n' || end[-1] == '\r'))
		end--;
	if (!hex_field(&p, end, &e->start) || p == end || *p++ != '-' ||
	    !hex_field(&p, end, &e->end))
		return -1;
	skip_spaces(&p, end);
	w = p;
	skip_word(&p, end);
	if (p - w < 4)
		return -1;
	for (int i = 0; i < 4; i++)
		e->perms[i] = w[i];
	e->perms[4] = 0;
	skip_spaces(&p, end);
	if (!hex_field(&p, end, &e->offset))
		return -1;
	/* dev (major:minor), then inode */
	skip_spaces(&p, end);
	w = p;
	skip_word(&p, end);
	if (p == w)
		return -1;
	skip_spaces(&p, end);
	w = p;
	for (e->inode = 0; p < end && *p >= '0' && *p <= '9'; p++)
		e->inode = e->inode * 10 + (uint64_t)(*p - '0');
	if (p == w)
		return -1;
	skip_spaces(&p, end);
	e->path = p;
	e->path_len = (size_t)(end - p);
	e->deleted = false;
	if (e->path_len > dlen) {
		bool same = true;

		for (size_t i = 0; i < dlen; i++)
			same &= (end - dlen)[i] == del[i];
		if (same) {
			e->deleted = true;
			e->path_len -= dlen;
		}
	}
	return 0;
}
