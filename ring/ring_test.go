package ring

import (
	"testing"

	"github.com/ringlog/ringlog/internal/testenv"
)

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Kind
		bad  bool
	}{
		{"", KindAuto, false},
		{"auto", KindAuto, false},
		{" AUTO ", KindAuto, false},
		{"io_uring", KindIOUring, false},
		{"iouring", KindIOUring, false},
		{"uring", KindIOUring, false},
		{"pwritev", KindPortable, false},
		{"Portable", KindPortable, false},
		{"epoll", "", true},
	} {
		got, err := ParseKind(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseKind(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNewEnvOverride(t *testing.T) {
	t.Run("auto+env=pwritev", func(t *testing.T) {
		t.Setenv(EnvBackend, "pwritev")
		b, fallback, err := New(Options{Kind: KindAuto})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Name() != "pwritev" || fallback != "" {
			t.Fatalf("got %s (fallback %q), want pwritev", b.Name(), fallback)
		}
	})
	t.Run("portable+env=io_uring", func(t *testing.T) {
		// An explicit kind is never overridden by the environment.
		t.Setenv(EnvBackend, "io_uring")
		b, _, err := New(Options{Kind: KindPortable})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Name() != "pwritev" {
			t.Fatalf("got %s, want pwritev (the explicit kind)", b.Name())
		}
	})
	t.Run("bad-env", func(t *testing.T) {
		t.Setenv(EnvBackend, "nope")
		if b, _, err := New(Options{}); err == nil {
			b.Close()
			t.Fatal("New with RINGLOG_BACKEND=nope succeeded")
		}
	})
	t.Run("auto", func(t *testing.T) {
		t.Setenv(EnvBackend, "")
		b, fallback, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		_, perr := Probe()
		switch {
		case perr == nil && b.Name() != "hybrid":
			t.Fatalf("io_uring probes fine but auto chose %s (%s)", b.Name(), fallback)
		case perr != nil && (b.Name() != "hybrid-nouring" || fallback == ""):
			t.Fatalf("io_uring unavailable (%v) but auto chose %s, fallback %q", perr, b.Name(), fallback)
		case perr != nil && testenv.Required(testenv.IOURing):
			t.Fatalf("io_uring unavailable (%v; required: %s is set): auto fell back to %s", perr, testenv.IOURing, b.Name())
		}
		t.Logf("auto: %s %s", b.Name(), fallback)
	})
	t.Run("env=io_uring", func(t *testing.T) {
		t.Setenv(EnvBackend, "io_uring")
		b, _, err := New(Options{Kind: KindAuto})
		if _, perr := Probe(); perr != nil {
			if err == nil {
				t.Fatal("KindIOUring succeeded without io_uring")
			}
			testenv.Missing(t, testenv.IOURing, "io_uring unavailable: %v", perr)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Name() != "io_uring" {
			t.Fatalf("got %s, want io_uring", b.Name())
		}
	})
}

func TestFeatureNames(t *testing.T) {
	if got := FeatureNames(1 | 2 | 1<<31); got != "SINGLE_MMAP|NODROP|bit31" {
		t.Fatalf("FeatureNames = %q", got)
	}
	if got := FeatureNames(0); got != "" {
		t.Fatalf("FeatureNames(0) = %q", got)
	}
}
