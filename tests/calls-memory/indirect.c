/* Target of the memory plugin's tests: every kind of block memcheck tells apart, each from its
 * own function so that the report's backtraces say which is which:
 *   definitely lost: lose_list's head (16 bytes), lose_ring's first node (48), lose_big's
 *     mmapped block (300000), lose_interior's holder (24), the thread's lost block (55);
 *   indirectly lost: lose_list's 10 nodes (480), 3 ring nodes (144), the small block that only
 *     the lost mmapped one points to (40), lose_interior's block pointed into at +8 (64);
 *   possibly lost: a block known only by a pointer into its middle (200), and what it points
 *     to (64);
 *   still reachable: a list kept in a global (16 + 5 * 48), a block only main's stack holds
 *     (77), a block only the second thread's stack holds (333), a kept mmapped block (200000)
 *     and the block it points to (32), stdout's buffer and glibc's own. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct node {
	struct node *next;
	long val;
	char pad[32];
};

struct list {
	struct node *first;
	long n;
};

/* Not static: the compiler must keep stores that another file could read. */
struct list *kept;
char *mid;
void **big_kept;
static void *volatile sink;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int thread_ready;

__attribute__((noinline)) static struct list *make_list(int n)
{
	struct list *l = calloc(1, sizeof(*l));

	for (int i = 0; i < n; i++) {
		struct node *x = calloc(1, sizeof(*x));

		x->val = i;
		x->next = l->first;
		l->first = x;
		l->n++;
	}
	return l;
}

__attribute__((noinline)) static void keep_list(void)
{
	kept = make_list(5);
}

__attribute__((noinline)) static void lose_list(void)
{
	sink = make_list(10);
	sink = NULL;
}

/* A cycle of 4 nodes of one size: whichever memcheck takes as the leader, the totals agree. */
__attribute__((noinline)) static void lose_ring(void)
{
	struct node *first = calloc(1, sizeof(*first)), *x = first;

	for (int i = 0; i < 3; i++) {
		x->next = calloc(1, sizeof(*x));
		x = x->next;
	}
	x->next = first;
	sink = first;
	sink = NULL;
}

/* Blocks above the mmap threshold get their own mapping, which is not a root. */
__attribute__((noinline)) static void lose_big(void)
{
	void **big = malloc(300000);

	memset(big, 0, 300000);
	big[1000] = calloc(1, 40);
	sink = big;
	sink = NULL;
}

__attribute__((noinline)) static void keep_big(void)
{
	big_kept = calloc(1, 200000);
	big_kept[77] = calloc(1, 32);
}

__attribute__((noinline)) static void lose_interior(void)
{
	char **holder = calloc(1, 24);

	holder[1] = (char *)calloc(1, 64) + 8;
	sink = holder;
	sink = NULL;
}

__attribute__((noinline)) static void keep_interior(void)
{
	void **p = calloc(1, 200);

	p[0] = calloc(1, 64);
	mid = (char *)p + 50;
}

__attribute__((noinline)) static void thread_leak(void)
{
	sink = calloc(1, 55);
	sink = NULL;
}

__attribute__((noinline)) static void scrub_stack(void)
{
	char buf[32 * 1024];

	explicit_bzero(buf, sizeof(buf));
}

__attribute__((noinline)) static void *thread_main(void *arg)
{
	void *volatile mine = calloc(1, 333);

	thread_leak();
	scrub_stack();
	pthread_mutex_lock(&lock);
	thread_ready = 1;
	pthread_cond_signal(&ready);
	pthread_mutex_unlock(&lock);
	for (;;)
		pause(); /* until the process exits */
	return (void *)mine;
}

int main(void)
{
	void *volatile onstack = calloc(1, 77);
	pthread_t th;

	printf("indirect: start\n");
	keep_list();
	lose_list();
	lose_ring();
	lose_big();
	keep_big();
	lose_interior();
	keep_interior();
	if (pthread_create(&th, NULL, thread_main, NULL))
		return 1;
	pthread_mutex_lock(&lock);
	while (!thread_ready)
		pthread_cond_wait(&ready, &lock);
	pthread_mutex_unlock(&lock);
	scrub_stack();
	printf("indirect: kept %ld nodes, %p\n", kept->n, onstack ? (void *)1 : NULL);
	exit(0);
}
