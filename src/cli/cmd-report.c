/* tracepad report: a summary of a trace: events per class, discarded events per stream, the
 * time span and the rate.  Each stream is read on its own (the reader over that stream's
 * file alone) so that discards are attributed to the stream whose packets record them. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/trace-read.h"
#include "base/text.h"

static const char usage_text[] =
    "usage: tracepad report [OPTIONS] DIR\n"
    "\n"
    "Summarise the trace in DIR: events per event class (most frequent first),\n"
    "events discarded by the producers per stream and in total, the number of\n"
    "streams, the first and last timestamps, the duration and the event rate.\n"
    "\n"
    "  --json          write the report as one JSON object\n"
    "  -o FILE         write to FILE instead of standard output\n"
    "  -h, --help      show this help\n";

/* As large as the reader accepts. */

struct rstream {
	char *file;
	uint64_t events, discarded;
};

struct rclass {
	uint32_t id;
	bool used;
	char *name;
	uint64_t count;
};

struct report {
	const char *dir;
	struct rstream *st;
	size_t nr_st;
	struct rclass *cls; /* open addressing on the class id */
	size_t nr_cls, cap_cls;
	uint64_t events, discarded, first, last;
};

/* A stream file truncated while mapped: the only way left to fail is to say so. */
static void on_sigbus(int sig)
{
	static const char msg[] = "tracepad report: a stream file shrank while it was read\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(2);
	_exit(2);
}

/* The stream files, exactly as tp_trace_reader_open lists them. */
static int list_streams(struct report *rp, int dirfd)
{
	char **names;
	size_t n;
	int err = tp_trace_dir_streams(dirfd, &names, &n);

	if (err)
		return err;
	rp->st = calloc(n ? n : 1, sizeof(*rp->st));
	if (!rp->st) {
		while (n--)
			free(names[n]);
		free(names);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		rp->st[i].file = names[i];
	rp->nr_st = n;
	free(names);
	return 0;
}

static struct rclass *class_get(struct report *rp, uint32_t id, const char *name)
{
	size_t i;

	if ((rp->nr_cls + 1) * 2 > rp->cap_cls) {
		size_t ncap = rp->cap_cls ? rp->cap_cls * 2 : 64;
		struct rclass *nc = calloc(ncap, sizeof(*nc));

		if (!nc)
			return NULL;
		for (size_t j = 0; j < rp->cap_cls; j++) {
			if (!rp->cls[j].used)
				continue;
			i = (rp->cls[j].id * 2654435761u) & (ncap - 1);
			while (nc[i].used)
				i = (i + 1) & (ncap - 1);
			nc[i] = rp->cls[j];
		}
		free(rp->cls);
		rp->cls = nc;
		rp->cap_cls = ncap;
	}
	i = (id * 2654435761u) & (rp->cap_cls - 1);
	while (rp->cls[i].used && rp->cls[i].id != id)
		i = (i + 1) & (rp->cap_cls - 1);
	if (!rp->cls[i].used) {
		rp->cls[i].name = strdup(name);
		if (!rp->cls[i].name)
			return NULL;
		rp->cls[i].used = true;
		rp->cls[i].id = id;
		rp->nr_cls++;
	}
	return &rp->cls[i];
}

/* Read stream @i alone.  Returns 0, or the exit status after a one-line error. */
static int read_stream(struct report *rp, int dirfd, const char *meta, size_t mlen, size_t i)
{
	struct rstream *s = &rp->st[i];
	struct tp_trace_mem_stream ms = {NULL, 0};
	const struct tp_trace_event *ev;
	struct tp_trace_reader *r;
	struct stat st;
	int fd, err, status = 0;

	fd = openat(dirfd, s->file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		tp_cli_error("report", "%s/%s: %s", rp->dir, s->file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 2;
	}
	if (st.st_size > 0) {
		ms.data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (ms.data == MAP_FAILED) {
			tp_cli_error("report", "%s/%s: %s", rp->dir, s->file, strerror(errno));
			close(fd);
			return 2;
		}
		ms.size = (size_t)st.st_size;
	}
	close(fd);
	err = tp_trace_reader_open_mem(meta, mlen, &ms, 1, &r);
	if (err) {
		tp_cli_error("report", "%s: cannot read the trace: %s", rp->dir, strerror(-err));
		status = err == -ENOMEM ? 1 : 2;
		goto out;
	}
	while ((err = tp_trace_reader_next(r, &ev)) > 0) {
		struct rclass *c = class_get(rp, ev->id, ev->name);

		if (!c) {
			tp_cli_error("report", "out of memory");
			status = 1;
			break;
		}
		c->count++;
		if (!rp->events || ev->ts < rp->first)
			rp->first = ev->ts;
		if (!rp->events || ev->ts > rp->last)
			rp->last = ev->ts;
		rp->events++;
		s->events++;
	}
	if (err < 0) {
		tp_cli_error("report", "%s: corrupt trace: stream %s after %" PRIu64 " events: %s",
			     rp->dir, s->file, s->events, strerror(-err));
		status = 2;
	}
	s->discarded = tp_trace_reader_discarded(r);
	rp->discarded += s->discarded;
	tp_trace_reader_close(r);
out:
	if (ms.size)
		munmap((void *)ms.data, ms.size);
	return status;
}

static int cmp_classes(const void *a, const void *b)
{
	const struct rclass *x = a, *y = b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return strcmp(x->name, y->name);
}

static double rate(const struct report *rp)
{
	uint64_t d = rp->last - rp->first;

	return d ? (double)rp->events * 1e9 / (double)d : 0.0;
}

static void put_text(const struct report *rp, FILE *f)
{
	char first[64], last[64], dur[32];

	tp_cli_fmt_time(rp->first, first, sizeof(first));
	tp_cli_fmt_time(rp->last, last, sizeof(last));
	tp_cli_fmt_secs(rp->last - rp->first, dur, sizeof(dur));
	fprintf(f,
		"trace      %s\nstreams    %zu\nevents     %" PRIu64 "\ndiscarded  %" PRIu64 "\n",
		rp->dir, rp->nr_st, rp->events, rp->discarded);
	if (rp->events)
		fprintf(f,
			"first      %s\nlast       %s\nduration   %s s\nrate       %.1f events/s\n",
			first, last, dur, rate(rp));
	fprintf(f, "\n  stream        events   discarded  file\n");
	for (size_t i = 0; i < rp->nr_st; i++) {
		fprintf(f, "  %6zu  %12" PRIu64 "  %10" PRIu64 "  ", i, rp->st[i].events,
			rp->st[i].discarded);
		tp_cli_put_name(f, rp->st[i].file, false);
		fputc('\n', f);
	}
	fprintf(f, "\n        count       %%  class\n");
	for (size_t i = 0; i < rp->nr_cls; i++) {
		fprintf(f, "  %11" PRIu64 "  %5.1f%%  ", rp->cls[i].count,
			100.0 * (double)rp->cls[i].count / (double)rp->events);
		tp_cli_put_name(f, rp->cls[i].name, false);
		fputc('\n', f);
	}
}

static void put_json(const struct report *rp, FILE *f)
{
	char when[64];

	fputs("{\"trace\": ", f);
	tp_json_str(f, rp->dir, strlen(rp->dir));
	fprintf(f, ", \"nr_streams\": %zu, \"events\": %" PRIu64 ", \"discarded\": %" PRIu64,
		rp->nr_st, rp->events, rp->discarded);
	if (rp->events) {
		tp_cli_fmt_time(rp->first, when, sizeof(when));
		fprintf(f, ", \"first_ns\": %" PRIu64 ", \"first\": \"%s\"", rp->first, when);
		tp_cli_fmt_time(rp->last, when, sizeof(when));
		fprintf(f, ", \"last_ns\": %" PRIu64 ", \"last\": \"%s\"", rp->last, when);
	} else {
		fputs(", \"first_ns\": null, \"first\": null, \"last_ns\": null, \"last\": null",
		      f);
	}
	fprintf(f, ", \"duration_ns\": %" PRIu64 ", \"events_per_second\": %.1f",
		rp->last - rp->first, rate(rp));
	fputs(", \"streams\": [", f);
	for (size_t i = 0; i < rp->nr_st; i++) {
		fprintf(f, "%s{\"index\": %zu, \"file\": ", i ? ", " : "", i);
		tp_json_str(f, rp->st[i].file, strlen(rp->st[i].file));
		fprintf(f, ", \"events\": %" PRIu64 ", \"discarded\": %" PRIu64 "}",
			rp->st[i].events, rp->st[i].discarded);
	}
	fputs("], \"classes\": [", f);
	for (size_t i = 0; i < rp->nr_cls; i++) {
		fputs(i ? ", {\"name\": " : "{\"name\": ", f);
		tp_json_str(f, rp->cls[i].name, strlen(rp->cls[i].name));
		fprintf(f, ", \"count\": %" PRIu64 "}", rp->cls[i].count);
	}
	fputs("]}\n", f);
}

int cmd_report(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"json", no_argument, NULL, 'J'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct sigaction sa = {.sa_handler = on_sigbus};
	struct report rp = {.dir = NULL};
	struct tp_cli_trace t;
	const char *outfile = NULL;
	char *meta = NULL;
	size_t mlen = 0, n;
	bool json = false;
	int opt, err, status, dirfd = -1;
	FILE *out;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'J':
			json = true;
			break;
		case 'o':
			outfile = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		tp_cli_error("report", optind == argc ? "no trace directory (tracepad report DIR)"
						      : "one trace directory at a time");
		return 2;
	}
	rp.dir = argv[optind];
	/* The whole trace opened once for its checks and errors, then each stream alone. */
	status = tp_cli_trace_open(&t, "report", rp.dir, false);
	if (status)
		return status;
	n = tp_trace_reader_nr_streams(t.r);
	tp_cli_trace_close(&t);
	dirfd = open(rp.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	err = dirfd < 0 ? -errno : tp_trace_dir_metadata(dirfd, &meta, &mlen);
	if (!err)
		err = list_streams(&rp, dirfd);
	if (!err && rp.nr_st != n) {
		tp_cli_error("report", "%s: the stream files changed while they were read", rp.dir);
		status = 2;
		goto out;
	}
	if (err) {
		tp_cli_error("report", "%s: %s", rp.dir, strerror(-err));
		status = err == -ENOMEM ? 1 : 2;
		goto out;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	for (size_t i = 0; i < rp.nr_st && !status; i++)
		status = read_stream(&rp, dirfd, meta, mlen, i);
	if (status)
		goto out;
	/* Compact the hash table into a sorted list. */
	n = 0;
	for (size_t i = 0; i < rp.cap_cls; i++) {
		struct rclass c = rp.cls[i];

		if (!c.used)
			continue;
		rp.cls[i] = (struct rclass){.used = false};
		rp.cls[n++] = c;
	}
	rp.nr_cls = n;
	if (n)
		qsort(rp.cls, n, sizeof(*rp.cls), cmp_classes);
	out = tp_cli_out_open("report", outfile);
	if (!out) {
		status = 2;
		goto out;
	}
	if (json)
		put_json(&rp, out);
	else
		put_text(&rp, out);
	status = tp_cli_out_close("report", out, outfile, true);
out:
	for (size_t i = 0; i < rp.cap_cls; i++)
		free(rp.cls[i].name);
	free(rp.cls);
	for (size_t i = 0; i < rp.nr_st; i++)
		free(rp.st[i].file);
	free(rp.st);
	free(meta);
	if (dirfd >= 0)
		close(dirfd);
	return status;
}
