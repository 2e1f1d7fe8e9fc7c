/* calls-args: arguments and return values that tracepad calls must copy from the program's
 * memory and vector registers at the call (the agent engine) to print them as the ptrace
 * engine does: strings in registers and on the stack, one cut by an unmapped page, an
 * unreadable pointer, a buffer (write), floats, doubles, long double and string returns. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noipa)) int a_stack(long a, long b, long c, long d, long e, long f, const char *g,
				   long h, const char *i)
{
	return (int)(a + b + c + d + e + f + h) + g[0] + i[0];
}

__attribute__((noipa)) int a_str(const char *s)
{
	return s && s != (const char *)16 ? (int)s[0] : -1;
}

__attribute__((noipa)) double a_fp(float f, double d, int i, double e, float g, double h, double j,
				   double k, double l, double m)
{
	return f + d + i + e + g + h + j + k + l + m;
}

__attribute__((noipa)) float r_float(int x)
{
	return (float)x / 4;
}

__attribute__((noipa)) long double r_ldouble(int x)
{
	return (long double)x / 8;
}

__attribute__((noipa)) const char *r_word(int n)
{
	static const char *const w[] = {"", "short", "a string longer than thirty-two characters"};

	return w[n % 3];
}

int main(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char *two =
	    mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *end;
	int sum = 0;

	if (two == MAP_FAILED || munmap(two + page, page))
		return 1;
	/* a string whose bytes run into the unmapped page, without a NUL */
	end = two + page - 5;
	memcpy(end, "edged", 5);
	sum += a_stack(1, 2, 3, 4, 5, 6, "seventh", 8, "ninth\targ");
	sum += a_str("plain");
	sum += a_str(end);
	sum += a_str(end + 3);
	sum += a_str(NULL);
	sum += a_str((const char *)16);
	printf("%d %g %g %Lg\n", sum, a_fp(0.5f, 1.25, 3, -2.5, 1e-3f, 3.0, 4, 5, 6, 1e300),
	       r_float(3), r_ldouble(3));
	for (int n = 0; n < 3; n++)
		printf("%s\n", r_word(n));
	fflush(stdout);
	write(1, "written\n\0bytes", 14);
	return 0;
}
