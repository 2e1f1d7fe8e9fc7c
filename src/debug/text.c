/* The program's memory as gdb reads and writes it through /proc/PID/task/TID/mem (the
 * seed's Write Memory): an int3 written into its text is a breakpoint of the repository
 * (every cache copy, now and later), the byte written back removes it, and reads show the
 * int3s gdb wrote; the text itself is never written.  Its /proc/PID/maps as gdb reads it
 * (`info proc mappings`) lists the program's own mappings only. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/procfs.h"
#include "dbt/map.h"
#include "dbt/rt-abi.h"
#include "debug/debug.h"
#include "debug/engine-priv.h"

#define MAX_FDS 64
#define INT3 0xcc

static struct {
	int fd;
	pid_t pid;
} memfds[MAX_FDS];

/* /proc/PID/maps of a program in the cache, as read at its open, the cache's lines out */
static struct {
	int fd; /* -1: free */
	char *text;
	size_t len;
} mapsfds[MAX_FDS] = {[0 ... MAX_FDS - 1] = {-1, NULL, 0}};

/* Is this maps line one of the code cache's (the runtime's region, its memfds)? */
static bool cache_line(const char *line, size_t len)
{
	struct tp_maps_ent e;

	if (tp_maps_parse_line(line, len, &e))
		return false;
	return (e.start >= TP_DBT_REGION && e.start < TP_DBT_SPACE_END) ||
	       (e.path_len > 16 && !strncmp(e.path, "/memfd:tracepad-", 16));
}

static void maps_open(int fd)
{
	size_t cap = 1 << 16, len = 0, out = 0;
	char *text = malloc(cap);
	ssize_t n;
	int i;

	for (i = 0; i < MAX_FDS && mapsfds[i].fd >= 0; i++)
		;
	if (!text || i == MAX_FDS) {
		free(text);
		return;
	}
	while ((n = pread(fd, text + len, cap - len, (off_t)len)) > 0) {
		char *bigger;

		len += (size_t)n;
		if (len < cap)
			continue;
		if (!(bigger = realloc(text, cap * 2))) {
			free(text);
			return;
		}
		text = bigger;
		cap *= 2;
	}
	for (size_t at = 0; at < len;) {
		const char *nl = memchr(text + at, '\n', len - at);
		size_t l = nl ? (size_t)(nl - (text + at)) + 1 : len - at;

		if (!cache_line(text + at, l))
			memmove(text + out, text + at, l), out += l;
		at += l;
	}
	mapsfds[i].fd = fd;
	mapsfds[i].text = text;
	mapsfds[i].len = out;
}

void tp_debug_on_open(int fd, const char *path)
{
	int pid, tid, n = 0;

	if (fd >= 0 &&
	    ((sscanf(path, "/proc/%d/task/%d/maps%n", &pid, &tid, &n) == 2 && !path[n]) ||
	     (sscanf(path, "/proc/%d/maps%n", &pid, &n) == 1 && !path[n])) &&
	    tp_debug_proc_of(pid)) {
		maps_open(fd);
		return;
	}
	n = 0;
	if (fd < 0 ||
	    (sscanf(path, "/proc/%d/task/%d/mem%n", &pid, &tid, &n) != 2 &&
	     sscanf(path, "/proc/%d/mem%n", &pid, &n) != 1) ||
	    path[n])
		return;
	for (int i = 0; i < MAX_FDS; i++)
		if (!memfds[i].pid) {
			memfds[i].fd = fd;
			memfds[i].pid = pid;
			return;
		}
}

void tp_debug_on_close(int fd)
{
	for (int i = 0; i < MAX_FDS; i++) {
		if (memfds[i].pid && memfds[i].fd == fd)
			memfds[i].pid = 0;
		if (mapsfds[i].fd == fd) {
			free(mapsfds[i].text);
			mapsfds[i].fd = -1;
		}
	}
}

static struct dproc *proc_of_fd(int fd)
{
	for (int i = 0; i < MAX_FDS; i++)
		if (memfds[i].pid && memfds[i].fd == fd)
			return tp_debug_proc_of(memfds[i].pid);
	return NULL;
}

bool tp_debug_pread(int fd, void *buf, size_t len, off_t off, ssize_t *ret)
{
	struct dproc *pr = proc_of_fd(fd);

	for (int i = 0; i < MAX_FDS; i++)
		if (mapsfds[i].fd == fd && fd >= 0) {
			size_t at = off < 0 ? 0 : (size_t)off, n;

			n = at < mapsfds[i].len ? mapsfds[i].len - at : 0;
			n = n < len ? n : len;
			memcpy(buf, mapsfds[i].text + at, n);
			*ret = (ssize_t)n;
			return true;
		}

	if (!pr || !pr->map)
		return false;
	*ret = tp_dbt_map_read_text(pr->map, (uint64_t)off, buf, len, 1);
	if (*ret < 0) {
		errno = (int)-*ret;
		*ret = -1;
	}
	/* an execute breakpoint of the debug registers wrote no int3 into the text */
	for (unsigned i = 0; *ret > 0 && i < pr->nhw; i++) {
		uint64_t at = pr->hw[i] - (uint64_t)off;
		uint8_t orig;

		if (at < (uint64_t)*ret && !tp_debug_sw_bp_at(pr, pr->hw[i]) &&
		    tp_dbt_map_bp_at(pr->map, pr->hw[i], &orig))
			((uint8_t *)buf)[at] = orig;
	}
	return true;
}

struct exec_q {
	uint64_t addr;
	bool exec;
};

static int exec_one(void *arg, const struct tp_maps_ent *e)
{
	struct exec_q *q = arg;

	if (q->addr >= e->start && q->addr < e->end) {
		q->exec = tp_maps_exec(e);
		return 1;
	}
	return 0;
}

bool tp_debug_pwrite(int fd, const void *buf, size_t len, off_t off, ssize_t *ret)
{
	struct dproc *pr = proc_of_fd(fd);
	struct exec_q q = {(uint64_t)off, false};
	uint8_t b = len == 1 ? *(const uint8_t *)buf : 0, orig;
	int err;

	if (!pr || !pr->map || len != 1)
		return false;
	if (tp_dbt_map_bp_at(pr->map, q.addr, &orig)) {
		/* the seed's Write Memory: the breakpoint's byte put back removes it (unless an
		 * execute breakpoint of the debug registers is there too) */
		if (b == INT3) {
			err = tp_debug_sw_note(pr, q.addr, true);
		} else if (b == orig) {
			tp_debug_sw_note(pr, q.addr, false);
			err = tp_debug_hw_bp_at(pr, q.addr) ? 0
							    : tp_dbt_map_bp_remove(pr->map, q.addr);
		} else {
			return false;
		}
	} else if (b == INT3) {
		/* an int3 into text (data writes of 0xcc go to the data) */
		if (tp_maps_foreach(pr->pid, exec_one, &q) < 0 || !q.exec)
			return false;
		err = tp_dbt_map_bp_insert(pr->map, q.addr);
		if (!err)
			err = tp_debug_sw_note(pr, q.addr, true);
	} else {
		return false;
	}
	if (err) {
		errno = -err;
		*ret = -1;
	} else {
		*ret = 1;
	}
	return true;
}
