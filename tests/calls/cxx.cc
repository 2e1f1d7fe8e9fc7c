// C++ target of `tracepad calls` (calls-cxx.py): functions in a namespace, overloads, two
// instances of a template and a class's methods, each printing what it computed, for
// demangled output and -e patterns by source names.
#include <cstdio>
#include <cstdlib>

#define NI __attribute__((noinline, noipa))

namespace ns {
class Widget {
public:
	explicit Widget(int v) : v_(v) {}
	NI int get() const { return v_; }
	NI int get(int k) const { return v_ * k; }
	NI void set(int v) { v_ = v; }

private:
	int v_;
};

template <typename T> NI T twice(T x)
{
	return x + x;
}

NI long sum(int a, long b)
{
	return a + b;
}

NI double sum(double a, double b)
{
	return a + b;
}

// The caller chain of -C: outer -> middle -> ns::Widget::get(int) const, and siblings.
NI int middle(const Widget &w, int k)
{
	return w.get(k) + twice(k);
}

NI int outer(const Widget &w, int k)
{
	return middle(w, k) + static_cast<int>(sum(k, 1L));
}
} // namespace ns

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	ns::Widget w(7);

	for (int i = 0; i < n; i++) {
		w.set(i + 1);
		std::printf("get %d = %d\n", i, w.get());
		std::printf("get(k) %d = %d\n", i, w.get(i));
		std::printf("twice<int> %d = %d\n", i, ns::twice(i));
		std::printf("twice<long> %d = %ld\n", i, ns::twice(static_cast<long>(i) * 1000));
		std::printf("sum %d = %ld\n", i, ns::sum(i, 10L));
		std::printf("sum(double) %d = %g\n", i, ns::sum(i * 0.5, 1.0));
		std::printf("outer %d = %d\n", i, ns::outer(w, i));
	}
	return 0;
}
