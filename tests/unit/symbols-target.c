/* Target of test-symbols: functions at known lines, built at -O0 with debug info (and
 * stripped, and non-PIE).  Prints where its code is, then waits until stdin closes so that
 * the test can read its mappings. */
#include <stdio.h>

int tp_target_counter;
static void *beta_here;
static int beta_line;

/* gcc gives the prologue of a function the line of its opening brace. */
enum { ALPHA_LINE = __LINE__ + 2 };
int tp_target_alpha(int x)
{
	int y = x * 3;

	tp_target_counter += y;
	return y + 1;
}

/* Records the address of a statement in its middle, and that statement's line. */
void tp_target_beta(int x)
{
	if (x > 100)
		tp_target_counter--;
	beta_here = &&here;
here:
	tp_target_counter += x, beta_line = __LINE__;
}

int main(void)
{
	char buf[64];

	tp_target_beta(1);
	printf("alpha %p %d\n", (void *)tp_target_alpha, (int)ALPHA_LINE);
	printf("beta %p %d\n", beta_here, beta_line);
	printf("main %p\n", (void *)main);
	fflush(stdout);
	while (fgets(buf, sizeof(buf), stdin))
		;
	return tp_target_alpha(0) == 1 ? 0 : 1;
}
