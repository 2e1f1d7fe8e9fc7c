/* e2e target: a JIT that writes and rewrites its code in place on RWX pages, never calling
 * mprotect: a function f on one page is rewritten each round (a different constant and
 * length) and called, directly and through g, on another page, which calls it with a
 * direct call; then f's new code comes into the page through read(2) from a pipe, and
 * getcwd(2) writes into it.  Each result is checked.
 * Usage: jit [ROUNDS]   prints the rounds, the sum of the results and the wrong ones;
 * exit 0 when none was wrong */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef long (*fn_t)(long);

/* f(x) = x + k: @nops nops, lea k(%rdi), %rax, ret; its length */
static size_t emit_f(unsigned char *p, int k, int nops)
{
	size_t n = 0;

	for (int i = 0; i < nops; i++)
		p[n++] = 0x90;
	p[n++] = 0x48;
	p[n++] = 0x8d;
	p[n++] = 0x87;
	memcpy(p + n, &k, 4);
	n += 4;
	p[n++] = 0xc3;
	return n;
}

/* g(x) = f(x) * 2 + 1: push; call f (rel32); lea 1(%rax,%rax), %rax; pop; ret */
static void emit_g(unsigned char *p, const unsigned char *f)
{
	int rel = (int)(f - (p + 6));

	p[0] = 0x51; /* push %rcx: the stack aligned for the call */
	p[1] = 0xe8;
	memcpy(p + 2, &rel, 4);
	memcpy(p + 6, "\x48\x8d\x44\x00\x01", 5);
	p[11] = 0x59;
	p[12] = 0xc3;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 300, sum = 0, bad = 0;
	unsigned char *pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE | PROT_EXEC,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char code[64];
	fn_t f, g;
	int fds[2];

	if (pages == MAP_FAILED || pipe(fds))
		return 2;
	f = (fn_t)(void *)pages;
	g = (fn_t)(void *)(pages + 4096);
	emit_g(pages + 4096, pages);
	for (long i = 0; i < rounds; i++) {
		int k = (int)(i * 7 + 1);
		long r1, r2;

		emit_f(pages, k, (int)(i % 4));
		r1 = f(i);
		r2 = g(i);
		bad += r1 != i + k || r2 != (i + k) * 2 + 1;
		sum += r1 + r2;
	}
	for (long i = 0; i < 20; i++) {
		int k = (int)(1000 + i);
		size_t n = emit_f(code, k, (int)(i % 3));
		long r1, r2;

		if (write(fds[1], code, n) != (ssize_t)n || read(fds[0], pages, n) != (ssize_t)n)
			return 3;
		r1 = f(i);
		r2 = g(i);
		bad += r1 != i + k || r2 != (i + k) * 2 + 1;
		sum += r1 + r2;
	}
	/* a system call that writes into f's page, not one of the read family */
	sum += f(0);
	bad += syscall(SYS_getcwd, pages + 2048, 2048) <= 0;
	printf("jit %ld rounds, sum %ld, wrong %ld\n", rounds, sum, bad);
	return bad != 0;
}
