package perf

import (
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rsvgConvert returns the path of rsvg-convert (Debian's librsvg2-bin),
// skipping the test when it is missing, or failing it when
// RINGLOG_REQUIRE_RSVG is set (as .ci/run does).
func rsvgConvert(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("rsvg-convert")
	if err != nil {
		if os.Getenv("RINGLOG_REQUIRE_RSVG") != "" {
			t.Fatalf("rsvg-convert not found and RINGLOG_REQUIRE_RSVG is set: install librsvg2-bin")
		}
		t.Skip("rsvg-convert not found (apt-get install librsvg2-bin); charts not rendered")
	}
	return p
}

// renderPNG renders an SVG to PNG with rsvg-convert and decodes it.
func renderPNG(t *testing.T, rsvg, svg string) image.Image {
	t.Helper()
	out := strings.TrimSuffix(svg, ".svg") + ".png"
	if b, err := exec.Command(rsvg, "-b", "white", "-o", out, svg).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert %s: %v: %s", svg, err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	return img
}

// inkOnEdge returns which of the image's outer bands (3 px wide) hold
// anything but background: text or lines cut off at the canvas edge.
func inkOnEdge(img image.Image) []string {
	b := img.Bounds()
	const band = 3
	ink := func(x, y int) bool {
		r, g, bl, _ := img.At(x, y).RGBA()
		return r < 0xe000 || g < 0xe000 || bl < 0xe000
	}
	var edges []string
	check := func(name string, x0, x1, y0, y1 int) {
		for y := y0; y < y1; y++ {
			for x := x0; x < x1; x++ {
				if ink(x, y) {
					edges = append(edges, name)
					return
				}
			}
		}
	}
	check("top", b.Min.X, b.Max.X, b.Min.Y, b.Min.Y+band)
	check("bottom", b.Min.X, b.Max.X, b.Max.Y-band, b.Max.Y)
	check("left", b.Min.X, b.Min.X+band, b.Min.Y, b.Max.Y)
	check("right", b.Max.X-band, b.Max.X, b.Min.Y, b.Max.Y)
	return edges
}

// TestChartsRenderUnclipped draws the suite's and a sweep's charts from
// synthetic results, renders them to PNG and checks that nothing touches
// the canvas edges (a clipped title or last x tick label does), and that
// the SVGs carry the labels a reader needs.
func TestChartsRenderUnclipped(t *testing.T) {
	rsvg := rsvgConvert(t)
	dir := t.TempDir()
	sr := fakeSuite(dir)
	var fails []string
	files := sr.charts(dir, func(what string, err error) { fails = append(fails, what+": "+err.Error()) })
	if len(fails) > 0 {
		t.Fatalf("charts failed: %v", fails)
	}
	if len(files) != 5 {
		t.Fatalf("suite charts = %v, want 5", files)
	}
	// A sweep of a single partition count (--sweep-partitions 1) and
	// a single load point.
	c := DefaultConfig(ModeProduce)
	c.Partitions = 1
	one := &Result{Mode: ModeProduce, Config: c, MBPerSec: 300, RecordsPerSec: 300000}
	lat := &Result{Mode: ModeE2E, Config: c, OfferedRate: 1000, E2ELatency: &Latency{P50: 0.5, P99: 0.9, P999: 1, P9999: 1.1, Max: 2}}
	scaleDir := filepath.Join(dir, "scale")
	if err := os.Mkdir(scaleDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sfiles, err := scaleCharts(scaleDir, c, []*Result{one}, []*Result{lat})
	if err != nil {
		t.Fatalf("scale charts of one partition count: %v", err)
	}
	for i := range files {
		files[i] = filepath.Join(dir, files[i])
	}
	for _, f := range append(files, sfiles...) {
		img := renderPNG(t, rsvg, f)
		if edges := inkOnEdge(img); len(edges) > 0 {
			t.Errorf("%s: drawing reaches the %v edge(s) of the canvas: something is clipped", filepath.Base(f), edges)
		}
		svg, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(svg)
		if strings.Contains(s, "MiB") || strings.Contains(s, ".00<") {
			t.Errorf("%s: unit label or tick labels not plain (MiB or .00 present)", filepath.Base(f))
		}
	}
	tp, err := os.ReadFile(filepath.Join(dir, "throughput_vs_partitions.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">1000<", ">64<", ">MB/s<", ">500<"} {
		if !strings.Contains(string(tp), want) {
			t.Errorf("throughput_vs_partitions.svg lacks %q", want)
		}
	}
}

func TestTickLabels(t *testing.T) {
	for _, c := range []struct {
		v, step, top float64
		want         string
	}{
		{500, 100, 700, "500"},
		{0, 100, 700, "0"},
		{0, 1e6, 3e6, "0"},
		{0.5, 0.25, 1, "0.50"},
		{2.5, 0.5, 3, "2.5"},
		{800000, 200000, 900000, "800k"},
		{1.5e6, 5e5, 2e6, "1.5M"},
	} {
		if got := tickLabel(c.v, c.step, c.top); got != c.want {
			t.Errorf("tickLabel(%g, %g, %g) = %q, want %q", c.v, c.step, c.top, got, c.want)
		}
	}
}
