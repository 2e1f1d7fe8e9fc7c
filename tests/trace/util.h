/* Helpers shared by the trace store's C tests: scratch directories and whole-file reads. */
#ifndef TP_TESTS_TRACE_UTIL_H
#define TP_TESTS_TRACE_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory under $TMPDIR; the trace goes in DIR/name so that the writer creates it. */
static inline char *util_tmpdir(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char *d = malloc(strlen(base) + 32);

	if (!d)
		exit(1);
	sprintf(d, "%s/tp-trace-XXXXXX", base);
	if (!mkdtemp(d)) {
		perror("mkdtemp");
		exit(1);
	}
	return d;
}

static inline char *util_path(const char *dir, const char *name)
{
	char *p = malloc(strlen(dir) + strlen(name) + 2);

	if (!p)
		exit(1);
	sprintf(p, "%s/%s", dir, name);
	return p;
}

static inline void util_rmtree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *p;
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		p = util_path(dir, de->d_name);
		if (!lstat(p, &st) && S_ISDIR(st.st_mode))
			util_rmtree(p);
		else
			unlink(p);
		free(p);
	}
	closedir(d);
	rmdir(dir);
}

/* The whole file, NUL-terminated; NULL if it cannot be read. */
static inline char *util_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return NULL;
	}
	fclose(f);
	buf[n] = 0;
	*len = (size_t)n;
	return buf;
}

#endif
