/* tracepad dump: print the events of a trace one a line, in time order, as text or as JSON
 * lines, with code addresses resolved through the trace's .maps file and the events of static
 * tracepoints formatted through its .formats file. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/filter.h"
#include "cli/opts.h"
#include "base/text.h"

static const char usage_text[] =
    "usage: tracepad dump [OPTIONS] DIR\n"
    "\n"
    "Print the events of the trace in DIR one a line, in time order: local time,\n"
    "time since the first event, pid/tid, event name and fields as name=value.\n"
    "\n"
    "  --json          one JSON object a line\n"
    "  -o FILE         write to FILE instead of standard output\n"
    "  -e, --class GLOB  only events whose name matches: comma-separated globs, '!'\n"
    "                  excludes; repeatable\n"
    "  --pid LIST, --tid LIST  only events of these pids, of these tids (comma-separated)\n"
    "  --from S, --to S  only events from S, up to S seconds after the trace's first event\n"
    "  -h, --help      show this help\n"
    "\n"
    "The second column counts from the trace's first event, shown or not.\n"
    "Integer fields named pc, ip, addr or ending in _addr are code addresses: they are\n"
    "shown as object:function+offset when DIR holds a .maps file, else in hex.\n"
    "Events of static tracepoints (tracepad markers record) end with text=\"...\" (JSON:\n"
    "\"text\"), their format string applied to their fields, from DIR/.formats.\n";

struct dump {
	struct tp_cli_trace t;
	struct tp_cli_filter filter;
	FILE *out;
	bool json;
	uint64_t t0;
	const struct tp_trace_event *ev;
	char text[4096]; /* of a static tracepoint's event */
	int text_len;	 /* -1: none */
};

/* The formatted text of the current event if it is a static tracepoint's with a known format
 * (cut at the buffer's size). */
static void marker_text(struct dump *d)
{
	int n = tp_trace_marker_text(d->t.formats, d->ev, d->text, sizeof(d->text));

	d->text_len = n < 0 ? -1 : n < (int)sizeof(d->text) ? n : (int)sizeof(d->text) - 1;
}

static void put_pid(FILE *f, int64_t v)
{
	if (v < 0)
		fputs("null", f);
	else
		fprintf(f, "%" PRId64, v);
}

static void dump_text(struct dump *d, const struct tp_trace_event *ev)
{
	char when[64], rel[32], sym[512];

	tp_trace_fmt_time(ev->ts, when, sizeof(when));
	tp_trace_fmt_secs(ev->ts - d->t0, rel, sizeof(rel));
	fprintf(d->out, "%s +%s ", when, rel);
	if (ev->pid < 0 && ev->tid < 0)
		fputc('-', d->out);
	else
		fprintf(d->out, "%" PRId64 "/%" PRId64, ev->pid, ev->tid);
	fputc(' ', d->out);
	tp_trace_print_name(d->out, ev->name, false);
	for (uint32_t i = 0; i < ev->nr_fields; i++) {
		const struct tp_trace_field *f = &ev->fields[i];

		if (tp_trace_field_hidden(ev, i))
			continue;
		fputc(' ', d->out);
		tp_trace_print_name(d->out, f->name, false);
		fputc('=', d->out);
		if (f->type == TP_TRACE_INT && tp_trace_is_addr_field(f->name)) {
			if (!tp_trace_resolve_addr(d->t.syms, f->u, sym, sizeof(sym)))
				fputs(sym, d->out);
			else
				fprintf(d->out, "0x%" PRIx64,
					f->bits < 64 ? f->u & ((UINT64_C(1) << f->bits) - 1)
						     : f->u);
			continue;
		}
		tp_trace_print_value(d->out, f);
	}
	marker_text(d);
	if (d->text_len >= 0) {
		fputs(" text=", d->out);
		tp_trace_print_text(d->out, d->text, (size_t)d->text_len);
	}
	fputc('\n', d->out);
}

static void dump_json(struct dump *d, const struct tp_trace_event *ev)
{
	char when[64], sym[512];
	bool any = false;

	tp_trace_fmt_time(ev->ts, when, sizeof(when));
	fprintf(d->out,
		"{\"time\": \"%s\", \"ts\": %" PRIu64 ", \"rel_ns\": %" PRIu64
		", \"stream\": %" PRIu32 ", \"pid\": ",
		when, ev->ts, ev->ts - d->t0, ev->stream);
	put_pid(d->out, ev->pid);
	fputs(", \"tid\": ", d->out);
	put_pid(d->out, ev->tid);
	fputs(", \"name\": ", d->out);
	tp_json_str(d->out, ev->name, strlen(ev->name));
	fputs(", \"fields\": {", d->out);
	for (uint32_t i = 0; i < ev->nr_fields; i++) {
		if (tp_trace_field_hidden(ev, i))
			continue;
		if (any)
			fputs(", ", d->out);
		any = true;
		tp_json_str(d->out, ev->fields[i].name, strlen(ev->fields[i].name));
		fputs(": ", d->out);
		tp_trace_print_json(d->out, &ev->fields[i]);
	}
	fputc('}', d->out);
	marker_text(d);
	if (d->text_len >= 0) {
		fputs(", \"text\": ", d->out);
		tp_json_str(d->out, d->text, (size_t)d->text_len);
	}
	any = false;
	for (uint32_t i = 0; d->t.syms && i < ev->nr_fields; i++) {
		const struct tp_trace_field *f = &ev->fields[i];

		if (f->type != TP_TRACE_INT || !tp_trace_is_addr_field(f->name) ||
		    tp_trace_resolve_addr(d->t.syms, f->u, sym, sizeof(sym)))
			continue;
		fputs(any ? ", " : ", \"symbols\": {", d->out);
		any = true;
		tp_json_str(d->out, f->name, strlen(f->name));
		fputs(": ", d->out);
		tp_json_str(d->out, sym, strlen(sym));
	}
	fputs(any ? "}}\n" : "}\n", d->out);
}

int cmd_dump(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"json", no_argument, NULL, 'J'},	    {"class", required_argument, NULL, 'e'},
	    {"pid", required_argument, NULL, 'P'},  {"tid", required_argument, NULL, 'T'},
	    {"from", required_argument, NULL, 'F'}, {"to", required_argument, NULL, 'U'},
	    {"help", no_argument, NULL, 'h'},	    {NULL, 0, NULL, 0},
	};
	const struct tp_trace_event *ev;
	struct dump d = {.json = false};
	const char *outfile = NULL;
	uint64_t discarded;
	int opt, err, status = 0;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "o:e:h", longopts, NULL)) != -1) {
		enum tp_cli_filter_kind kind;

		switch (opt) {
		case 'e':
		case 'P':
		case 'T':
		case 'F':
		case 'U':
			kind = opt == 'e'   ? TP_FILTER_CLASS
			       : opt == 'P' ? TP_FILTER_PID
			       : opt == 'T' ? TP_FILTER_TID
			       : opt == 'F' ? TP_FILTER_FROM
					    : TP_FILTER_TO;
			status = tp_cli_filter_add(&d.filter, "dump", kind, optarg);
			if (status) {
				tp_cli_filter_free(&d.filter);
				return status;
			}
			break;
		case 'J':
			d.json = true;
			break;
		case 'o':
			outfile = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		default:
			tp_cli_filter_free(&d.filter);
			return tp_cli_bad_option("dump", argv, "o:e:h");
		}
	}
	if (d.filter.from_ns > d.filter.to_ns) {
		tp_cli_error("dump", "--from is after --to");
		tp_cli_filter_free(&d.filter);
		return 2;
	}
	if (optind != argc - 1) {
		tp_cli_filter_free(&d.filter);
		tp_cli_error("dump", optind == argc ? "no trace directory (tracepad dump DIR)"
						    : "one trace directory at a time");
		return 2;
	}
	status = tp_cli_trace_open(&d.t, "dump", argv[optind], true);
	if (status) {
		tp_cli_filter_free(&d.filter);
		return status;
	}
	d.out = tp_cli_result_open("dump", outfile, stdout);
	if (!d.out) {
		tp_cli_trace_close(&d.t);
		tp_cli_filter_free(&d.filter);
		return 2;
	}
	d.t.salvage = true;
	while ((err = tp_cli_trace_next(&d.t, &ev)) > 0) {
		if (d.t.nr_events == 1)
			d.t0 = ev->ts;
		if (!tp_cli_filter_match(&d.filter, ev, d.t0))
			continue;
		d.ev = ev;
		if (d.json)
			dump_json(&d, ev);
		else
			dump_text(&d, ev);
	}
	if (err < 0)
		status = 2;
	discarded = tp_trace_reader_discarded(d.t.r);
	/* a corrupt stream is said on stderr: what was read of the trace is still the result */
	if (tp_cli_out_close("dump", d.out, outfile, true) && !status)
		status = 1;
	if (discarded && !status)
		tp_cli_error("dump",
			     "warning: the producers discarded %" PRIu64
			     " events (tracepad report shows which streams)",
			     discarded);
	tp_cli_trace_close(&d.t);
	tp_cli_filter_free(&d.filter);
	return status;
}
