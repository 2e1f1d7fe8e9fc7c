/* A library that loop-dl opens with dlopen: g(i) is what the pending tracepoint waits for. */
__attribute__((noinline, visibility("default"))) int g(int i)
{
	return i * 5 + 1;
}
