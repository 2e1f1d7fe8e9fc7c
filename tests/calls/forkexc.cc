// C++ target of calls-agent: a child forked inside a traced frame throws through traced
// frames entered after the fork and then through those entered before it, which it
// inherited with their hooked return addresses.
#include <cstdio>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

#define FX extern "C" __attribute__((noinline, noipa))

FX int fx_thrower(int x)
{
	if (x > 0)
		throw std::runtime_error("x");
	return x;
}

FX int fx_mid(int x)
{
	return fx_thrower(x) + 1;
}

FX int fx_outer(int x)
{
	pid_t p = fork();
	int st = 0;

	if (p == 0) {
		int r = 0;

		try {
			r = fx_mid(x);
		} catch (const std::exception &) {
			r = 100;
		}
		std::printf("child caught %d\n", r);
		std::fflush(stdout);
		throw std::runtime_error("y"); // through fx_outer, hooked before the fork
	}
	waitpid(p, &st, 0);
	std::printf("child exit status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	return 5;
}

int main()
{
	try {
		std::printf("outer %d\n", fx_outer(1));
	} catch (const std::exception &) {
		std::printf("main caught\n");
		std::fflush(stdout);
		_exit(7);
	}
	return 0;
}
