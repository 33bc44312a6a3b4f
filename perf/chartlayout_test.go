package perf

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"strings"
	"testing"

	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
)

// layoutCanvas is a vg.Canvas that draws nothing: it records where each
// text and each straight stroked segment lands on the page (after the
// transforms in force), so a test can check a chart's layout with the
// same font metrics gonum laid it out with.
type layoutCanvas struct {
	m     affine
	stack []affine
	texts []placedText
	lines []segment
}

// affine maps (x, y) to (a*x + c*y + e, b*x + d*y + f).
type affine struct{ a, b, c, d, e, f float64 }

func (m affine) apply(p vg.Point) (float64, float64) {
	x, y := float64(p.X), float64(p.Y)
	return m.a*x + m.c*y + m.e, m.b*x + m.d*y + m.f
}

// then is m followed, in the local frame, by n (n applied first).
func (m affine) then(n affine) affine {
	return affine{
		a: m.a*n.a + m.c*n.b, b: m.b*n.a + m.d*n.b,
		c: m.a*n.c + m.c*n.d, d: m.b*n.c + m.d*n.d,
		e: m.a*n.e + m.c*n.f + m.e, f: m.b*n.e + m.d*n.f + m.f,
	}
}

type box struct{ x0, y0, x1, y1 float64 }

func (b box) overlaps(o box, slack float64) bool {
	return b.x0+slack < o.x1 && o.x0+slack < b.x1 && b.y0+slack < o.y1 && o.y0+slack < b.y1
}

type placedText struct {
	text string
	box  box
}

type segment struct{ x0, y0, x1, y1 float64 }

func newLayoutCanvas() *layoutCanvas { return &layoutCanvas{m: affine{a: 1, d: 1}} }

// Size implements vg.CanvasSizer: the charts' canvas.
func (c *layoutCanvas) Size() (vg.Length, vg.Length) { return chartWidth, chartHeight }

func (c *layoutCanvas) SetLineWidth(vg.Length)             {}
func (c *layoutCanvas) SetLineDash([]vg.Length, vg.Length) {}
func (c *layoutCanvas) SetColor(color.Color)               {}
func (c *layoutCanvas) Rotate(rad float64) {
	s, co := math.Sincos(rad)
	c.m = c.m.then(affine{a: co, b: s, c: -s, d: co})
}
func (c *layoutCanvas) Translate(pt vg.Point) {
	c.m = c.m.then(affine{a: 1, d: 1, e: float64(pt.X), f: float64(pt.Y)})
}
func (c *layoutCanvas) Scale(x, y float64) { c.m = c.m.then(affine{a: x, d: y}) }
func (c *layoutCanvas) Push()              { c.stack = append(c.stack, c.m) }
func (c *layoutCanvas) Pop() {
	c.m = c.stack[len(c.stack)-1]
	c.stack = c.stack[:len(c.stack)-1]
}
func (c *layoutCanvas) Fill(vg.Path)                        {}
func (c *layoutCanvas) DrawImage(vg.Rectangle, image.Image) {}

func (c *layoutCanvas) Stroke(p vg.Path) {
	var last vg.Point
	have := false
	for _, comp := range p {
		switch comp.Type {
		case vg.MoveComp:
			last, have = comp.Pos, true
		case vg.LineComp:
			if have {
				x0, y0 := c.m.apply(last)
				x1, y1 := c.m.apply(comp.Pos)
				c.lines = append(c.lines, segment{x0, y0, x1, y1})
			}
			last, have = comp.Pos, true
		default:
			have = false // arcs and curves: markers, not lines text could sit on
		}
	}
}

func (c *layoutCanvas) FillString(f font.Face, pt vg.Point, text string) {
	if strings.TrimSpace(text) == "" {
		return
	}
	ext := f.Extents()
	w := f.Width(text)
	// The font's ascent leaves room for accents above capitals and
	// digits; the glyphs charts use reach about 0.8 of it.
	top := ext.Ascent * 4 / 5
	var b box
	for i, corner := range []vg.Point{
		{X: pt.X, Y: pt.Y - ext.Descent}, {X: pt.X + w, Y: pt.Y - ext.Descent},
		{X: pt.X, Y: pt.Y + top}, {X: pt.X + w, Y: pt.Y + top},
	} {
		x, y := c.m.apply(corner)
		if i == 0 {
			b = box{x, y, x, y}
			continue
		}
		b = box{math.Min(b.x0, x), math.Min(b.y0, y), math.Max(b.x1, x), math.Max(b.y1, y)}
	}
	c.texts = append(c.texts, placedText{text: text, box: b})
}

// crosses reports whether s passes through the inside of b (shrunk by
// slack on every side).
func (s segment) crosses(b box, slack float64) bool {
	b = box{b.x0 + slack, b.y0 + slack, b.x1 - slack, b.y1 - slack}
	if b.x0 >= b.x1 || b.y0 >= b.y1 {
		return false
	}
	// Liang–Barsky clipping of the segment against the box.
	t0, t1 := 0.0, 1.0
	dx, dy := s.x1-s.x0, s.y1-s.y0
	for _, pq := range [][2]float64{{-dx, s.x0 - b.x0}, {dx, b.x1 - s.x0}, {-dy, s.y0 - b.y0}, {dy, b.y1 - s.y0}} {
		p, q := pq[0], pq[1]
		if p == 0 {
			if q < 0 {
				return false
			}
			continue
		}
		r := q / p
		if p < 0 {
			t0 = math.Max(t0, r)
		} else {
			t1 = math.Min(t1, r)
		}
		if t0 > t1 {
			return false
		}
	}
	return true
}

// layoutProblems draws c on a layoutCanvas and lists the texts that
// overlap another text, cross a drawn line, or leave the canvas.
func layoutProblems(t *testing.T, c Chart) []string {
	t.Helper()
	lc := newLayoutCanvas()
	if err := c.draw(lc); err != nil {
		t.Fatalf("chart %q: %v", c.Title, err)
	}
	if len(lc.texts) == 0 {
		t.Fatalf("chart %q: no text recorded", c.Title)
	}
	var out []string
	const slack = 0.5 // points: glyph boxes that merely touch are fine
	for i, a := range lc.texts {
		if a.box.x0 < 0 || a.box.y0 < 0 || a.box.x1 > float64(chartWidth) || a.box.y1 > float64(chartHeight) {
			out = append(out, fmt.Sprintf("%q leaves the canvas (%+v)", a.text, a.box))
		}
		for _, b := range lc.texts[i+1:] {
			if a.box.overlaps(b.box, slack) {
				out = append(out, fmt.Sprintf("%q overlaps %q", a.text, b.text))
			}
		}
		for _, s := range lc.lines {
			if s.crosses(a.box, 1) {
				out = append(out, fmt.Sprintf("%q sits on a line (%.0f,%.0f)-(%.0f,%.0f)", a.text, s.x0, s.y0, s.x1, s.y1))
				break
			}
		}
	}
	return out
}

// TestChartLayout draws every chart the suite and a sweep draw, from
// synthetic results (a wide range of values, long legend names, a
// sub-millisecond latency curve), and checks that no text overlaps
// another text's box or crosses a gridline, axis or series line, that
// the log axis labels its decades down to 0.01 ms, and that linear axes
// carry at least five labels.
func TestChartLayout(t *testing.T) {
	dir := t.TempDir()
	sr := fakeSuite(dir)
	charts := sr.chartSet()
	c := DefaultConfig(ModeProduce)
	var tp, lat []*Result
	for _, prods := range []int{1, 2, 4} {
		for _, parts := range []int{1, 2, 4, 8, 16, 32, 64} {
			cc := c
			cc.Producers, cc.Partitions = prods, parts
			tp = append(tp, &Result{Mode: ModeProduce, Config: cc, MBPerSec: float64(100 * prods * parts), RecordsPerSec: float64(90000 * prods * parts)})
		}
	}
	for i, rate := range []float64{10000, 50000, 100000, 200000, 400000} {
		f := float64(i + 1)
		lat = append(lat, &Result{Mode: ModeE2E, Config: c, OfferedRate: rate,
			E2ELatency: &Latency{P50: 0.02 * f, P99: 0.3 * f, P999: 1.5 * f, P9999: 4 * f, Max: 25 * f}})
	}
	charts = append(charts, scaleChartSet(c, tp, lat)...)
	if len(charts) < 8 {
		t.Fatalf("%d charts, want the suite's 5 and a sweep's 4", len(charts))
	}
	for _, nc := range charts {
		if probs := layoutProblems(t, nc.chart); len(probs) > 0 {
			t.Errorf("%s: %d layout problems:\n  %s", nc.name, len(probs), strings.Join(probs, "\n  "))
		}
		lc := newLayoutCanvas()
		if err := nc.chart.draw(lc); err != nil {
			t.Fatal(err)
		}
		labels := map[string]bool{}
		for _, tx := range lc.texts {
			labels[tx.text] = true
		}
		if nc.chart.LogY && minY(nc.chart) < 0.1 {
			for _, want := range []string{"0.01", "0.1", "1", "10"} {
				if !labels[want] {
					t.Errorf("%s: the log axis has no %q label (labels %v)", nc.name, want, keys(labels))
				}
			}
		}
	}
	// A linear axis from 0 to 650 gets at least five labels.
	var n int
	for _, tk := range (plainTicks{}).Ticks(0, 650) {
		if tk.Label != "" {
			n++
		}
	}
	if n < 5 || n > 11 {
		t.Errorf("plainTicks(0, 650) has %d labels, want 5 to 11", n)
	}
	// Degenerate ranges end, with something to show.
	for _, r := range [][2]float64{{0, 5e-324}, {-1.7e308, 1.7e308}, {3, 3}, {1, 1 + 1e-15}} {
		if ts := (plainTicks{}).Ticks(r[0], r[1]); len(ts) == 0 || len(ts) > 50 {
			t.Errorf("plainTicks(%g, %g): %d ticks", r[0], r[1], len(ts))
		}
	}
	var labels []string
	for _, tk := range (logTicks{}).Ticks(0.01, 1000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if strings.Join(labels, " ") != "0.01 0.1 1 10 100 1000" {
		t.Errorf("logTicks(0.01, 1000) labels %q", labels)
	}
}

// minY is the smallest Y value of c's series.
func minY(c Chart) float64 {
	m := math.Inf(1)
	for _, s := range c.Series {
		for _, y := range s.Y {
			m = math.Min(m, y)
		}
	}
	return m
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
