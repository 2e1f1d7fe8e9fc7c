/* A test plugin of `tracepad calls` (--plugin PATH[:ARGS]): counts the callbacks it gets and
 * checks what they carry (the call object passed back at return, args and return values of
 * tpc_add), then prints one line of counts in fini() for the test to compare. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <tracepad/plugin.h>

struct counts {
	const struct tracepad_host *host;
	char args[64];
	unsigned long calls, rets, add_calls, add_rets, bad, proc_start, proc_exit, thr_start;
	unsigned long crash_at; /* ARGS "crash=N": fault at the Nth call, as a buggy plugin would */
	uint64_t add_sum;
};

static void on_call(void *priv, struct tracepad_call *c)
{
	struct counts *n = priv;

	n->calls++;
	if (n->calls == n->crash_at)
		*(volatile int *)c->user = 1; /* c->user is NULL at entry */
	if (c->user)
		n->bad++;
	c->user = n;
	if (!strcmp(c->function, "tpc_add")) {
		uint8_t b[6];

		n->add_calls++;
		/* the real return address: right after a call (e8 rel32, or ff 15 through the
		 * GOT), never the return trampoline's */
		if (n->host->read(n->host->ctx, c->pid, c->caller - 6, b, 6) != 6 ||
		    (b[1] != 0xe8 && (b[0] != 0xff || b[1] != 0x15)))
			n->bad++;
	}
}

static void on_ret(void *priv, struct tracepad_call *c)
{
	struct counts *n = priv;

	n->rets++;
	if (c->user != n || c->return_ns < c->entry_ns)
		n->bad++;
	if (!strcmp(c->function, "tpc_add")) {
		n->add_rets++;
		n->add_sum += (uint32_t)c->retval;
		if ((int)c->retval != (int)c->args[0] + (int)c->args[1])
			n->bad++;
	}
}

static void on_process(void *priv, int pid, enum tracepad_proc_event ev)
{
	struct counts *n = priv;

	if (ev == TRACEPAD_PROC_START)
		n->proc_start++;
	else if (ev == TRACEPAD_PROC_EXIT)
		n->proc_exit++;
}

static void on_thread(void *priv, int pid, int tid, enum tracepad_thread_event ev)
{
	struct counts *n = priv;

	if (ev == TRACEPAD_THREAD_START)
		n->thr_start++;
}

static void on_fini(void *priv)
{
	struct counts *n = priv;

	fprintf(n->host->out,
		"tpcalls-plugin args=%s calls=%lu rets=%lu add_calls=%lu add_rets=%lu "
		"add_sum=%" PRIu64 " bad=%lu proc_start=%lu proc_exit=%lu thread_start=%lu\n",
		n->args, n->calls, n->rets, n->add_calls, n->add_rets, n->add_sum, n->bad,
		n->proc_start, n->proc_exit, n->thr_start);
	free(n);
}

__attribute__((visibility("default"))) int tracepad_plugin_init(const struct tracepad_host *host,
								const char *args,
								struct tracepad_plugin *plugin)
{
	struct counts *n;
	int err;

	if (host->abi != TRACEPAD_PLUGIN_ABI)
		return -22;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -12;
	n->host = host;
	snprintf(n->args, sizeof(n->args), "%s", args ? args : "(none)");
	if (args && !strncmp(args, "crash=", 6))
		n->crash_at = strtoul(args + 6, NULL, 10);
	/* The plugin asks for tpc_add itself: the test passes no -e for it. */
	err = host->select(host->ctx, "libtpcalls:tpc_add");
	if (err) {
		free(n);
		return err;
	}
	plugin->name = "tpcalls-plugin";
	plugin->priv = n;
	plugin->call = on_call;
	plugin->ret = on_ret;
	plugin->process = on_process;
	plugin->thread = on_thread;
	plugin->fini = on_fini;
	return 0;
}
